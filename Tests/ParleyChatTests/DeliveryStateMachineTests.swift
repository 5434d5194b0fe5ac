import ParleyChat
import ParleySimulation
import Testing

/// The delivery core, input by input: what an owner sends where and when, and what a stream
/// writes or when it ends.
@Suite struct DeliveryStateMachineTests {
    typealias Machine = DeliveryStateMachine<String, Int64>
    typealias Directive = Machine.Directive

    /// The sends among `directives`, as (gateway, seqs).
    func sends(_ directives: [Directive]) -> [String] {
        directives.compactMap {
            guard case .send(let gateway, let from, let events) = $0 else { return nil }
            return "\(gateway):\(from)…\(from + Int64(events.count) - 1)"
        }
    }

    func reads(_ directives: [Directive]) -> [String] {
        directives.compactMap {
            guard case .readStore(let after, let before) = $0 else { return nil }
            return before == .max ? "after \(after)" : "\(after + 1)..<\(before)"
        }
    }

    @Test func eventsLeaveInSeqOrderOneBatchInFlightPerGateway() {
        let time = ManualTime()
        var machine = Machine(releasedThrough: 0)
        #expect(sends(machine.gateways(["g1", "g2"], now: time.now)).isEmpty)
        #expect(sends(machine.committed(2, 2, now: time.now)).isEmpty, "seq 2 waits for seq 1")
        #expect(sends(machine.committed(1, 1, now: time.now)) == ["g1:1…2", "g2:1…2"])
        #expect(sends(machine.committed(3, 3, now: time.now)).isEmpty, "a batch is in flight to each gateway")
        #expect(sends(machine.acknowledged("g1", through: 2, now: time.now)) == ["g1:3…3"])
        #expect(sends(machine.acknowledged("g2", through: 2, now: time.now)) == ["g2:3…3"])
        #expect(!machine.isIdle)
        _ = machine.acknowledged("g1", through: 3, now: time.now)
        _ = machine.acknowledged("g2", through: 3, now: time.now)
        #expect(machine.isIdle)
    }

    @Test func aFailedBatchIsSentAgainWithABackoff() {
        var time = ManualTime()
        var machine = Machine(releasedThrough: 0)
        _ = machine.gateways(["g1"], now: time.now)
        #expect(sends(machine.committed(1, 1, now: time.now)) == ["g1:1…1"])
        #expect(!machine.needsTicks, "the shell reports the outcome of a batch in flight")
        machine.failed("g1", now: time.now)
        #expect(machine.needsTicks)
        #expect(sends(machine.committed(2, 2, now: time.now)).isEmpty, "nothing goes before the retry delay")
        #expect(sends(machine.tick(now: time.advance(by: .milliseconds(199)))).isEmpty)
        #expect(sends(machine.tick(now: time.advance(by: .milliseconds(1)))) == ["g1:1…2"], "after the retry delay, with what came meanwhile")
        machine.failed("g1", now: time.now)
        #expect(sends(machine.tick(now: time.advance(by: .milliseconds(399)))).isEmpty, "the delay doubled")
        #expect(sends(machine.tick(now: time.advance(by: .milliseconds(1)))) == ["g1:1…2"])
        #expect(sends(machine.acknowledged("g1", through: 2, now: time.now)).isEmpty)
        #expect(!machine.needsTicks && machine.isIdle)
        #expect(sends(machine.tick(now: time.advance(by: .seconds(10)))).isEmpty, "nothing left to resend")
    }

    @Test func aBatchNeitherAcknowledgedNorFailedIsSentAgainAfterTheTimeout() {
        var time = ManualTime()
        var machine = Machine(releasedThrough: 0)
        _ = machine.gateways(["g1"], now: time.now)
        _ = machine.committed(1, 1, now: time.now)
        #expect(machine.hasBatchesInFlight)
        #expect(sends(machine.tick(now: time.advance(by: .milliseconds(999)))).isEmpty)
        #expect(sends(machine.tick(now: time.advance(by: .milliseconds(1)))) == ["g1:1…1"], "lost: sent again at once")
        #expect(sends(machine.acknowledged("g1", through: 1, now: time.now)).isEmpty)
        #expect(machine.isIdle)
    }

