import Foundation
import NIOCore
import ParleyChat
import ParleyCluster
import ParleyMetadata
import ParleyModel
import ParleyWire

/// What `Scripts/fuzz` runs under libFuzzer, and what the corpus regression test replays: each
/// target reads arbitrary bytes the way the server reads a client's or a peer's, and checks
/// what must hold whatever they are. A parser may refuse the bytes; it may not trap, and what it
/// accepts must read back the same.
public enum FuzzTarget: String, CaseIterable, Sendable {
    /// A send's JSON body: the canonical fast reader, and `JSONDecoder` behind it.
    case sendBody = "send-body"
    /// The cluster's frame decoder: length-prefixed frames, then each frame's fields.
    case frame
    /// The binary cluster serialization of call arguments, results and deliveries.
    case binary
    /// The event stream's resume cursor (`?cursor=`, `Last-Event-ID`).
    case cursor
    /// The query-string and path parsers: integers, ID lists, page cursors, IDs.
    case query
    /// The send socket's WebSocket frames, as a browser writes them (RFC 6455, masked).
    case webSocket = "websocket"
    /// The location's removal from an upload's metadata, one target per format: JPEG (EXIF,
    /// XMP, MPF), PNG, WebP, HEIF, and MP4/QuickTime.
    case jpegLocation = "jpeg-location"
    case pngLocation = "png-location"
    case webpLocation = "webp-location"
    case heifLocation = "heif-location"
    case mp4Location = "mp4-location"

    /// A property that did not hold: the input is a finding.
    public struct Finding: Error, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    public func run(_ bytes: [UInt8]) throws(Finding) {
        switch self {
        case .sendBody: try Self.sendBody(bytes)
        case .frame: try Self.frame(bytes)
        case .binary: try Self.binary(bytes)
        case .cursor: try Self.cursor(bytes)
        case .query: try Self.query(bytes)
        case .webSocket: try Self.webSocket(bytes)
        case .jpegLocation, .pngLocation, .webpLocation, .heifLocation, .mp4Location: try Self.location(bytes, contentType: contentType)
        }
    }

    /// The content type a location target reads its bytes as.
    var contentType: String {
        switch self {
        case .jpegLocation: "image/jpeg"
        case .pngLocation: "image/png"
        case .webpLocation: "image/webp"
        case .heifLocation: "image/heic"
        default: "video/mp4"
        }
    }

