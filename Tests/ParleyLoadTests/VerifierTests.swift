import Foundation
import Histogram
import NIOCore
import NIOPosix
import ParleyLoad
import ParleyModel
import Synchronization
import Testing

@Suite struct VerifierTests {
    static let conversation: ConversationID = "c_1"
    static let members: [UserID] = ["u_a", "u_b"]

    static func message(_ seq: Int64, cmid: String? = nil) -> Message {
        Message(conversationId: conversation, seq: seq, senderId: "u_a", clientMessageId: cmid ?? "cmid-\(seq)", text: "t", sentAt: Date(millisecondsSince1970: 0))
    }

    /// A clean history: 1…5 acknowledged, both streams deliver 1…5 in order.
    static func history(deliveredToB: [Int64] = [1, 2, 3, 4, 5]) -> DeliveryVerifier {
        var verifier = DeliveryVerifier()
        verifier.conversation(conversation, members: members)
        for seq in Int64(1)...5 { verifier.acknowledged(message(seq)) }
        for seq in Int64(1)...5 { verifier.delivered(message(seq), to: "u_a") }
        for seq in deliveredToB { verifier.delivered(message(seq), to: "u_b") }
        return verifier
    }

    @Test func aCleanHistoryHasNoFaults() {
        #expect(Self.history().faults().isEmpty)
    }

    @Test func eachFaultIsFoundAndNamed() {
        let cases: [([Int64], DeliveryVerifier.Fault.Kind, Int64)] = [
            ([1, 2, 4, 5], .lost, 3),        // dropped (and a gap where it was)
            ([1, 2, 3, 3, 4, 5], .duplicate, 3),
            ([1, 3, 2, 4, 5], .reorder, 2),
            ([1, 2, 3, 5], .gap, 5),
        ]
        for (delivered, kind, seq) in cases {
            let faults = Self.history(deliveredToB: delivered).faults()
            #expect(faults.contains { $0.kind == kind && $0.seq == seq && $0.member == "u_b" }, "\(delivered): \(faults)")
        }
    }

    @Test func theReadBackFindsWhatTheStoreGotWrong() {
        var clean = Self.history()
        clean.readBack(Self.conversation, history: (1...5).map { Self.message($0) })
        #expect(clean.faults().isEmpty)
        let broken: [([Message], DeliveryVerifier.Fault.Kind)] = [
            ([1, 2, 4, 5].map { Self.message($0) }, .gap),
            ([1, 2, 3, 4].map { Self.message($0) }, .lost),
            ([1, 2, 3, 4, 5].map { Self.message($0) } + [Self.message(6, cmid: "cmid-3")], .conflict),
            ([1, 2, 2, 3, 4, 5].map { Self.message($0) }, .duplicate),
            ((Int64(1)...5).map { seq -> Message in var other = Self.message(seq); other.conversationId = "c_2"; return other }, .conflict),
        ]
        for (history, kind) in broken {
            var verifier = Self.history()
            verifier.readBack(Self.conversation, history: history)
            #expect(verifier.faults().contains { $0.kind == kind && $0.member == nil }, "\(history.map(\.seq)): \(verifier.faults())")
        }
    }

