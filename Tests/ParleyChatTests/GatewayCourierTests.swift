import Dispatch
import Foundation
import ParleyCluster
import ParleyModel
import Synchronization
import Testing

@testable import ParleyChat

@Suite struct CoalescingStateMachineTests {
    typealias Machine = CoalescingStateMachine<String, String>

    static func sent(_ action: Machine.Action) -> [String]? {
        if case .send(_, let parcels) = action { return parcels }
        return nil
    }

    @Test func oneSendPerDestinationCarryingWhatQueuedMeanwhileInOrder() {
        var machine = Machine(sendMax: 100)
        #expect(Self.sent(machine.enqueue("a", size: 1, to: "g1")) == ["a"], "nothing in flight: sent at once")
        #expect(Self.sent(machine.enqueue("x", size: 1, to: "g2")) == ["x"], "destinations do not wait for each other")
        for parcel in ["b", "c", "d"] { #expect(Self.sent(machine.enqueue(parcel, size: 1, to: "g1")) == nil) }
        #expect(machine.waiting(for: "g1") == 3)
        #expect(Self.sent(machine.finished("g1")) == ["b", "c", "d"], "everything that queued, in one send, in order")
        #expect(Self.sent(machine.finished("g1")) == nil, "nothing queued: the destination is idle")
        #expect(Self.sent(machine.enqueue("e", size: 1, to: "g1")) == ["e"], "and the next parcel goes at once")
    }

    @Test func aSendCarriesAtMostSendMaxItemsButAlwaysOneParcel() {
        var machine = Machine(sendMax: 3)
        _ = machine.enqueue("first", size: 1, to: "g")
        _ = machine.enqueue("two", size: 2, to: "g")
        _ = machine.enqueue("one", size: 1, to: "g")
        _ = machine.enqueue("big", size: 5, to: "g")
        _ = machine.enqueue("last", size: 1, to: "g")
        #expect(Self.sent(machine.finished("g")) == ["two", "one"])
        #expect(Self.sent(machine.finished("g")) == ["big"], "a parcel larger than sendMax goes alone")
        #expect(Self.sent(machine.finished("g")) == ["last"])
        #expect(Self.sent(machine.finished("g")) == nil)
    }
}

@Suite struct GatewayCourierTests {
    /// Records each call; the first one waits until `release` is completed.
    final class Inbox: Sendable {
        let calls = Mutex<[[EventDelivery]]>([])
        let release = OneShot<Void>()
        let failCall: Int?

        init(failCall: Int? = nil) { self.failCall = failCall }

        func receive(_ deliveries: [EventDelivery]) async throws {
            let number = calls.withLock { calls in
                calls.append(deliveries)
                return calls.count
            }
            if number == 1 { await release.wait() }
            if number == failCall { throw ChatError(.unavailable, "the gateway is gone") }
        }
    }

    static func delivery(_ conversation: String, seq: Int64) -> EventDelivery {
        EventDelivery(
            event: .message(Message(
                conversationId: ConversationID(rawValue: conversation), seq: seq, senderId: "u_a",
                clientMessageId: "m\(seq)", text: "hi", sentAt: Date(timeIntervalSince1970: 0))),
            recipients: ["u_b"])
    }

    /// Whether `condition` became true within 5 s (a courier that never queues fails the test
    /// instead of hanging it).
    static func eventually(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now.advanced(by: .seconds(5))
        while !condition() {
            guard ContinuousClock.now < deadline else { return false }
            try? await Task.sleep(for: .milliseconds(1))
        }
        return true
    }

    /// Delivers `c1`'s batch (held at the gateway), then `c2`'s and `c3`'s while it is in flight.
    static func deliverThree(through inbox: Inbox) async throws -> [Bool] {
        let courier = GatewayCourier { _, deliveries in try await inbox.receive(deliveries) }
        defer { inbox.release.complete(()) }
        let first = Task { await courier.deliver([delivery("c1", seq: 1)], to: "g") }
        try #require(await eventually { inbox.calls.withLock { $0.count } == 1 }, "the first batch is sent at once")
        let second = Task { await courier.deliver([delivery("c2", seq: 1), delivery("c2", seq: 2)], to: "g") }
        try #require(await eventually { courier.waiting(for: "g") == 1 }, "a batch handed over during a call waits")
        let third = Task { await courier.deliver([delivery("c3", seq: 7)], to: "g") }
        try #require(await eventually { courier.waiting(for: "g") == 2 }, "so does the next")
        inbox.release.complete(())
        return [await first.value, await second.value, await third.value]
    }

    @Test func batchesHandedOverDuringACallGoTogetherInTheNextInOrder() async throws {
        let inbox = Inbox()
        let outcomes = try await Self.deliverThree(through: inbox)
        #expect(outcomes == [true, true, true])
        let calls = inbox.calls.withLock { $0 }
        #expect(calls.count == 2, "two calls for three batches")
        #expect(calls.first == [Self.delivery("c1", seq: 1)])
        #expect(calls.last == [Self.delivery("c2", seq: 1), Self.delivery("c2", seq: 2), Self.delivery("c3", seq: 7)])
    }

    /// Runs jobs on Dispatch's global queue, as the task executor of the tasks that prefer it.
    final class ProbeExecutor: TaskExecutor {
        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            DispatchQueue.global().async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }

    @Test func theCallThatCarriesWhatQueuedIsMadeFromATaskPreferringTheLoop() async throws {
        let loop = ProbeExecutor()
        let executors = Mutex<[UnownedTaskExecutor?]>([])
        let inbox = Inbox()
        let courier = GatewayCourier(loopExecutor: { loop }) { _, deliveries in
            executors.withLock { $0.append(withUnsafeCurrentTask { $0?.unownedTaskExecutor }) }
            try await inbox.receive(deliveries)
        }
        defer { inbox.release.complete(()) }
        let first = Task { await courier.deliver([Self.delivery("c1", seq: 1)], to: "g") }
        try #require(await Self.eventually { inbox.calls.withLock { $0.count } == 1 })
        let second = Task { await courier.deliver([Self.delivery("c2", seq: 1)], to: "g") }
        try #require(await Self.eventually { courier.waiting(for: "g") == 1 })
        inbox.release.complete(())
        let (firstDelivered, secondDelivered) = (await first.value, await second.value)
        #expect(firstDelivered && secondDelivered)
        let seen = executors.withLock { $0 }
        try #require(seen.count == 2)
        #expect(seen[0] == nil, "the first call is made from the caller's own task")
        #expect(seen[1] == loop.asUnownedTaskExecutor(), "the next, started by the courier, prefers the loop")
    }

    @Test func aFailedCallFailsEveryBatchInItAndOnlyThose() async throws {
        let inbox = Inbox(failCall: 2)
        let outcomes = try await Self.deliverThree(through: inbox)
        #expect(outcomes == [true, false, false])
    }
}