    @Test func eventsWithoutASeqGoOutAfterWhatWasReleasedBeforeThem() {
        let time = ManualTime()
        var machine = Machine(releasedThrough: 0)
        _ = machine.gateways(["g1"], now: time.now)
        #expect(sends(machine.committed(1, 1, now: time.now)) == ["g1:1…1"])
        _ = machine.committed(3, 3, now: time.now)
        #expect(sends(machine.published(100, now: time.now)).isEmpty, "behind the batch in flight")
        _ = machine.committed(2, 2, now: time.now)
        let next = machine.acknowledged("g1", through: 1, now: time.now)
        #expect(next.count == 1)
        guard case .send(_, let from, let events) = next.first else { return }
        #expect(from == 2)
        #expect(events == [100, 2, 3], "positions: the published event, then seqs 2 and 3 once released")
    }

    @Test func anEventAfterASeqWaitsForThatSeqAndTheOnesPublishedBehindItWaitToo() {
        let time = ManualTime()
        var machine = Machine(releasedThrough: 0)
        _ = machine.gateways(["g1"], now: time.now)
        _ = machine.committed(2, 2, now: time.now)
        // A change that follows message 2 waits while message 1 (a lost commit answer) holds it back.
        #expect(sends(machine.published(200, afterSeq: 2, now: time.now)).isEmpty)
        #expect(sends(machine.published(201, afterSeq: 0, now: time.now)).isEmpty, "behind the one that waits, though its seq is out")
        #expect(!machine.isIdle)
        let next = machine.committed(1, 1, now: time.now)
        guard case .send(_, let from, let events) = next.first else {
            Issue.record("nothing went: \(next)")
            return
        }
        #expect(from == 1)
        #expect(events == [1, 2, 200, 201], "the messages, then the changes in the order published")
        // Once its seq is out, an event after it goes at once.
        _ = machine.acknowledged("g1", through: 4, now: time.now)
        #expect(sends(machine.published(202, afterSeq: 2, now: time.now)) == ["g1:5…5"])
    }

    @Test func aBatchStaysUnderItsCost() {
        let time = ManualTime()
        var policy = Machine.Policy()
        policy.batchCostMax = 10
        var machine = Machine(releasedThrough: 0, policy: policy, cost: { Int($0) })
        _ = machine.gateways(["g1"], now: time.now)
        #expect(sends(machine.committed(1, 1, now: time.now)) == ["g1:1…1"])
        for seq in Int64(2)...5 { _ = machine.committed(seq, seq, now: time.now) }
        #expect(sends(machine.acknowledged("g1", through: 1, now: time.now)) == ["g1:2…4"], "2 + 3 + 4 = 9; with 5 it would cost 14")
        #expect(sends(machine.acknowledged("g1", through: 4, now: time.now)) == ["g1:5…5"])
        _ = machine.committed(6, 20, now: time.now)
        #expect(sends(machine.acknowledged("g1", through: 5, now: time.now)) == ["g1:6…6"], "an event costing more than a batch goes alone")
    }

    @Test func aSeqMissingPastTheHoldIsReadFromTheStore() {
        var time = ManualTime()
        var machine = Machine(releasedThrough: 4)
        _ = machine.gateways(["g1"], now: time.now)
        #expect(sends(machine.committed(7, 7, now: time.now)).isEmpty)
        #expect(reads(machine.tick(now: time.advance(by: .milliseconds(999)))).isEmpty)
        let read = machine.tick(now: time.advance(by: .milliseconds(1)))
        #expect(reads(read) == ["5..<7"])
        #expect(machine.heldCount == 1)
        #expect(sends(machine.storeRead([(5, 5), (6, 6)], now: time.now)) == ["g1:1…3"], "seqs 5, 6 and 7")
        #expect(machine.heldCount == 0)
    }

