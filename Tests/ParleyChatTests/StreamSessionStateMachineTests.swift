import Foundation
import ParleyChat
import ParleyModel
import Testing

/// The pure core of one client's event stream: what it writes, with which cursor, in which order,
/// and when it ends.
@Suite struct StreamSessionStateMachineTests {
    typealias Session = StreamSessionStateMachine
    let start = ContinuousClock.now
    /// Where the messages' instants begin (ms since 1970).
    static let base: Int64 = 1_800_000_000_000

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start.advanced(by: .milliseconds(milliseconds)) }

    /// Message `seq` of `conversation`, sent `seq` seconds after ``base`` (plus `offset` ms).
    static func message(_ seq: Int64, in conversation: ConversationID = "c_1", offset: Int64 = 0) -> Message {
        Message(conversationId: conversation, seq: seq, senderId: "u_alice", clientMessageId: "m\(seq)", text: "text \(seq)",
                sentAt: Date(millisecondsSince1970: base + seq * 1_000 + offset))
    }

    static func cursor(_ seconds: Int64) -> StreamCursor { StreamCursor(millis: base + seconds * 1_000) }

    func session(cursor: StreamCursor = Self.cursor(0), pingTicks: Int = 15, pingOffset: Int = 0, bytesMax: Int = 1_000) -> Session {
        Session(cursor: cursor, pingTicks: pingTicks, pingOffset: pingOffset, unwritableBytesMax: bytesMax, unwritableFor: .seconds(60), gapMax: .seconds(5))
    }

    /// What the actions write, readably: `m<conversation>:<seq>@<cursor seconds>`, `ready@<s>`,
    /// `ping`, `flush`, `end <reason>`.
    static func written(_ actions: [Session.Action]) -> [String] {
        actions.map { action in
            switch action {
            case .write(.event(let out, let cursor)):
                if case .message(let message) = out.event {
                    return "m\(message.conversationId.rawValue.dropFirst(2)):\(message.seq)@\((cursor.millis - base) / 1_000)"
                }
                if case .change(let change) = out.event {
                    return "x\(change.conversationId.rawValue.dropFirst(2)):\(change.changeSeq)@\((cursor.millis - base) / 1_000)"
                }
                return "event@\((cursor.millis - base) / 1_000)"
            case .write(.ready(let cursor)): return "ready@\((cursor.millis - base) / 1_000)"
            case .write(.ping): return "ping"
            case .flush: return "flush"
            case .end(let reason): return "end \(reason)"
            }
        }
    }

    @Test func aReplayThenReadyThenWhatArrivedMeanwhileEachWithItsCursor() {
        var session = session(cursor: Self.cursor(2))
        // Live events that come while the replay is written wait for it.
        #expect(session.received(.message(Self.message(7)), shared: nil, now: at(0)).isEmpty)
        // The replay goes conversation by conversation: c_2's newest (9) before c_1's (3…6). Each
        // carries the cursor the client resumed from, so a resume from the middle starts it again.
        let first = session.replay([.message(Self.message(9, in: "c_2"))], now: at(1))
        let second = session.replay((3...6).map { .message(Self.message($0)) }, now: at(2))
        #expect(Self.written(first) == ["m2:9@2", "flush"])
        #expect(Self.written(second) == ["m1:3@2", "m1:4@2", "m1:5@2", "m1:6@2", "flush"])
        // `ready` carries the newest instant replayed; then the live event, with its own.
        #expect(Self.written(session.start(now: at(3))) == ["ready@9", "m1:7@9", "flush"])
        #expect(session.phase == .live)
        #expect(Self.written(session.received(.message(Self.message(10, in: "c_2")), shared: nil, now: at(4))) == ["m2:10@10"])
        #expect(Self.written(session.flushIfNeeded()) == ["flush"])
        #expect(session.flushIfNeeded().isEmpty, "nothing new to flush")
    }

    @Test func whileAMessageWaitsPastAGapEventsCarryTheCursorFromBeforeIt() {
        var session = session()
        _ = session.start(now: at(0))
        #expect(Self.written(session.received(.message(Self.message(1)), shared: nil, now: at(0))) == ["m1:1@1"])
        // c_1's 3 waits for 2; c_2's 5 goes out, with the cursor from before the gap (1), so that a
        // resume from it replays c_1's 2 and 3.
        #expect(session.received(.message(Self.message(3)), shared: nil, now: at(10)).isEmpty)
        #expect(Self.written(session.received(.message(Self.message(5, in: "c_2")), shared: nil, now: at(20))) == ["m2:5@1"])
        // 2 fills the gap: 2 and 3 go out; the cursor then moves past everything written.
        #expect(Self.written(session.received(.message(Self.message(2)), shared: nil, now: at(30))) == ["m1:2@5", "m1:3@5"])
        #expect(Self.written(session.received(.message(Self.message(6, in: "c_2")), shared: nil, now: at(40))) == ["m2:6@6"])
        // A repeat is dropped.
        #expect(session.received(.message(Self.message(3)), shared: nil, now: at(50)).isEmpty)
    }

    /// A message erased while it waits past a gap goes out as its tombstone, never as it was, and
    /// its erasure is not written; an erasure of a message written (or never seen) is written.
    @Test func aMessageErasedWhileItWaitsGoesOutAsItsTombstone() {
        var session = session()
        _ = session.start(now: at(0))
        #expect(Self.written(session.received(.message(Self.message(1)), shared: nil, now: at(0))) == ["m1:1@1"])
        #expect(session.received(.message(Self.message(3)), shared: nil, now: at(10)).isEmpty, "3 waits for 2")
        let erasure = Erasure(message: Self.message(3), at: Date(millisecondsSince1970: Self.base + 20_000))
        #expect(session.received(.erasure(erasure), shared: nil, now: at(20)).isEmpty, "the waiting message is erased in place")
        let filled = session.received(.message(Self.message(2)), shared: nil, now: at(30))
        #expect(Self.written(filled) == ["m1:2@2", "m1:3@3"])
        let third = filled.compactMap { action -> Message? in
            if case .write(.event(let out, _)) = action, case .message(let message) = out.event, message.seq == 3 { return message }
            return nil
        }
        #expect(third == [Self.message(3).tombstone], "3 goes out erased: \(third)")
        let written = Erasure(message: Self.message(1), at: Date(millisecondsSince1970: Self.base + 40_000))
        #expect(Self.written(session.received(.erasure(written), shared: nil, now: at(40))) == ["event@40"], "a written message's erasure goes out")
        let unseen = Erasure(message: Self.message(1, in: "c_9"), at: Date(millisecondsSince1970: Self.base + 41_000))
        #expect(Self.written(session.received(.erasure(unseen), shared: nil, now: at(41))) == ["event@41"], "so does one of a message this stream never wrote")
    }

    /// Change `number` of `conversation` to message `seq`, committed after message `afterSeq`.
    static func change(_ number: Int64, of seq: Int64, after afterSeq: Int64, in conversation: ConversationID = "c_1") -> ChatEvent {
        .change(MessageChange(
            conversationId: conversation, changeSeq: number, afterSeq: afterSeq, seq: seq, kind: .reactionAdded, userId: "u_bob",
            at: Date(millisecondsSince1970: base + (afterSeq + number) * 1_000 + 500), emoji: "👍", count: 1))
    }

    @Test func changesGoInTheirOrderEachOnceAndOnlyAfterTheMessageTheyFollow() {
        var session = session()
        _ = session.start(now: at(0))
        #expect(Self.written(session.received(.message(Self.message(1)), shared: nil, now: at(1))) == ["m1:1@1"])
        // Change 1 follows message 2, which has not come: it waits, and so does change 2 behind it.
        #expect(session.received(Self.change(1, of: 1, after: 2), shared: nil, now: at(2)).isEmpty)
        #expect(session.received(Self.change(2, of: 1, after: 2), shared: nil, now: at(3)).isEmpty)
        #expect(Self.written(session.received(.message(Self.message(2)), shared: nil, now: at(4))) == ["m1:2@2", "x1:1@3", "x1:2@4"])
        // A repeat is dropped; a change past a gap in the numbers waits for the one before it.
        #expect(session.received(Self.change(2, of: 1, after: 2), shared: nil, now: at(5)).isEmpty)
        #expect(session.received(Self.change(4, of: 2, after: 2), shared: nil, now: at(6)).isEmpty)
        #expect(Self.written(session.received(Self.change(3, of: 2, after: 2), shared: nil, now: at(7))) == ["x1:3@5", "x1:4@6"])
        // Another conversation's changes are ordered on their own; its first change starts it.
        #expect(Self.written(session.received(Self.change(7, of: 1, after: 1, in: "c_2"), shared: nil, now: at(8))) == ["x2:7@8"])
    }

    @Test func aChangeThatWaitsTooLongEndsTheStreamAndHoldsTheCursorBackMeanwhile() {
        var session = session(cursor: Self.cursor(1))
        _ = session.start(now: at(0))
        _ = session.received(.message(Self.message(1)), shared: nil, now: at(0))
        _ = session.received(Self.change(1, of: 1, after: 1), shared: nil, now: at(0))
        #expect(session.received(Self.change(3, of: 1, after: 1), shared: nil, now: at(100)).isEmpty, "change 2 is missing")
        // While it waits, other events carry the cursor from before it: a resume replays it.
        #expect(Self.written(session.received(.message(Self.message(5, in: "c_2")), shared: nil, now: at(200))) == ["m2:5@2"])
        #expect(session.tick(now: at(5_099), active: true, writable: true).isEmpty)
        #expect(Self.written(session.tick(now: at(5_100), active: true, writable: true)).last == "end gap(c_1, lastSeq: 1)")
    }

    @Test func aReplaysChangesComeAfterItsMessagesAndStartEachConversationsNumbers() {
        var session = session(cursor: Self.cursor(1))
        let page = [ChatEvent.message(Self.message(2)), .message(Self.message(3)), Self.change(5, of: 2, after: 3), Self.change(6, of: 3, after: 3)]
        #expect(Self.written(session.replay(page, now: at(0))) == ["m1:2@1", "m1:3@1", "x1:5@1", "x1:6@1", "flush"])
        _ = session.start(now: at(1))
        // Live again: what the replay wrote is a repeat; the next change goes.
        #expect(session.received(Self.change(6, of: 3, after: 3), shared: nil, now: at(2)).isEmpty)
        #expect(Self.written(session.received(Self.change(7, of: 3, after: 3), shared: nil, now: at(3))) == ["x1:7@10"])
    }

    @Test func aGapNotFilledInTimeEndsTheStreamAbruptly() {
        var session = session()
        _ = session.start(now: at(0))
        _ = session.received(.message(Self.message(1)), shared: nil, now: at(0))
        _ = session.received(.message(Self.message(3)), shared: nil, now: at(1_000))
        let before = session.tick(now: at(5_999), active: true, writable: true)
        #expect(before.isEmpty && !session.isEnded, "ended before the gap was 5 s old: \(Self.written(before))")
        let actions = session.tick(now: at(6_000), active: true, writable: true)
        guard case .end(let reason)? = actions.last else { Issue.record("no end: \(Self.written(actions))"); return }
        #expect(reason == .gap("c_1", lastSeq: 1) && reason.isAbrupt)
        #expect(session.isEnded)
        #expect(session.received(.message(Self.message(2)), shared: nil, now: at(6_001)).isEmpty, "nothing after the end")
    }

    @Test func theSendersOwnMessageGoesAheadOnlyAsTheConversationsNext() {
        var session = session()
        // Not while replaying: the replay may still hold its predecessors.
        #expect(session.receivedAhead(Self.message(1), shared: nil, now: at(0)) == nil)
        _ = session.start(now: at(0))
        #expect(session.receivedAhead(Self.message(2), shared: nil, now: at(0)) == nil, "its predecessor has not reached the stream")
        #expect(Self.written(session.receivedAhead(Self.message(1), shared: nil, now: at(0)) ?? []) == ["m1:1@1"], "seq 1 of a conversation new to it")
        #expect(Self.written(session.receivedAhead(Self.message(2), shared: nil, now: at(0)) ?? []) == ["m1:2@2"])
        // The delivery's copies are repeats.
        #expect(session.received(.message(Self.message(1)), shared: nil, now: at(1)).isEmpty)
        #expect(session.received(.message(Self.message(2)), shared: nil, now: at(1)).isEmpty)
        #expect(session.lastWritten("c_1") == 2)
    }

    @Test func aReaderThatTakesNothingEndsByItsBudgetOrItsTime() {
        var session = session(bytesMax: 1_000)
        _ = session.start(now: at(0))
        let admitted = [
            session.admit(bytes: 5_000, writable: true),  // a writable client takes anything
            session.admit(bytes: 600, writable: false),
            session.admit(bytes: 300, writable: true),  // taking something resets the budget
            session.admit(bytes: 600, writable: false),
            session.admit(bytes: 400, writable: false),
            session.admit(bytes: 1, writable: false),  // past the budget
        ]
        #expect(admitted == [true, true, true, true, true, false])
        #expect(session.phase == .ended(.slowReader(bytes: 1_001)))

        var idle = self.session()
        _ = idle.start(now: at(0))
        _ = idle.tick(now: at(1_000), active: true, writable: false)
        _ = idle.tick(now: at(30_000), active: true, writable: true)  // took something: starts over
        _ = idle.tick(now: at(31_000), active: true, writable: false)
        _ = idle.tick(now: at(90_999), active: true, writable: false)
        #expect(!idle.isEnded, "ended before 60 s without taking anything")
        let actions = idle.tick(now: at(91_000), active: true, writable: false)
        guard case .end(let reason)? = actions.last else { Issue.record("no end: \(Self.written(actions))"); return }
        #expect(reason == .unwritable(.seconds(60)) && reason.isAbrupt)
    }

    @Test func pingsGoOnTheStreamsOwnTicksOnceLive() {
        var session = session(pingTicks: 3, pingOffset: 1)
        // Not while replaying.
        #expect(session.tick(now: at(1_000), active: true, writable: true).isEmpty)
        _ = session.start(now: at(1_000))
        var pinged: [Int] = []
        for second in 2...9 where Self.written(session.tick(now: at(second * 1_000), active: true, writable: true)) == ["ping", "flush"] {
            pinged.append(second)
        }
        // Ticks 2…9 of the stream; with offset 1, pings where tick + 1 is a multiple of 3.
        #expect(pinged == [2, 5, 8])
    }

    @Test func finishingFlushesAndEndsWhileAGoneClientGetsNothingMore() {
        var finished = session()
        _ = finished.start(now: at(0))
        _ = finished.received(.message(Self.message(1)), shared: nil, now: at(0))
        #expect(Self.written(finished.finish()) == ["flush", "end finished"])
        #expect(finished.finish().isEmpty, "once")

        var gone = session()
        _ = gone.start(now: at(0))
        _ = gone.received(.message(Self.message(1)), shared: nil, now: at(0))
        #expect(Self.written(gone.tick(now: at(1_000), active: false, writable: true)) == ["end clientGone"])
        #expect(!Session.EndReason.clientGone.isAbrupt && !Session.EndReason.finished.isAbrupt)
    }
}
