import Foundation
@testable import ParleyChat
@testable import ParleyCluster
import ParleyModel
import Testing

/// Values of every shape that cross the cluster, with edge cases of each primitive.
private struct Shapes: Codable, Equatable {
    enum Mood: String, Codable { case calm, loud }
    enum Either: Codable, Equatable {
        case left(Int64)
        case right(name: String, extra: [String?])
        case neither
    }

    var empty = ""
    var text = "héllo, 世界 👋"
    var none: String? = nil
    var some: String? = ""
    var flags = [true, false]
    var integers: [Int64] = [.min, -1, 0, 1, .max]
    var small: [UInt8] = [0, 255]
    var int = Int.min
    var uint = UInt.max
    var double = -0.1
    var date = Date(timeIntervalSince1970: 1_800_000_000.123)
    var mood = Mood.loud
    var optionals: [Int?] = [nil, 3, nil]
    var nested: [[String]] = [[], ["a"], ["b", "c"]]
    var byKey: [String: [Int]] = ["x": [1], "": []]
    var either: [Either] = [.left(-7), .right(name: "r", extra: [nil, "e"]), .neither]
    var duration = Duration.milliseconds(1_500)
    var uuid = UUID()
}

@Suite struct BinarySerializationTests {
    let binary = BinaryClusterSerialization()

    func roundTrip<Value: Codable & Equatable>(_ value: Value) throws -> Value {
        try binary.decode(Value.self, from: try binary.encode(value))
    }

    @Test func everyShapeReadsBackAsWritten() throws {
        let shapes = Shapes()
        #expect(try roundTrip(shapes) == shapes)
        let optional: Shapes? = nil
        #expect(try roundTrip(optional) == nil)
        #expect(try roundTrip(Optional(shapes)) == shapes)
        #expect(try roundTrip(42) == 42 && roundTrip("") == "" && roundTrip([String]()) == [])
    }

    /// What the chat actors send each other: a message's result, deliveries of every event kind,
    /// directory answers.
    @Test func theChatWireTypesReadBackAsWritten() throws {
        let ann: UserID = "u_ann", ben: UserID = "u_ben"
        let at = Date(millisecondsSince1970: 1_800_000_000_123)
        let message = Message(conversationId: "c_1", seq: 7, senderId: ann, clientMessageId: UUID().uuidString, text: "hi\n\"there\"", sentAt: at)
        #expect(try roundTrip(SendResult(message: message, created: true)) == SendResult(message: message, created: true))
        #expect(try roundTrip(SendResult(message: message.tombstone, created: false)) == SendResult(message: message.tombstone, created: false),
                "a retry of an erased message's send gets its tombstone")
        var changed = message
        changed.editedAt = at.addingTimeInterval(5)
        changed.reactions = [Reaction(emoji: "👍", count: 2)]
        #expect(try roundTrip(SendResult(message: changed, created: false)) == SendResult(message: changed, created: false), "a retry of an edited message's send")
        var reply = message
        reply.replyTo = MessageQuote(seq: 3, senderId: ben, text: "the \"plan\"", attachments: true)
        reply.mentions = [ben]
        #expect(try roundTrip(SendResult(message: reply, created: true)) == SendResult(message: reply, created: true), "a reply keeps its quote and mentions")
        for send in [
            SendMessage(senderId: ann, clientMessageId: UUID().uuidString, text: "re", replyTo: 3, mentions: [ben, "u_cat"]),
            SendMessage(senderId: ann, clientMessageId: UUID().uuidString, text: "zero is no seq, but is carried as asked", replyTo: 0),
            SendMessage(senderId: ann, clientMessageId: UUID().uuidString, text: "plain"),
        ] {
            #expect(try roundTrip(send) == send)
        }
        let record = ConversationRecord(
            id: "c_1", kind: .group, name: nil, ownerId: ann, lastSeq: 7, createdAt: at,
            members: [ConversationMember(userId: ann, role: .owner), ConversationMember(userId: ben, role: .member, deliveredSeq: 3, readSeq: 2)])
        let deliveries = [
            EventDelivery(event: .message(message), recipients: [ann, ben]),
            EventDelivery(event: .receipt(ReceiptEvent(conversationId: "c_1", userId: ben, deliveredSeq: 7, readSeq: 5, at: at)), recipients: [ann]),
            EventDelivery(event: .typing(TypingEvent(conversationId: "c_1", userId: ann, typing: true)), recipients: [ben]),
            EventDelivery(event: .conversation(ConversationChange(conversation: record, change: .memberAdded, at: at)), recipients: []),
            EventDelivery(event: .presence(Presence(userId: ann, status: .offline, lastSeenAt: at)), recipients: [ben]),
            EventDelivery(event: .message(message.tombstone), recipients: [ben]),
            EventDelivery(event: .erasure(Erasure(message: message, at: at)), recipients: [ann, ben]),
            EventDelivery(event: .message(changed), recipients: [ben]),
            EventDelivery(event: .message(reply), recipients: [ann]),
            EventDelivery(event: .change(MessageChange(conversationId: "c_1", changeSeq: 4, afterSeq: 7, seq: 3, kind: .pinned, userId: ann, at: at)), recipients: [ben]),
            EventDelivery(event: .message(message.deletedTombstone(by: ben)), recipients: [ben]),
            EventDelivery(event: .change(MessageChange(
                conversationId: "c_1", changeSeq: 3, afterSeq: 7, seq: 7, kind: .reactionAdded, userId: ben, at: at, emoji: "❤️", count: 2)), recipients: [ann]),
        ]
        #expect(try roundTrip(deliveries) == deliveries, "an erased message keeps its mark, a changed one its changes")

