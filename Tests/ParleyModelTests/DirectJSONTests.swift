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

    @Test func aMessageWithAppFieldsIsWhatTheEncoderWrites() throws {
        var voice = message(text: "voice")
        voice.metadata = Metadata(["durationMs": .integer(3250), "kind": .string("voice/ogg \"note\""), "peaks": .array([.number(0.5), .integer(1)])])
        voice.mentions = ["u_b"]
        try expectSameBytes(voice)
        #expect(Message.fromWrappedJSON(voice.wrappedJSON) == nil, "left to the decoder, which reads them")
        #expect(try API.makeDecoder().decode(API.MessageEvent.self, from: Data(voice.wrappedJSON)).message == voice)
        let send = API.NewMessage(clientMessageId: "k", text: "t", metadata: voice.metadata)
        #expect(try API.makeDecoder().decode(API.NewMessage.self, from: Data(send.json)).metadata == voice.metadata)
    }

    @Test func aMessageWithAttachmentsIsWhatTheEncoderWrites() throws {
        var photo = message(text: "")
        photo.attachments = [
            Attachment(
                media: Media(id: "m_1", contentType: "image/jpeg", size: 2_345_678, sha256: String(repeating: "ab", count: 32), width: 4032, height: 3024,
                             createdAt: Date(millisecondsSince1970: 1_795_000_000_001)),
                caption: "la vue 🏔 \"quoted\"\n"),
            Attachment(media: Media(id: "m_2", contentType: "application/pdf", size: 9, sha256: String(repeating: "0", count: 64), createdAt: Date(millisecondsSince1970: 0))),
        ]
        try expectSameBytes(photo)
        #expect(Message.fromWrappedJSON(photo.wrappedJSON) == nil, "the decoder reads what the fast reader does not")
        #expect(try API.makeDecoder().decode(API.MessageEvent.self, from: Data(photo.wrappedJSON)).message == photo)
        let body = API.NewMessage(clientMessageId: "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d", text: "", attachments: [API.NewAttachment(mediaId: "m_1", caption: "x")])
        #expect(String(decoding: body.json, as: UTF8.self) == String(decoding: try encoder.encode(body), as: UTF8.self))
        let read = try API.makeDecoder().decode(API.NewMessage.self, from: Data(#"{"clientMessageId":"k","attachments":[{"mediaId":"m_1"}]}"#.utf8))
        #expect(read.text == "" && read.attachments == [API.NewAttachment(mediaId: "m_1")], "no text: an empty one")
    }

    @Test func aReplyWithMentionsIsWhatTheEncoderWrites() throws {
        var reply = message(text: "yes \"that\"")
        reply.replyTo = MessageQuote(seq: 3, senderId: "u_ann", text: "shall we \"go\"?\n", attachments: true, deleted: nil)
        reply.mentions = ["u_ann", "u_b\"o"]
        reply.reactions = [Reaction(emoji: "👍", count: 1)]
        try expectSameBytes(reply)
        reply.replyTo?.deleted = true
        try expectSameBytes(reply)
        #expect(try API.makeDecoder().decode(API.MessageEvent.self, from: Data(reply.wrappedJSON)).message == reply)
        let body = API.NewMessage(clientMessageId: "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d", text: "re", replyTo: 3, mentions: ["u_ann"])
        #expect(String(decoding: body.json, as: UTF8.self) == String(decoding: try encoder.encode(body), as: UTF8.self))
    }

    @Test func aSendsBodyIsWhatTheEncoderWrites() throws {
        for text in ["load 17", "", "a\"b\\c/\n\u{0}\u{1F}é😀\u{2028}", String(decoding: Array(UInt8(0)...0x7F), as: UTF8.self)] {
            let body = API.NewMessage(clientMessageId: "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d", text: text)
            #expect(String(decoding: body.json, as: UTF8.self) == String(decoding: try encoder.encode(body), as: UTF8.self))
        }
    }

    /// A send's body read back by the gateway's reader of its common form: what the client
    /// library writes is read as `JSONDecoder` reads it; what it cannot read for certain (an
    /// escape, whitespace, keys in another order or another key, bytes after the object, text
    /// that is not UTF-8) it leaves to the decoder.
    @Test func aSendsBodyIsReadAsTheDecoderReadsIt() throws {
        func decoded(_ bytes: [UInt8]) -> API.NewMessage? { try? API.makeDecoder().decode(API.NewMessage.self, from: Data(bytes)) }
        let id = "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d"
        for text in ["load 17", "", "héllo 😀 / '\u{7F}", String(repeating: "x", count: 4_000), "nul\u{0}"] {
            let body = API.NewMessage(clientMessageId: id, text: text).json
            let read = API.NewMessage.fromCanonicalJSON(body)
            if text.utf8.contains(where: { $0 < 0x20 }) {
                #expect(read == nil, "an escaped control character is the decoder's to read")
            } else {
                #expect(read?.clientMessageId == id)
                #expect(read?.text == text)
                #expect(read?.text == decoded(body)?.text)
                #expect(API.NewMessage.fromCanonicalJSON(Data(body))?.text == text, "from Data")
            }
        }
        let others: [[UInt8]] = [
            Array(#"{"clientMessageId":"\#(id)","text":"a \"quote\""}"#.utf8),
            Array(#"{"clientMessageId":"\#(id)","text":"caf\u00e9"}"#.utf8),
            Array(#"{"clientMessageId": "\#(id)", "text": "x"}"#.utf8),
            Array(#"{"text":"x","clientMessageId":"\#(id)"}"#.utf8),
            Array(#"{"clientMessageId":"\#(id)","text":"x","extra":1}"#.utf8),
            Array(#"{"clientMessageId":"\#(id)","text":"x"} "#.utf8),
            Array(#"{"clientMessageId":"\#(id)","text":"x"}{}"#.utf8),
            Array(#"{"clientMessageId":"\#(id)","text":1}"#.utf8),
            Array(#"{"clientMessageId":"\#(id)"}"#.utf8),
            Array(#"{"clientMessageId":"\#(id)","text":"x"#.utf8),
            Array(#"{"clientMessageId":"\#(id)","text":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8),
        ]
        for bytes in others {
            #expect(API.NewMessage.fromCanonicalJSON(bytes) == nil, "\(String(decoding: bytes, as: UTF8.self))")
        }
        #expect(decoded(others[0])?.text == "a \"quote\"")
        #expect(decoded(others[1])?.text == "café")
        #expect(decoded(others[3])?.text == "x")
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

    @Test func aWholeMillisecondReadsBackAsItself() {
        var random = SeededRandom(seed: 0x5EED_0006)
        for _ in 0..<100_000 {
            let millis = Int64.random(in: 0..<253_402_300_800_000, using: &random)
            #expect(Date(millisecondsSince1970: millis).millisecondsSince1970 == millis)
            #expect(Date(millisecondsSince1970: millis).addingTimeInterval(0.000_9).millisecondsSince1970 == millis, "truncated, not rounded")
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

/// The direct reader of `{"message": …}` against Foundation's decoder: it reads the gateway's own
/// form, and whatever it accepts the decoder reads as the same message.
@Suite struct CanonicalMessageReaderTests {
    let decoder = API.makeDecoder()

    func decoded(_ bytes: [UInt8]) -> Message? {
        try? decoder.decode(API.MessageEvent.self, from: Data(bytes)).message
    }

    func message(_ random: inout SeededRandom, text: String) -> Message {
        Message(
            conversationId: ConversationID(rawValue: "c_\(UInt32.random(in: 0...UInt32.max, using: &random))"), seq: Int64.random(in: 1...999_999_999_999, using: &random),
            senderId: "u_x/é", clientMessageId: "0193a0c1-7f3e-7b2a-9c4d-\(UInt16.random(in: 0...UInt16.max, using: &random))", text: text,
            sentAt: Date(millisecondsSince1970: Int64.random(in: 0..<253_402_300_800_000, using: &random)))
    }

    @Test func readsWhatTheWriterWrites() {
        var random = SeededRandom(seed: 0x5EED_0003)
        for text in ["", "hello", "héllo 😀 / '", String(repeating: "x", count: 4_000)] {
            for _ in 0..<100 {
                let message = message(&random, text: text)
                let json = message.wrappedJSON
                #expect(Message.fromWrappedJSON(json) == message)
                #expect(Message.fromWrappedJSON(Data(json)) == message, "from Data, as a client reads a body")
                #expect(Message.fromWrappedJSON(String(decoding: json, as: UTF8.self).utf8) == message)
                #expect(decoded(json) == message)
            }
        }
    }

    @Test func leavesEverythingElseToTheDecoder() {
        var random = SeededRandom(seed: 0x5EED_0004)
        let escaped = message(&random, text: "a \"quote\", a \\ and a\nnewline")
        #expect(Message.fromWrappedJSON(escaped.wrappedJSON) == nil)
        #expect(decoded(escaped.wrappedJSON) == escaped)
        var spaced = String(decoding: message(&random, text: "x").wrappedJSON, as: UTF8.self)
        spaced.replace(",\"seq\":", with: ", \"seq\": ")
        #expect(Message.fromWrappedJSON(spaced.utf8) == nil)
        #expect(decoded(Array(spaced.utf8)) != nil)
        for date in ["2023-02-29T00:00:00.000Z", "2024-02-30T00:00:00.000Z", "2024-13-01T00:00:00.000Z", "2024-04-31T00:00:00.000Z", "1969-12-31T23:59:59.999Z"] {
            let text = "{\"message\":{\"clientMessageId\":\"k\",\"conversationId\":\"c\",\"id\":\"c:1\",\"senderId\":\"u\",\"sentAt\":\"\(date)\",\"seq\":1,\"text\":\"t\"}}"
            #expect(Message.fromWrappedJSON(text.utf8) == nil, "\(date)")
        }
        let leap = "{\"message\":{\"clientMessageId\":\"k\",\"conversationId\":\"c\",\"id\":\"c:1\",\"senderId\":\"u\",\"sentAt\":\"2024-02-29T23:59:59.999Z\",\"seq\":1,\"text\":\"t\"}}"
        #expect(Message.fromWrappedJSON(leap.utf8) == decoded(Array(leap.utf8)))
        #expect(Message.fromWrappedJSON(leap.utf8) != nil)
    }

    /// Cut or garbled, the form is either refused or read exactly as the decoder reads it.
    @Test func neverReadsDifferentlyFromTheDecoder() {
        var random = SeededRandom(seed: 0x5EED_0005)
        let json = message(&random, text: "some text").wrappedJSON
        for length in 0..<json.count {
            #expect(Message.fromWrappedJSON(json.prefix(length)) == nil)
        }
        let alphabet = Array("0123456789-:.\"\\,{}TZ ax\u{7F}".utf8) + [0x00, 0xC3, 0xFF]
        for _ in 0..<5_000 {
            var garbled = json
            for _ in 0..<Int.random(in: 1...2, using: &random) {
                garbled[Int.random(in: 0..<garbled.count, using: &random)] = alphabet.randomElement(using: &random)!
            }
            if let read = Message.fromWrappedJSON(garbled) {
                #expect(read == decoded(garbled), "\(String(decoding: garbled, as: UTF8.self))")
            }
        }
    }
}
