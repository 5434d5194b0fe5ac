import Foundation
@testable import ParleyClient
import ParleyModel
import Testing

@Suite struct EventParsingTests {
    @Test func serverSentEventsSplitAcrossChunksParseIntoFrames() {
        var parser = ServerSentEventParser()
        let text = "event: ready\nid: pc1.5\ndata: {\"cursor\":\"pc1.5\"}\n\n: ping\n\nevent: message\r\nid: pc1.9\r\ndata: {\"a\":1}\r\n\r\n"
        var frames: [ServerSentEventParser.Frame] = []
        // One byte at a time: frames must not depend on how the network cut the stream.
        for byte in Array(text.utf8) { frames += parser.feed([byte]) }
        #expect(frames == [
            .init(event: "ready", id: "pc1.5", data: "{\"cursor\":\"pc1.5\"}"),
            .init(event: "message", id: "pc1.9", data: "{\"a\":1}"),
        ])
    }

    /// Contiguous bytes are searched for line ends; any other sequence is read a byte at a time:
    /// the same frames, however the bytes were cut.
    @Test func contiguousAndByteByByteFeedingAgree() {
        let text = "event: ready\nid: pc1.5\ndata: {\"cursor\":\"pc1.5\"}\n\n: ping\n\nevent: message\r\nid: pc1.9\r\ndata: {\"a\":1}\r\ndata: é😀\n\n\n\nevent: typing\ndata: x\n\nevent: cut"
        let bytes = Array(text.utf8)
        var byByte = ServerSentEventParser()
        let expected = byByte.feed(bytes.lazy.map { $0 })  // not contiguous: a byte at a time
        #expect(expected.count == 3)
        #expect(expected[1] == .init(event: "message", id: "pc1.9", data: "{\"a\":1}\né😀"))
        var random = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            var parser = ServerSentEventParser()
            var frames: [ServerSentEventParser.Frame] = []
            var start = 0
            while start < bytes.count {
                let end = min(bytes.count, start + Int.random(in: 0...12, using: &random))
                frames += parser.feed(bytes[start..<end])
                start = end
            }
            #expect(frames == expected)
            // The frame left open ("event: cut") comes out once it ends, in either parser.
            #expect(parser.feed(Array("\n\n".utf8)) == [.init(event: "cut", id: nil, data: "")])
        }
        #expect(byByte.feed("\n\n".utf8.lazy.map { $0 }) == [.init(event: "cut", id: nil, data: "")])
    }

    @Test func framesDecodeIntoEvents() throws {
        let message = Message(conversationId: "c_1", seq: 3, senderId: "u_a", clientMessageId: "x", text: "hi\nthere", sentAt: Date(millisecondsSince1970: 1_800_000_000_123))
        let data = String(decoding: try API.makeEncoder().encode(API.MessageEvent(message: message)), as: UTF8.self)
        #expect(!data.contains("\n"), "one data line")
        let event = ParleyClient.decode(.init(event: "message", id: "pc1.1", data: data), decoder: API.makeDecoder())
        #expect(event == .message(message))
        #expect(ParleyClient.decode(.init(event: "future-kind", id: nil, data: "{}"), decoder: API.makeDecoder()) == nil)
    }

    @Test func repeatsAcrossAReconnectAreDroppedBySeq() {
        var dedup = MessageDeduplicator()
        func message(_ conversation: ConversationID, _ seq: Int64) -> Message {
            Message(conversationId: conversation, seq: seq, senderId: "u_a", clientMessageId: "\(seq)", text: "t", sentAt: Date())
        }
        let first = [1, 2, 3].map { dedup.isNew(message("c_1", $0)) }
        #expect(first == [true, true, true])
        // The resume replays 2…5.
        let replayed = [2, 3, 4, 5].map { dedup.isNew(message("c_1", $0)) }
        #expect(replayed == [false, false, true, true])
        let other = dedup.isNew(message("c_2", 1))
        #expect(other, "another conversation")
    }

    @Test func timestampsAreRFC3339WithMilliseconds() {
        let date = Date(millisecondsSince1970: 1_795_000_000_123)
        #expect(API.timestamp(date) == "2026-11-18T11:06:40.123Z")
        #expect(API.parseTimestamp("2026-11-18T11:06:40.123Z") == date)
    }
}