        // Apps' fields, whose values' kinds the binary Codable form could not tell apart, cross as
        // their JSON text wherever they are.
        let fields = Metadata([
            "durationMs": .integer(9_007_199_254_740_993), "ratio": .number(-0.5), "tags": .array([.string("a\"b"), .null, .bool(false)]),
            "nested": .object(["deep": .object(["x": .integer(1)])]),
        ])
        var voice = message
        voice.metadata = fields
        var pictured = User(id: ann, handle: "ann", displayName: "Ann", createdAt: at)
        pictured.metadata = fields
        pictured.avatar = Media(id: "m_9", contentType: "image/png", size: 10, sha256: String(repeating: "cd", count: 32), createdAt: at)
        var described = record
        described.metadata = fields
        described.members[1].metadata = Metadata(["translateTo": .string("ja")])
        described.photo = pictured.avatar
        let withFields = [
            EventDelivery(event: .message(voice), recipients: [ben]),
            EventDelivery(event: .user(pictured), recipients: [ann, ben]),
            EventDelivery(event: .conversation(ConversationChange(conversation: described, change: .updated, at: at)), recipients: [ann]),
        ]
        #expect(try roundTrip(withFields) == withFields, "a message's, a user's, a conversation's and a member's fields")
        let sendWithFields = SendMessage(senderId: ann, clientMessageId: UUID().uuidString, text: "voice", metadata: fields)
        #expect(try roundTrip(sendWithFields) == sendWithFields)
        #expect(try roundTrip(SendResult(message: voice, created: true)) == SendResult(message: voice, created: true))
        let directory: [String: [UserID]] = ["gateway-1": [ann, ben], "gateway-2": []]
        #expect(try roundTrip(directory) == directory)
    }

    /// The values every chat message crosses the cluster in go in their hand-written forms (the
    /// tag 2), and read back equal, whatever their text.
    @Test func theMessagePathUsesTheHandWrittenForms() throws {
        let at = Date(timeIntervalSince1970: 1_800_000_000.123_456)  // not whole milliseconds: kept exactly
        // A text no send makes (an empty one is a tombstone's: `theChatWireTypesReadBackAsWritten`).
        let message = Message(conversationId: "c_1", seq: .max, senderId: "u_ann", clientMessageId: "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d", text: " ", sentAt: at)
        var odd = message
        odd.id = "an id that is not conversation:seq"
        let photo = Attachment(
            media: Media(id: "m_1", contentType: "image/jpeg", size: 2_345_678, sha256: String(repeating: "ab", count: 32), width: 4032, height: 3024, createdAt: at),
            caption: "la vue 🏔\n")
        let file = Attachment(media: Media(id: "m_2", contentType: "application/pdf", size: 1, sha256: String(repeating: "0", count: 64), createdAt: at))
        var withFiles = message
        withFiles.attachments = [photo, file]
        let send = SendMessage(senderId: "u_ann", clientMessageId: "k", text: "héllo 👋\u{0}\n")
        let sendFiles = SendMessage(senderId: "u_ann", clientMessageId: "k", text: "", attachments: [photo, file])
        #expect(try roundTrip(sendFiles) == sendFiles)
        #expect(try roundTrip(SendResult(message: withFiles, created: true)) == SendResult(message: withFiles, created: true))
        let deliveries = [
            EventDelivery(event: .message(message), recipients: ["u_ann", "u_ben"]),
            EventDelivery(event: .message(withFiles), recipients: ["u_ben"]),
            EventDelivery(event: .message(odd), recipients: []),
            EventDelivery(event: .typing(TypingEvent(conversationId: "c_1", userId: "u_ann", typing: false)), recipients: ["u_ben"]),
        ]
        for bytes in [try binary.encode(send), try binary.encode(SendResult(message: odd, created: false)), try binary.encode(deliveries)] {
            #expect(bytes.first == 2)
        }
        #expect(try roundTrip(send) == send)
        #expect(try roundTrip(SendResult(message: odd, created: false)) == SendResult(message: odd, created: false))
        #expect(try roundTrip(deliveries) == deliveries)
        #expect(try roundTrip([EventDelivery]()) == [])
        // Nested in a Codable value, the same types keep their Codable form.
        #expect(try roundTrip(["a": deliveries]) == ["a": deliveries])
        #expect(try binary.encode(["a": deliveries]).first == 1)
    }

    @Test func cutOrGarbledHandWrittenFormsAreRefused() throws {
        let message = Message(conversationId: "c_1", seq: 7, senderId: "u_ann", clientMessageId: "k", text: "hi", sentAt: Date(millisecondsSince1970: 1_800_000_000_123))
        let deliveries = [
            EventDelivery(event: .message(message), recipients: ["u_ann", "u_ben"]),
            EventDelivery(event: .presence(Presence(userId: "u_ann", status: .online, lastSeenAt: nil)), recipients: ["u_ben"]),
        ]
        let bytes = try binary.encode(deliveries)
        for length in 0..<bytes.count {
            #expect(throws: (any Error).self, "cut to \(length) of \(bytes.count) bytes") {
                try binary.decode([EventDelivery].self, from: Array(bytes.prefix(length)))
            }
        }
        #expect(throws: (any Error).self, "bytes after the value") { try binary.decode([EventDelivery].self, from: bytes + [0]) }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            var garbled = bytes
            for _ in 0..<3 { garbled[Int.random(in: 0..<garbled.count, using: &generator)] = .random(in: .min ... .max, using: &generator) }
            _ = try? binary.decode([EventDelivery].self, from: garbled)  // must return or throw
        }
        // A count far past the bytes there are; a string that is not UTF-8; a Bool that is 2; the
        // Codable form where the wire form is expected.
        #expect(throws: (any Error).self) { try binary.decode([EventDelivery].self, from: [2, 0xFF, 0xFF, 0xFF, 0x7F]) }
        #expect(throws: (any Error).self) { try binary.decode(SendMessage.self, from: [2, 1, 0, 0, 0, 0xC3, 0, 0, 0, 0, 0, 0, 0, 0]) }
        var result = try binary.encode(SendResult(message: message, created: true))
        result[result.count - 1] = 2
        #expect(throws: (any Error).self) { try binary.decode(SendResult.self, from: result) }
        #expect(throws: (any Error).self) { try binary.decode(SendResult.self, from: try BinaryClusterSerialization.encodeCodable(SendResult(message: message, created: true))) }
    }

    /// Bytes from a peer that are cut short or garbled are a decoding error, never a crash or a
    /// wrong value read as right.
    @Test func truncatedOrGarbledBytesAreRefused() throws {
        let bytes = try binary.encode(Shapes())
        for length in 0..<bytes.count {
            #expect(throws: (any Error).self, "cut to \(length) of \(bytes.count) bytes") {
                try binary.decode(Shapes.self, from: Array(bytes.prefix(length)))
            }
        }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            var garbled = bytes
            for _ in 0..<3 { garbled[Int.random(in: 0..<garbled.count, using: &generator)] = .random(in: .min ... .max, using: &generator) }
            _ = try? binary.decode(Shapes.self, from: garbled)  // must return or throw
        }
        #expect(throws: (any Error).self) { try binary.decode([Int64].self, from: [1, 0xFF, 0xFF, 0xFF, 0x7F]) }
        #expect(throws: (any Error).self) { try binary.decode(String.self, from: [1, 0xC3]) }
        #expect(throws: (any Error).self) { try binary.decode(Bool.self, from: [1, 2]) }
    }

    /// A number that is not finite is corrupt data (nothing the cluster sends is): a Date of NaN
    /// read from a peer would trap wherever it is described (found by Scripts/fuzz).
    @Test func numbersThatAreNotFiniteAreRefused() throws {
        for value in [Double.nan, .infinity, -.infinity, Double(bitPattern: 0x7FF0_0000_0000_0001)] {
            let bytes = try binary.encode(value)
            #expect(throws: (any Error).self, "\(value)") { try binary.decode(Double.self, from: bytes) }
            let date = try binary.encode(Date(timeIntervalSinceReferenceDate: value))
            #expect(throws: (any Error).self, "a Date of \(value)") { try binary.decode(Date.self, from: date) }
        }
        #expect(throws: (any Error).self) { try binary.decode(Float.self, from: try binary.encode(Float.nan)) }
        #expect(try binary.decode(Double.self, from: try binary.encode(-1.5e300)) == -1.5e300)
        // A date far from 1970…9999 is refused too (its description traps as well).
        for seconds in [Double.greatestFiniteMagnitude, -1e300, -978_307_201, 252_423_993_600] {
            let date = try binary.encode(Date(timeIntervalSinceReferenceDate: seconds))
            #expect(throws: (any Error).self, "a Date \(seconds) s after 2001") { try binary.decode(Date.self, from: date) }
        }
        let now = Date(millisecondsSince1970: 1_795_000_000_123)
        #expect(try binary.decode(Date.self, from: try binary.encode(now)) == now)
    }
}