    @Test func anUncertainCommitHasTheStoreReadPastTheLastReleasedSeq() {
        var time = ManualTime()
        var machine = Machine(releasedThrough: 9)
        _ = machine.gateways(["g1"], now: time.now)
        machine.commitUncertain(now: time.now)
        #expect(reads(machine.tick(now: time.advance(by: .seconds(1)))) == ["after 9"])
        #expect(!machine.isIdle, "a read is running")
        #expect(sends(machine.storeRead([(10, 10)], now: time.now)) == ["g1:1…1"], "seq 10")
        _ = machine.acknowledged("g1", through: 10, now: time.now)
        #expect(machine.isIdle)
        #expect(reads(machine.tick(now: time.advance(by: .seconds(5)))).isEmpty)
    }

    /// A store that is away (a failover) fails the read for an uncertain append: it is tried again
    /// a hold later, not at every tick, until one succeeds.
    @Test func aFailedReadForAnUncertainAppendIsTriedAgainAHoldLater() {
        var time = ManualTime()
        var machine = Machine(releasedThrough: 9)
        _ = machine.gateways(["g1"], now: time.now)
        machine.commitUncertain(now: time.now)
        #expect(reads(machine.tick(now: time.advance(by: .seconds(1)))) == ["after 9"])
        machine.storeReadFailed(now: time.now)
        #expect(reads(machine.tick(now: time.advance(by: .milliseconds(100)))).isEmpty, "not at once")
        #expect(reads(machine.tick(now: time.advance(by: .milliseconds(800)))).isEmpty)
        #expect(reads(machine.tick(now: time.advance(by: .milliseconds(100)))) == ["after 9"], "a hold after the failure")
        #expect(sends(machine.storeRead([(10, 10)], now: time.now)) == ["g1:1…1"], "seq 10, committed after all")
        _ = machine.acknowledged("g1", through: 1, now: time.now)
        #expect(machine.isIdle)
    }

    /// An append whose outcome is lost while the store read for an earlier one runs may have
    /// committed after that read: it has the store read again, or its seq would wait for the next
    /// message of the conversation (cluster simulation seed 2315).
    @Test func anAppendUncertainDuringTheStoreReadIsReadFor() {
        var time = ManualTime()
        var machine = Machine(releasedThrough: 9)
        _ = machine.gateways(["g1"], now: time.now)
        machine.commitUncertain(now: time.now)
        #expect(reads(machine.tick(now: time.advance(by: .seconds(1)))) == ["after 9"])
        machine.commitUncertain(now: time.advance(by: .milliseconds(10)))
        #expect(sends(machine.storeRead([(10, 10)], now: time.advance(by: .milliseconds(10)))) == ["g1:1…1"], "seq 10")
        _ = machine.acknowledged("g1", through: 1, now: time.now)
        #expect(!machine.isIdle, "seq 11 may have committed")
        #expect(reads(machine.tick(now: time.advance(by: .milliseconds(500)))).isEmpty, "one hold after the second append")
        #expect(reads(machine.tick(now: time.advance(by: .milliseconds(500)))) == ["after 10"])
        #expect(sends(machine.storeRead([(11, 11)], now: time.now)) == ["g1:2…2"], "seq 11")
        _ = machine.acknowledged("g1", through: 2, now: time.now)
        #expect(machine.isIdle)
        #expect(reads(machine.tick(now: time.advance(by: .seconds(5)))).isEmpty)
    }

    @Test func aGatewayNamedLaterGetsWhatIsReleasedFromThenOn() {
        let time = ManualTime()
        var machine = Machine(releasedThrough: 0)
        _ = machine.gateways(["g1"], now: time.now)
        _ = machine.committed(1, 1, now: time.now)
        _ = machine.acknowledged("g1", through: 1, now: time.now)
        #expect(sends(machine.gateways(["g1", "g2"], now: time.now)).isEmpty, "seq 1 is in the replay of g2's streams")
        #expect(sends(machine.committed(2, 2, now: time.now)) == ["g1:2…2", "g2:2…2"])
    }

