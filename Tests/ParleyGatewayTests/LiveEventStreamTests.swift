import Foundation
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleySimulation
import Synchronization
import Testing
@testable import ParleyGateway

/// An event stream written on its channel's event loop: what reaches the client, in which order.
@Suite struct LiveEventStreamTests {
    static let conversation: ConversationID = "c_1"

    static func message(_ seq: Int64, in conversation: ConversationID = conversation) -> Message {
        Message(conversationId: conversation, seq: seq, senderId: "u_a", clientMessageId: "m\(seq)", text: "t\(seq)", sentAt: Date(millisecondsSince1970: 1_800_000_000_000 + seq))
    }

    static func typing() -> ChatEvent {
        .typing(TypingEvent(conversationId: conversation, userId: "u_a", typing: true))
    }

    final class Flag: Sendable {
        private let value = Mutex(false)
        func set() { value.withLock { $0 = true } }
        var isSet: Bool { value.withLock { $0 } }
    }

    /// A stream on a testing channel.
    final class Harness: Sendable {
        let channel = NIOAsyncTestingChannel()
        let stream: LiveEventStream

        init(
            pingTicks: Int = 15, pingOffset: Int = 0, unwritableBytesMax: Int = LiveEventStream.unwritableBytesMax,
            unwritableFor: Duration = LiveEventStream.unwritableFor, gapMax: Duration = LiveEventStream.gapMax, clock: any ClusterClock = ContinuousClock()
        ) async throws {
            // Active, as a client's stream is.
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 8443)).get()
            stream = LiveEventStream(
                user: "u_b", sink: ChannelEventSink(channel), cursor: StreamCursor(millis: 1_000), pingTicks: pingTicks,
                pingOffset: pingOffset, unwritableBytesMax: unwritableBytesMax, unwritableFor: unwritableFor, gapMax: gapMax, clock: clock,
                logger: Logger(label: "test"))
        }

        /// Every event written so far: (event name, the message's seq if any).
        func written() async throws -> [(String, Int64?)] {
            await channel.testingEventLoop.run()
            var events: [(String, Int64?)] = []
            while let part = try await channel.readOutbound(as: HTTPResponsePart.self) {
                guard case .body(let buffer) = part else { continue }
                let text = String(buffer: buffer)
                for frame in text.components(separatedBy: "\n\n") where !frame.isEmpty {
                    if frame.hasPrefix(": ping") { events.append(("ping", nil)); continue }
                    let name = frame.split(separator: "\n").first.map { String($0.dropFirst("event: ".count)) } ?? "?"
                    let seq = frame.range(of: "\"seq\":").map { range in Int64(frame[range.upperBound...].prefix { $0.isNumber }) } ?? nil
                    events.append((name, seq))
                }
            }
            return events
        }

        /// Every event written so far: (event name, its `id:`).
        func ids() async throws -> [(String, String?)] {
            await channel.testingEventLoop.run()
            var events: [(String, String?)] = []
            while let part = try await channel.readOutbound(as: HTTPResponsePart.self) {
                guard case .body(let buffer) = part else { continue }
                for frame in String(buffer: buffer).components(separatedBy: "\n\n") where !frame.isEmpty && !frame.hasPrefix(":") {
                    let lines = frame.split(separator: "\n")
                    let name = lines.first.map { String($0.dropFirst("event: ".count)) } ?? "?"
                    events.append((name, lines.first { $0.hasPrefix("id: ") }.map { String($0.dropFirst(4)) }))
                }
            }
            return events
        }

        func deliver(_ events: ChatEvent...) async {
            channel.testingEventLoop.execute { [stream] in
                for event in events { stream.receive(event, sharedData: nil) }
                stream.flushIfNeeded()
            }
            await channel.testingEventLoop.run()
        }

        /// Hands the stream a message ahead of its delivery; whether it took it.
        func ahead(_ message: Message) async -> Bool {
            let taken = Flag()
            await run { [stream] in
                if stream.receiveAhead(message, sharedData: nil) { taken.set() }
                stream.flushIfNeeded()
            }
            return taken.isSet
        }

        func run(_ work: @escaping @Sendable () -> Void = {}) async {
            channel.testingEventLoop.execute(work)
            await channel.testingEventLoop.run()
        }
    }

    @Test func theReplayThenReadyThenWhatArrivedMeanwhileWithoutRepeats() async throws {
        let harness = try await Harness()
        // Live events that arrive while the replay is read wait for it.
        await harness.deliver(.message(Self.message(2)), .message(Self.message(3)))
        #expect(try await harness.written().isEmpty)
        harness.stream.start(replay: [.message(Self.message(1)), .message(Self.message(2))])
        await harness.run()
        let events = try await harness.written()
        #expect(events.map(\.0) == ["message", "message", "ready", "message"])
        #expect(events.map(\.1) == [1, 2, nil, 3])
        await harness.deliver(.message(Self.message(3)), Self.typing(), .message(Self.message(4)))
        #expect(try await harness.written().map(\.1) == [nil, 4])
    }

    /// A message past a gap waits for the seqs before it, which its owner sends again; the
    /// stream's other events go on meanwhile, and carry the cursor from before the gap, so that a
    /// resume from any of them replays it.
    @Test func aMessagePastAGapWaitsForTheSeqsBeforeItAndTheCursorStaysBeforeIt() async throws {
        let harness = try await Harness()
        harness.stream.start(replay: [])
        await harness.deliver(.message(Self.message(1)))
        #expect(try await harness.ids().map(\.1) == ["pc1.1000", "pc1.1800000000001"])
        // 2 and 3 were lost on their way; 4 and 5 wait for them.
        await harness.deliver(.message(Self.message(4)), .message(Self.message(5)))
        #expect(try await harness.written().isEmpty)
        let receipt = ReceiptEvent(
            conversationId: "c_2", userId: "u_c", deliveredSeq: 1, readSeq: 1, at: Date(millisecondsSince1970: 1_800_000_000_100))
        await harness.deliver(Self.typing(), .receipt(receipt))
        let meanwhile = try await harness.ids()
        #expect(meanwhile.map(\.0) == ["typing", "receipt"], "other events go on")
        #expect(meanwhile.last?.1 == "pc1.1800000000001", "the cursor stays before the gap")
        // The owner sends 2 and 3 again.
        await harness.deliver(.message(Self.message(2)), .message(Self.message(3)), .message(Self.message(4)))
        let filled = try await harness.ids()
        #expect(filled.map(\.0) == ["message", "message", "message", "message"])
        #expect(filled.last?.1 == "pc1.1800000000100", "past what was written meanwhile")
        await harness.deliver(.message(Self.message(5)), .message(Self.message(6)))
        #expect(try await harness.written().map(\.1) == [6], "5 went out with the gap, once")
    }

    /// A message written past a gap would hide the gap for good (clients keep a conversation's
    /// last seq), so a gap not filled in time (`gapMax`) ends the stream: the client resumes by
    /// cursor and the replay has the missing messages.
    @Test func aGapNotFilledInTimeEndsTheStream() async throws {
        // A stepped clock: on two loaded cores, 50 real ms could pass before the first tick.
        let clock = SteppedClock()
        let harness = try await Harness(gapMax: .milliseconds(50), clock: clock)
        harness.stream.start(replay: [.message(Self.message(1))])
        await harness.deliver(.message(Self.message(5)), .message(Self.message(6)), .message(Self.message(2)))
        let stream = harness.stream
        await harness.run { stream.tick() }
        #expect(harness.channel.isActive, "not before gapMax")
        clock.advance(by: .milliseconds(60))
        await harness.run { stream.tick() }
        try await harness.stream.ended.get()
        #expect(try await harness.written().map(\.1) == [1, nil, 2])
        #expect(!harness.channel.isActive, "the response ends abruptly, so the client reconnects")
    }

    /// A resume's replay comes in pages, conversation after conversation: until `ready`, every
    /// event carries the cursor the client resumed from, so a resume from the middle of the
    /// replay starts it again instead of skipping an earlier conversation's older messages.
    /// Live events wait for `ready`, which carries the newest instant replayed.
    @Test func aReplayInPagesCarriesTheResumedCursorUntilReady() async throws {
        let harness = try await Harness()
        let other: ConversationID = "c_2"
        let late = Message(conversationId: other, seq: 7, senderId: "u_a", clientMessageId: "x7", text: "x", sentAt: Date(millisecondsSince1970: 1_900_000_000_000))
        harness.stream.replay([.message(late)])
        await harness.deliver(.message(Self.message(3)))
        harness.stream.replay([.message(Self.message(2)), .message(Self.message(3))])
        await harness.run()
        let replayed = try await harness.ids()
        #expect(replayed.map(\.0) == ["message", "message", "message"])
        #expect(replayed.map(\.1) == ["pc1.1000", "pc1.1000", "pc1.1000"])
        harness.stream.start()
        await harness.run()
        await harness.deliver(.message(Self.message(4)))
        let after = try await harness.ids()
        #expect(after.map(\.0) == ["ready", "message"], "the live 3 was a repeat")
        #expect(after.first?.1 == "pc1.1900000000000")
        #expect(after.last?.1 == "pc1.1900000000000")
    }

    /// A sender's own message, handed over when its send is answered, goes out only when it is
    /// the conversation's next on this stream, so that no message still on its way is taken for a
    /// duplicate when it comes.
    @Test func aMessageAheadOfItsDeliveryIsWrittenOnlyWhenItIsTheNextOne() async throws {
        let other: ConversationID = "c_2"
        let harness = try await Harness()
        #expect(await harness.ahead(Self.message(1)) == false, "not before the replay and ready")
        harness.stream.start(replay: [])
        await harness.run()
        #expect(try await harness.written().map(\.0) == ["ready"])

        // A conversation's first message is next even on a stream that has seen none of it.
        #expect(await harness.ahead(Self.message(1)))
        // 3 is not next (2 has not come): left to its delivery, and 2 and 3 both go out then.
        #expect(await harness.ahead(Self.message(3)) == false)
        await harness.deliver(.message(Self.message(1)), .message(Self.message(2)), .message(Self.message(3)))
        #expect(try await harness.written().map(\.1) == [1, 2, 3])

        // A conversation this stream has not seen yet, past its first message: its earlier
        // messages may still be on their way, so it waits for its delivery.
        #expect(await harness.ahead(Self.message(5, in: other)) == false)
        await harness.deliver(.message(Self.message(4, in: other)), .message(Self.message(5, in: other)))
        #expect(try await harness.written().map(\.1) == [4, 5])

        // Next: written now, and its delivery is then a duplicate.
        #expect(await harness.ahead(Self.message(4)))
        await harness.deliver(.message(Self.message(4)), Self.typing())
        #expect(try await harness.written().map(\.0) == ["message", "typing"])

        // While 7 waits for 5 and 6, nothing of its conversation goes ahead (8 is not next);
        // another conversation's next message does.
        let taken = Mutex<[Bool]>([])
        await harness.run { [stream = harness.stream] in
            stream.receive(.message(Self.message(7)), sharedData: nil)
            let eight = stream.receiveAhead(Self.message(8), sharedData: nil)
            let six = stream.receiveAhead(Self.message(6, in: other), sharedData: nil)
            taken.withLock { $0 = [eight, six] }
            stream.flushIfNeeded()
        }
        #expect(taken.withLock { $0 } == [false, true])
        #expect(try await harness.written().map(\.1) == [6])
        await harness.deliver(.message(Self.message(5)), .message(Self.message(6)))
        #expect(try await harness.written().map(\.1) == [5, 6, 7])
        await harness.deliver(.message(Self.message(8)), .message(Self.message(6, in: other)), .message(Self.message(9)))
        #expect(try await harness.written().map(\.1) == [8, 9])
    }

    /// Streams with different offsets ping in different seconds, each every `pingTicks`.
    @Test func aStreamPingsAtItsOwnOffsetInTheCycle() async throws {
        for (offset, pingedAfter) in [(0, [3, 6]), (1, [2, 5]), (2, [1, 4])] {
            let harness = try await Harness(pingTicks: 3, pingOffset: offset)
            harness.stream.start(replay: [])
            await harness.run()
            _ = try await harness.written()
            let stream = harness.stream
            var pings: [Int] = []
            for tick in 1...6 {
                await harness.run { stream.tick() }
                if try await harness.written().map(\.0) == ["ping"] { pings.append(tick) }
            }
            #expect(pings == pingedAfter, "offset \(offset)")
        }
    }

    @Test func pingsEveryGivenTickAndAGoneClientEndsTheStream() async throws {
        let harness = try await Harness(pingTicks: 3)
        harness.stream.start(replay: [])
        await harness.run()
        _ = try await harness.written()
        let stream = harness.stream
        for _ in 1...6 { await harness.run { stream.tick() } }
        #expect(try await harness.written().map(\.0) == ["ping", "ping"])
        let ended = Flag()
        harness.stream.ended.whenSuccess { ended.set() }
        try await harness.channel.close()
        await harness.run()
        #expect(ended.isSet)
        await harness.deliver(.message(Self.message(1)))
        #expect(try await harness.written().isEmpty)
    }

    @Test func aClientThatReadsNothingLosesItsStreamInsteadOfBufferingWithoutBound() async throws {
        // Each event is 3,000 bytes of text and a few hundred of JSON and SSE: three fit in the
        // bound, a fourth does not.
        let harness = try await Harness(unwritableBytesMax: 10_500)
        let ended = Flag()
        harness.stream.ended.whenSuccess { ended.set() }
        harness.stream.start(replay: [])
        await harness.run()
        harness.channel.isWritable = false
        func large(_ seq: Int64) -> ChatEvent {
            var message = Self.message(seq)
            message.text = String(repeating: "x", count: 3_000)
            return .message(message)
        }
        await harness.deliver(large(1), large(2), large(3))
        #expect(!ended.isSet)
        await harness.deliver(large(4))
        #expect(ended.isSet)
        #expect(!harness.channel.isActive)
    }

    /// An idle stream whose client takes nothing (its window at 0) writes too little to pass the
    /// byte bound for weeks: it ends once nothing was taken for `unwritableFor`; a client that
    /// takes again before then keeps it.
    @Test func aClientThatTakesNothingForAWhileLosesAnIdleStream() async throws {
        let clock = SteppedClock()
        let harness = try await Harness(unwritableFor: .seconds(60), clock: clock)
        let ended = Flag()
        harness.stream.ended.whenSuccess { ended.set() }
        harness.stream.start(replay: [])
        let stream = harness.stream
        await harness.run()
        harness.channel.isWritable = false
        await harness.run { stream.tick() }
        clock.advance(by: .seconds(40))
        await harness.run { stream.tick() }
        harness.channel.isWritable = true
        await harness.run { stream.tick() }
        harness.channel.isWritable = false
        await harness.run { stream.tick() }
        clock.advance(by: .seconds(40))
        await harness.run { stream.tick() }
        #expect(!ended.isSet, "40 s without taking anything, twice, with a take between")
        clock.advance(by: .seconds(25))
        await harness.run { stream.tick() }
        #expect(ended.isSet)
        #expect(!harness.channel.isActive, "ended abruptly: its client resumes by cursor")
    }

    /// A replay's next page waits for its client to take the last: it goes when the connection
    /// becomes writable again (woken by the handler that sees the socket's writability, not by
    /// polling), and not at all once the session ended a client that took nothing for a while.
    @Test func aReplayPageWaitsForRoomOrForTheStreamsEnd() async throws {
        let clock = SteppedClock()
        let harness = try await Harness(unwritableFor: .seconds(60), clock: clock)
        try await harness.channel.pipeline.addHandler(StalledConnectionCloser(logger: Logger(label: "test")))
        let stream = harness.stream
        let answers = Mutex<[Bool]>([])
        harness.stream.replay([.message(Self.message(1))])
        harness.channel.isWritable = false
        harness.stream.roomForMore().whenSuccess { room in answers.withLock { $0.append(room) } }
        await harness.run()
        #expect(answers.withLock { $0 }.isEmpty, "no room while the connection takes nothing")
        harness.channel.isWritable = true
        harness.channel.pipeline.fireChannelWritabilityChanged()
        await harness.run()
        #expect(answers.withLock { $0 } == [true], "room as soon as it takes more")

        harness.channel.isWritable = false
        harness.channel.pipeline.fireChannelWritabilityChanged()
        harness.stream.roomForMore().whenSuccess { room in answers.withLock { $0.append(room) } }
        await harness.run { stream.tick() }
        clock.advance(by: .seconds(61))
        await harness.run { stream.tick() }
        #expect(answers.withLock { $0 } == [true, false], "the session ended the stream: no page goes")
        #expect(!harness.channel.isActive)
    }

    @Test func finishEndsTheStreamAfterWhatWasWritten() async throws {
        let harness = try await Harness()
        let ended = Flag()
        harness.stream.ended.whenSuccess { ended.set() }
        harness.stream.start(replay: [.message(Self.message(1))])
        harness.stream.finish()
        await harness.run()
        #expect(ended.isSet)
        #expect(try await harness.written().map(\.0) == ["message", "ready"])
    }
}