    @Test func aMessageWithoutTheUploadItsTextNamesOrWithAnotherIsAnAttachmentFault() {
        let photo = MediaID(rawValue: "m_photo"), other = MediaID(rawValue: "m_other")
        func message(_ seq: Int64, naming: MediaID?, carrying: MediaID?) -> Message {
            var message = Self.message(seq)
            message.text = DeliveryVerifier.text("load \(seq)", attaching: naming)
            message.attachments = carrying.map {
                [Attachment(media: Media(id: $0, contentType: "image/jpeg", size: 1, sha256: String(repeating: "0", count: 64), createdAt: Date()))]
            }
            return message
        }
        var verifier = DeliveryVerifier()
        verifier.conversation(Self.conversation, members: Self.members)
        let sent = [message(1, naming: photo, carrying: photo), message(2, naming: nil, carrying: nil), message(3, naming: photo, carrying: photo)]
        for message in sent { verifier.acknowledged(message); verifier.delivered(message, to: "u_a") }
        verifier.delivered(message(1, naming: photo, carrying: photo), to: "u_b")
        verifier.delivered(message(2, naming: nil, carrying: other), to: "u_b")
        verifier.delivered(message(3, naming: photo, carrying: nil), to: "u_b")
        let faults = verifier.faults()
        #expect(faults.map(\.kind) == [.attachment, .attachment])
        #expect(faults.map(\.seq) == [2, 3])
        #expect(faults.allSatisfy { $0.member == "u_b" })
        verifier.readBack(Self.conversation, history: [sent[0], sent[1], message(3, naming: photo, carrying: other)])
        #expect(verifier.faults().filter { $0.member == nil }.map(\.seq) == [3], "the store's copy is checked too")
    }

    @Test func oneClientMessageIdWithTwoSeqsIsAConflict() {
        var verifier = Self.history()
        verifier.acknowledged(Self.message(6, cmid: "cmid-2"))
        #expect(verifier.faults().contains { $0.kind == .conflict })
    }

    @Test func oneSeqAcknowledgedForTwoClientMessageIdsIsAConflict() {
        var verifier = Self.history()
        verifier.acknowledged(Self.message(3, cmid: "cmid-other"))
        let conflicts = verifier.faults().filter { $0.kind == .conflict }
        #expect(conflicts.count == 1)
        #expect(conflicts.first?.seq == 3)
        #expect(conflicts.first?.detail.contains("cmid-3 and cmid-other") == true, "\(conflicts)")
        // A store that lost the first commit and gave its seq to the next: the read-back has only
        // the second, and the first is lost too.
        verifier.readBack(Self.conversation, history: [1, 2].map { Self.message($0) } + [Self.message(3, cmid: "cmid-other")] + [4, 5].map { Self.message($0) })
        let lost = verifier.faults().filter { $0.kind == .lost && $0.member == nil }
        #expect(lost.map(\.seq) == [3] && lost.first?.detail.contains("acknowledged as clientMessageId cmid-3") == true, "\(lost)")
        // The same acknowledgement twice (a retried send answered with the original) is none.
        var retried = Self.history()
        retried.acknowledged(Self.message(3))
        #expect(retried.faults().isEmpty)
    }

    @Test func aLossInTheReadBackSaysWhatTheStoreHasInstead() {
        let cases: [([Message], String)] = [
            ([1, 2, 4, 5].map { Self.message($0) } + [Self.message(6, cmid: "cmid-3")], "the store has it as seq 6"),
            ([1, 2].map { Self.message($0) } + [Self.message(3, cmid: "cmid-x")] + [4, 5].map { Self.message($0) },
             "the store has clientMessageId cmid-3 nowhere, and seq 3 as cmid-x"),
            ([1, 2, 4, 5].map { Self.message($0) }, "the store has neither it nor seq 3 (4 messages read back, seqs 1…5)"),
        ]
        for (history, expected) in cases {
            var verifier = Self.history()
            verifier.readBack(Self.conversation, history: history)
            let lost = verifier.faults().filter { $0.kind == .lost && $0.member == nil }
            #expect(lost.map(\.seq) == [3], "\(history.map(\.seq)): \(lost)")
            #expect(lost.first?.detail.contains(expected) == true, "\(lost)")
        }
    }
}

@Suite struct OpenLoopTests {
    /// A test double of a server that handles one request at a time (FIFO); request 10 stalls it
    /// for 300 ms, so the requests scheduled during the stall queue behind it.
    final class SerialServer: Sendable {
        let busyUntil = Mutex(ContinuousClock.now)

