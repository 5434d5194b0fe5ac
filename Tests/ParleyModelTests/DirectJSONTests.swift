import Foundation
@testable import ParleyModel
import ParleyTestKit
import Testing

/// The direct JSON writer against Foundation's encoder, configured as the gateway's: byte for byte.
@Suite struct DirectJSONTests {
    let encoder = API.makeEncoder()

    func message(text: String, seq: Int64 = 42, millis: Int64 = 1_795_000_000_123, id: String = "c_01JD4Q") -> Message {
        Message(conversationId: ConversationID(rawValue: id), seq: seq, senderId: "u_7/x\"y", clientMessageId: "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d", text: text, sentAt: Date(millisecondsSince1970: millis))
    }

    func expectSameBytes(_ message: Message, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let expected = try Array(encoder.encode(API.MessageEvent(message: message)))
        #expect(String(decoding: message.wrappedJSON, as: UTF8.self) == String(decoding: expected, as: UTF8.self), sourceLocation: sourceLocation)
        #expect(try Array(encoder.encode(API.SentMessage(message: message))) == message.wrappedJSON, "a send's reply has the same shape", sourceLocation: sourceLocation)
    }

    @Test func everyASCIICharacterIsEscapedAsTheEncoderDoes() throws {
        for byte in UInt8(0)...0x7F {
            try expectSameBytes(message(text: "a\(Character(Unicode.Scalar(byte)))b"))
        }
        try expectSameBytes(message(text: String(decoding: Array(UInt8(0)...0x7F), as: UTF8.self)))
    }

    @Test func textsOfAnyUnicodeAndLength() throws {
        try expectSameBytes(message(text: ""))
        try expectSameBytes(message(text: "\u{2028}\u{2029} é 😀 \u{FEFF} \u{7F} \"quoted\" \\ / \\u0000"))
        var random = SeededRandom(seed: 0x5EED_0001)
        let pool: [Unicode.Scalar] = ["a", "Z", "0", " ", "\"", "\\", "/", "\n", "\r", "\t", "\u{0}", "\u{1F}", "\u{7F}", "é", "ß", "中", "😀", "\u{2028}", "\u{FFFD}"]
        for _ in 0..<500 {
            var text = String.UnicodeScalarView()
            for _ in 0..<Int.random(in: 0...40, using: &random) { text.append(pool.randomElement(using: &random)!) }
            try expectSameBytes(message(text: String(text), seq: Int64.random(in: 1...Int64.max, using: &random)))
        }
    }

    @Test func integersAtTheirEdges() throws {
        for seq in [Int64.min, -1, 0, 1, 9, 10, 99, 100, 1_000_000_007, Int64.max] {
            try expectSameBytes(message(text: "x", seq: seq))
        }
    }

    @Test func timestampsMatchTheFormatter() throws {
        // Edges of days, months, leap years (2000 is one, 2100 is not), the range's ends.
        let edges: [Int64] = [
            0, 999, 1_000, 86_399_999, 86_400_000,
            951_782_400_000, 951_868_799_999, 951_868_800_000,  // 2000-02-29
            4_107_542_399_999, 4_107_542_400_000,  // 2100-02-28 / 2100-03-01
            1_795_000_000_123, 253_402_300_799_999,
        ]
        var random = SeededRandom(seed: 0x5EED_0002)
        let samples = edges + (0..<2_000).map { _ in Int64.random(in: 0..<253_402_300_800_000, using: &random) }
        for millis in samples {
            var bytes: [UInt8] = []
            #expect(API.appendTimestamp(millisecondsSince1970: millis, to: &bytes))
            #expect(String(decoding: bytes, as: UTF8.self) == API.formattedTimestamp(millisecondsSince1970: millis), "at \(millis) ms")
            try expectSameBytes(message(text: "t", millis: millis))
        }
    }

    @Test func instantsOutsideTheDirectRangeUseTheFormatter() throws {
        for millis: Int64 in [-1, -86_400_001, 253_402_300_800_000] {
            var bytes: [UInt8] = []
            #expect(!API.appendTimestamp(millisecondsSince1970: millis, to: &bytes))
            #expect(bytes.isEmpty)
            let date = Date(millisecondsSince1970: millis)
            #expect(API.timestamp(date) == API.formattedTimestamp(millisecondsSince1970: date.millisecondsSince1970))
            try expectSameBytes(message(text: "t", millis: millis))
        }
    }
}