    @Test func aRepublishedSeqGoesOnceMoreToEveryGatewayOnItsPath() {
        var time = ManualTime()
        var machine = Machine(releasedThrough: 5)
        _ = machine.gateways(["g1", "g2"], now: time.now)
        #expect(sends(machine.republished(3, 3, now: time.now)) == ["g1:1…1", "g2:1…1"])
        #expect(sends(machine.republished(6, 6, now: time.now)).isEmpty, "behind the batch in flight")
        #expect(sends(machine.acknowledged("g1", through: 1, now: time.now)) == ["g1:2…2"], "a seq still to release is released")
        machine.failed("g2", now: time.now)
        #expect(sends(machine.tick(now: time.advance(by: .milliseconds(200)))) == ["g2:1…2"], "and sent again like any other event")
    }

    @Test func aStreamWritesInOrderOnceAndEndsOnAGapNotFilledInTime() {
        var time = ManualTime()
        var stream = EventStreamStateMachine<Int, String>(written: [1: 3], gapMax: .seconds(5))
        func written(_ directives: [EventStreamStateMachine<Int, String>.Directive]) -> [Int64] {
            directives.flatMap { directive -> [Int64] in
                guard case .write(let events) = directive else { return [] }
                return events.map(\.seq)
            }
        }
        #expect(written(stream.received(1, seq: 3, "c", now: time.now)).isEmpty, "the replay wrote seq 3")
        #expect(written(stream.received(1, seq: 5, "e", now: time.now)).isEmpty)
        #expect(stream.isWaiting)
        #expect(written(stream.received(1, seq: 4, "d", now: time.now)) == [4, 5])
        #expect(!stream.isWaiting)
        #expect(stream.lastWritten(2) == nil)
        #expect(written(stream.received(2, seq: 7, "g", now: time.now)) == [7], "a conversation new to the stream starts at its first message")
        #expect(written(stream.received(2, seq: 6, "f", now: time.now)).isEmpty, "and what is before it is a repeat")
        _ = stream.received(2, seq: 9, "i", now: time.now)
        #expect(stream.tick(now: time.advance(by: .milliseconds(4_999))).isEmpty)
        let ended = stream.tick(now: time.advance(by: .milliseconds(1)))
        guard case .end(2) = ended.first else {
            Issue.record("the stream did not end on its gap: \(ended)")
            return
        }
        #expect(stream.ended)
        #expect(stream.received(1, seq: 6, "f", now: time.now).isEmpty, "an ended stream writes nothing")
    }
}

/// The simulation of delivery under faults: seeds pass, the same seed is the same run, and each
/// guard removed is caught by the seed that catches it in `Scripts/simulate --check-guards`.
@Suite struct DeliverySimulationTests {
    @Test func seedsPass() {
        for seed: UInt64 in 1...10 {
            var simulation = DeliverySimulation(seed: seed)
            simulation.run()
            #expect(simulation.failures.isEmpty, "seed \(seed): \(simulation.failures.first ?? "")\n\(simulation.failureTrace.suffix(30).joined(separator: "\n"))")
            #expect(simulation.committed > 500 && simulation.written > simulation.committed, "seed \(seed) did work: \(simulation.summary)")
            #expect(simulation.changesCommitted > 100 && simulation.changesWritten > simulation.changesCommitted, "seed \(seed) changed messages: \(simulation.summary)")
        }
    }

    @Test func theSameSeedIsTheSameRun() {
        var first = DeliverySimulation(seed: 7)
        first.run()
        var second = DeliverySimulation(seed: 7)
        second.run()
        #expect(first.trace == second.trace)
        #expect(first.summary == second.summary)
    }

    @Test(arguments: [
        (DeliverySimulation.Guard.storeRead, UInt64(1)), (.resend, 1), (.streamEnd, 12), (.recovery, 5), (.drain, 26),
    ])
    func aGuardRemovedIsCaught(_ removed: DeliverySimulation.Guard, seed: UInt64) {
        var options = DeliverySimulation.Options()
        removed.remove(from: &options)
        var without = DeliverySimulation(seed: seed, options: options)
        without.run()
        #expect(!without.failures.isEmpty, "seed \(seed) without \(removed.rawValue) passed")
        var with = DeliverySimulation(seed: seed)
        with.run()
        #expect(with.failures.isEmpty, "seed \(seed) with every guard: \(with.failures.first ?? "")")
    }
}