    /// Inputs of the shape the target reads, made by the real writers (the JSON a client sends,
    /// frames and values as nodes encode them): where a run starts, besides the committed corpus.
    public var seeds: [[UInt8]] {
        let at = Date(millisecondsSince1970: 1_795_000_000_123)
        let message = Message(conversationId: "c_1", seq: 7, senderId: "u_a", clientMessageId: "0196c0de-0000-7000-8000-000000000001", text: "hé 👍🏽\n", sentAt: at)
        let record = ConversationRecord(
            id: "c_1", kind: .group, name: "team", ownerId: "u_a", lastSeq: 7, createdAt: at,
            members: [ConversationMember(userId: "u_a", role: .owner), ConversationMember(userId: "u_b", role: .member, deliveredSeq: 3, readSeq: 2)])
        switch self {
        case .sendBody:
            return [
                API.NewMessage(clientMessageId: message.clientMessageId, text: "hello").json,
                Array(#"{"clientMessageId":"a","text":"tab\t \u00e9 \ud83d\udc4d"}"#.utf8),
                Array(#"{ "text" : "spaced", "clientMessageId" : "b" }"#.utf8),
            ]
        case .frame:
            let identity = PeerIdentity(id: NodeID(name: "worker-1", incarnation: 1_795_000_000_123), roles: [.worker], address: NodeAddress(host: "127.0.0.1", port: 7600))
            let arguments = (try? BinaryClusterSerialization().encode(SendMessage(senderId: "u_a", clientMessageId: "m", text: "hi"))) ?? []
            let frames: [Frame] = [
                .hello(Hello(identity: identity)),
                .helloRejected("protocol version 2"),
                .message(.call(CallEnvelope(
                    callID: 1, recipient: ClusterActorID(kind: "conversation", key: "c_1"), target: "send", arguments: [arguments], timeout: .seconds(5)))),
                .message(.reply(ReplyEnvelope(callID: 1, outcome: .value(arguments)))),
                .message(.reply(ReplyEnvelope(callID: 2, outcome: .error(ClusterCallError(code: .deadlineExceeded, message: "late"))))),
                .message(.gossip(Gossip(from: identity.id, members: [Member(id: identity.id, address: identity.address, roles: identity.roles, status: .up)]))),
            ]
            return [frames.reduce(into: [UInt8]()) { bytes, frame in
                let buffer = frame.encoded(allocator: ByteBufferAllocator())
                bytes += buffer.readableBytesView
            }]
        case .binary:
            let serialization = BinaryClusterSerialization()
            return [
                try? serialization.encode(SendMessage(senderId: "u_a", clientMessageId: "m", text: "hi")),
                try? serialization.encode(SendResult(message: message, created: true)),
                try? serialization.encode([EventDelivery(event: .message(message), recipients: ["u_a", "u_b"])]),
                try? serialization.encode(ChatEvent.conversation(ConversationChange(conversation: record, change: .memberAdded, at: at))),
                try? serialization.encode(record),
                try? serialization.encode(CreateConversation(creatorId: "u_a", memberIds: ["u_b", "u_c"], name: "g")),
            ].compactMap { $0 }
        case .cursor:
            return [Array(StreamCursor(at).token.utf8), Array("pc1.0".utf8), Array("pc1.253402300799999".utf8)]
        case .jpegLocation: return [LocatedFiles.jpeg(), LocatedFiles.jpeg(secondImage: true)]
        case .pngLocation: return [LocatedFiles.png]
        case .webpLocation: return [LocatedFiles.webp]
        case .heifLocation: return [LocatedFiles.heif(), LocatedFiles.heif(inItemData: true)]
        case .mp4Location: return [LocatedFiles.quickTime]
        case .query:
            return [
                Array("50".utf8), Array("9223372036854775807".utf8), Array("u_a,u_b,u_c".utf8),
                Array(ClientInput.pageCursorToken(ConversationPageCursor(lastActivityAt: at, id: "c_1")).utf8),
            ]
        case .webSocket:
            // What a page writes: its token, a message, a fragmented one, a ping, a close.
            let mask: [UInt8] = [0x9A, 0x01, 0x5C, 0xE3]
            let command = API.StreamedCommand(conversationId: "c_1", .message(API.NewMessage(clientMessageId: message.clientMessageId, text: "hé 👍🏽")))
            let line = Array(command.jsonLine.dropLast())
            return [
                WebSocketMessages.frame(.text, Array(#"{"token":"pt1.abc"}"#.utf8), mask: mask) + WebSocketMessages.frame(.text, line, mask: mask),
                [0x01, 0x85] + mask + zip(Array("hello".utf8), mask + mask).map { $0 ^ $1 } + WebSocketMessages.frame(.ping, Array("p".utf8), mask: mask)
                    + WebSocketMessages.frame(.continuation, line, mask: mask),
                WebSocketMessages.frame(.text, [UInt8](repeating: UInt8(ascii: "x"), count: 300), mask: mask)
                    + WebSocketMessages.frame(.close, WebSocketMessages.closePayload(WebSocketMessages.CloseCode.normal), mask: mask),
            ]
        }
    }

    // MARK: Targets

    static func sendBody(_ bytes: [UInt8]) throws(Finding) {
        let fast = API.NewMessage.fromCanonicalJSON(bytes)
        let decoded = try? JSONDecoder().decode(API.NewMessage.self, from: Data(bytes))
        if let fast {
            // The fast path is only a shortcut: whatever it reads, the decoder reads the same.
            guard let decoded, decoded.clientMessageId == fast.clientMessageId, decoded.text == fast.text else {
                throw Finding("the canonical reader read \(fast) where JSONDecoder read \(String(describing: decoded))")
            }
        }
        if let message = fast ?? decoded {
            // What the gateway checks next must not trap either.
            _ = StoredText.problem(in: message.text, field: "text")
            _ = message.text.unicodeScalars.count
        }
    }

    /// The limit the WebSocket target reads with: small enough for the fuzzer's inputs to pass it.
    static let webSocketLimit = 1_000

    static func webSocket(_ bytes: [UInt8]) throws(Finding) {
        func read(inPiecesOf size: Int) -> [WebSocketMessages.Message] {
            var messages = WebSocketMessages(limit: webSocketLimit, from: .client)
            var read: [WebSocketMessages.Message] = []
            var offset = 0
            repeat {
                let end = min(bytes.count, offset + size)
                messages.append(bytes[offset..<end])
                offset = end
                while let message = messages.next() { read.append(message) }
            } while offset < bytes.count
            return read
        }
        let whole = read(inPiecesOf: max(bytes.count, 1))
        // Where the pieces end changes nothing: a frame's header or payload cut anywhere.
        for size in [1, 7, 512] where read(inPiecesOf: size) != whole {
            throw Finding("read in pieces of \(size) the messages differ from read whole")
        }
        for (index, message) in whole.enumerated() {
            switch message {
            case .text(let text):
                guard text.count <= webSocketLimit else { throw Finding("a text message of \(text.count) bytes passed the limit") }
                guard String(validating: text, as: UTF8.self) != nil else { throw Finding("a text message that is not UTF-8 was read") }
            case .ping(let payload):
                guard payload.count <= 125 else { throw Finding("a ping of \(payload.count) bytes was read") }
            case .close, .failed:
                guard index == whole.count - 1 else { throw Finding("a message was read after a close or a failure") }
            case .pong:
                break
            }
        }
    }

    static func frame(_ bytes: [UInt8]) throws(Finding) {
        let decoder = FrameDecoder(frameBytesMax: 1 << 20)
        var buffer = ByteBuffer(bytes: bytes)
        while true {
            let next: ByteBuffer?
            do {
                next = try decoder.nextFrame(&buffer)
            } catch {
                return  // a bad length: the connection would be closed
            }
            guard var body = next else { return }
            guard let frame = try? Frame(decoding: &body) else { continue }
            // A frame that decodes encodes to bytes that decode to the same frame.
            var again = frame.encoded(allocator: ByteBufferAllocator())
            guard let length: UInt32 = again.readInteger(), Int(length) == again.readableBytes else {
                throw Finding("the re-encoded \(frame) has a wrong length prefix")
            }
            let reread = try? Frame(decoding: &again)
            guard reread == frame else { throw Finding("\(frame) re-encoded reads back as \(String(describing: reread))") }
        }
    }

    static func binary(_ bytes: [UInt8]) throws(Finding) {
        try roundTrip(SendMessage.self, bytes)
        try roundTrip(SendResult.self, bytes)
        try roundTrip([EventDelivery].self, bytes)
        try roundTrip(ChatEvent.self, bytes)
        try roundTrip(Message.self, bytes)
        try roundTrip(ConversationRecord.self, bytes)
        try roundTrip(CreateConversation.self, bytes)
        try roundTrip([UserID].self, bytes)
    }

    /// Bytes that decode as `Value` encode to bytes that decode to the same value.
    private static func roundTrip<Value: Codable & Equatable>(_ type: Value.Type, _ bytes: [UInt8]) throws(Finding) {
        let serialization = BinaryClusterSerialization()
        guard let value = try? serialization.decode(type, from: bytes) else { return }
        let encoded: [UInt8]
        do {
            encoded = try serialization.encode(value)
        } catch {
            throw Finding("\(value) decoded as \(type) but does not encode: \(error)")
        }
        let reread = try? serialization.decode(type, from: encoded)
        guard reread == value else { throw Finding("\(value) as \(type) reads back as \(String(describing: reread))") }
    }

    static func cursor(_ bytes: [UInt8]) throws(Finding) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let cursor = StreamCursor(token: text) else { return }
        guard StreamCursor.millisRange.contains(cursor.millis), StreamCursor(token: cursor.token) == cursor else {
            throw Finding("cursor \(text) read as \(cursor.millis), which does not read back")
        }
        _ = cursor.replayFrom
        _ = cursor.isExpired(now: Date())
    }

    /// Whatever the bytes, the walk refuses or edits only within the file, and what it accepted,
    /// walked again, needs no more edits.
    static func location(_ bytes: [UInt8], contentType: String) throws(Finding) {
        guard let edits = try? LocationStripper.edits(contentType: contentType, in: bytes) else { return }
        guard edits.edits.allSatisfy({ $0.range.lowerBound >= 0 && $0.range.upperBound <= bytes.count }) else {
            throw Finding("an edit lies outside the \(bytes.count) bytes: \(edits.edits.map(\.range))")
        }
        var stripped = bytes
        edits.apply(to: &stripped)
        if let again = try? LocationStripper.stripped(stripped, contentType: contentType), again != stripped {
            throw Finding("stripping the stripped file changed it again")
        }
    }

    static func query(_ bytes: [UInt8]) throws(Finding) {
        let text = Substring(String(decoding: bytes, as: UTF8.self))
        for (name, range) in [("limit", 1...100), ("limit", 1...200), ("after", 0...Int.max), ("before", 1...Int.max)] {
            if let value = try? ClientInput.integer(text, name: name, default: 0, range: range), !range.contains(value) {
                throw Finding("\(name) \(value) outside \(range)")
            }
        }
        if let ids = try? ClientInput.userIDs(text, max: 100) {
            guard ids.count <= 100, ids.allSatisfy({ ClientInput.isPlausibleID($0.rawValue) }) else {
                throw Finding("userIds gave \(ids.count) IDs, not all plausible")
            }
        }
        if let page = ClientInput.pageCursor(text) {
            guard ClientInput.pageCursor(ClientInput.pageCursorToken(page)) == page else {
                throw Finding("page cursor \(text) does not read back")
            }
        }
    }
}