        func handle(_ k: Int) async {
            let done = busyUntil.withLock { busy -> ContinuousClock.Instant in
                busy = max(busy, .now).advanced(by: k == 10 ? .milliseconds(300) : .milliseconds(1))
                return busy
            }
            try? await Task.sleep(until: done)
        }
    }

    @Test func aServerStallShowsInTheLatencyOfEverySendScheduledDuringIt() async {
        // 60 sends at 100/s. A closed-loop sender would wait for the stalled request, start the
        // next ones late and report them fast; open loop starts each on its schedule and counts
        // from it, so the ~30 sends scheduled during the 300 ms stall all show the wait.
        let server = SerialServer()
        let result = await OpenLoop(rate: 100, count: 60).run { k, _ in
            await server.handle(k)
            return true
        }
        #expect(result.latency.totalCount == 60)
        #expect(result.latency.max >= 300_000, "the stalled send counts the whole stall: max \(result.latency.max) µs")
        let slow = result.latency.count(within: 100_000...3_600_000_000)
        #expect(slow >= 15, "sends queued behind the stall show it: \(slow) of 60 took ≥ 100 ms")
    }

    @Test func onEventLoopsAServerStallShowsInTheLatencyOfEverySendScheduledDuringIt() async throws {
        // The same stall through the runner that starts each send with its event loop's timer.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = [group.next(), group.next()]
        let server = SerialServer()
        let seen = Mutex((sends: [Int](), early: 0, offLoop: 0))
        let result = await OpenLoop(rate: 100, count: 60).run(on: { loops[$0 % 2] }) { k, scheduled, done in
            let loop = loops[k % 2]
            seen.withLock {
                $0.sends.append(k)
                if ContinuousClock.now < scheduled { $0.early += 1 }
                if !loop.inEventLoop { $0.offLoop += 1 }
            }
            let finished = server.busyUntil.withLock { busy -> ContinuousClock.Instant in
                busy = max(busy, .now).advanced(by: k == 10 ? .milliseconds(300) : .milliseconds(1))
                return busy
            }
            let wait = ContinuousClock.now.duration(to: finished)
            loop.scheduleTask(in: .nanoseconds(Int64(wait / .nanoseconds(1)))) { done(true) }
        }
        let (sends, early, offLoop) = seen.withLock { $0 }
        #expect(sends.sorted() == Array(0..<60), "every send once")
        #expect(early == 0, "no send starts before its scheduled time")
        #expect(offLoop == 0, "each send starts on the loop it was given")
        #expect(result.latency.totalCount == 60 && result.lag.totalCount == 60)
        #expect(result.latency.max >= 300_000, "the stalled send counts the whole stall: max \(result.latency.max) µs")
        let slow = result.latency.count(within: 100_000...3_600_000_000)
        #expect(slow >= 15, "sends queued behind the stall show it: \(slow) of 60 took ≥ 100 ms")
        try await group.shutdownGracefully()
    }

    @Test func onEventLoopsAFailedSendIsCountedNotTimed() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let result = await OpenLoop(rate: 1000, count: 20).run(on: { _ in loop }) { k, _, done in done(k % 4 != 0) }
        #expect(result.failures == 5)
        #expect(result.latency.totalCount == 15)
        #expect(result.lag.totalCount == 20)
        try await group.shutdownGracefully()
    }

    @Test func theScheduleIsFixedByTheRate() {
        let start = ContinuousClock.now
        let loop = OpenLoop(rate: 200, count: 10)
        #expect(start.duration(to: loop.scheduled(4, from: start)) == .milliseconds(20))
    }

    @Test func aSeedGivesTheSameSequence() {
        var a = SeededRandom(seed: 42), b = SeededRandom(seed: 42), c = SeededRandom(seed: 43)
        let first = (0..<5).map { _ in a.next() }
        #expect(first == (0..<5).map { _ in b.next() })
        #expect(first != (0..<5).map { _ in c.next() })
    }
}
