import Foundation

extension API {
    /// One line of `POST /v1/sends`' body: a message to send, receipts, or typing, in one
    /// conversation — what `POST /v1/conversations/{id}/messages`, `…/receipts` and `…/typing`
    /// take, with the conversation and the kind in the object.
    public struct StreamedCommand: Codable, Sendable {
        public enum Kind: String, Codable, Sendable {
            case message, receipts, typing
        }

        public enum Action: Sendable {
            case message(NewMessage)
            case receipts(Receipts)
            case typing(Typing)

            public var kind: Kind {
                switch self {
                case .message: .message
                case .receipts: .receipts
                case .typing: .typing
                }
            }
        }

        /// The client's own name for the line, given back in its answer (receipts and typing have
        /// no other; a message's answer also names its `clientMessageId`).
        public var id: String?
        public var conversationId: ConversationID
        public var action: Action

        public init(id: String? = nil, conversationId: ConversationID, _ action: Action) {
            self.id = id
            self.conversationId = conversationId
            self.action = action
        }

        private enum CodingKeys: String, CodingKey {
            case type, id, conversationId
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            id = try container.decodeIfPresent(String.self, forKey: .id)
            conversationId = try container.decode(ConversationID.self, forKey: .conversationId)
            // The kind's own fields sit beside these, as the REST route's body has them.
            switch try container.decode(Kind.self, forKey: .type) {
            case .message: action = .message(try NewMessage(from: decoder))
            case .receipts: action = .receipts(try Receipts(from: decoder))
            case .typing: action = .typing(try Typing(from: decoder))
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(action.kind, forKey: .type)
            try container.encodeIfPresent(id, forKey: .id)
            try container.encode(conversationId, forKey: .conversationId)
            switch action {
            case .message(let message): try message.encode(to: encoder)
            case .receipts(let receipts): try receipts.encode(to: encoder)
            case .typing(let typing): try typing.encode(to: encoder)
            }
        }

        /// The line as ``API/makeEncoder()`` writes it, with its newline: a plain message's
        /// directly, as ``fromCanonicalJSON(_:)`` reads it back (a client sends thousands a second).
        public var jsonLine: [UInt8] {
            var bytes: [UInt8]
            if id == nil, case .message(let message) = action, message.attachments == nil, message.replyTo == nil, message.mentions == nil, message.metadata == nil {
                var json = DirectJSON(capacity: 96 + message.clientMessageId.utf8.count + conversationId.rawValue.utf8.count + message.text.utf8.count)
                json.raw("{")
                json.key("clientMessageId"); json.string(message.clientMessageId); json.raw(",")
                json.key("conversationId"); json.string(conversationId.rawValue); json.raw(",")
                json.key("text"); json.string(message.text); json.raw(",")
                json.key("type"); json.append(json: #""message"}"#.utf8)
                bytes = json.bytes
            } else {
                bytes = (try? Array(API.makeEncoder().encode(self))) ?? []
            }
            bytes.append(UInt8(ascii: "\n"))
            return bytes
        }

        /// Reads a plain message's line as ``jsonLine`` writes it (without its newline), and nil
        /// for anything else, which the gateway decodes with `JSONDecoder`.
        public static func fromCanonicalJSON(_ bytes: some Collection<UInt8>) -> StreamedCommand? {
            CanonicalReader.read(bytes) { reader in
                guard reader.literal("{\"clientMessageId\":"), let clientMessageId = reader.string(),
                      reader.literal(",\"conversationId\":"), let conversationId = reader.string(),
                      reader.literal(",\"text\":"), let text = reader.string(),
                      reader.literal(",\"type\":\"message\"}"), reader.atEnd
                else { return nil }
                return StreamedCommand(conversationId: ConversationID(rawValue: conversationId), .message(NewMessage(clientMessageId: clientMessageId, text: text)))
            }
        }
    }

    /// The first message on the send stream's WebSocket (`CONNECT /v1/sends`, RFC 8441): a
    /// browser cannot give a WebSocket an `Authorization` header, and a token in the URL would be
    /// written to logs, so the token comes as the socket's first message. Answered `200` (or the
    /// error, and the socket closes); every later message is a ``StreamedCommand``.
    public struct SendStreamHello: Codable, Sendable {
        public var token: String

        public init(token: String) {
            self.token = token
        }
    }

    /// One line of `POST /v1/sends`' response: the answer to one line of its body, with the
    /// status and body the REST route would have answered.
    public struct StreamedAnswer: Codable, Sendable {
        /// The line's `id`, when it had one.
        public var id: String?
        /// A message line's, when the answer is an error (a success carries the message).
        public var clientMessageId: String?
        /// The REST route's status: 201 (a new message), 200 (one sent before with this
        /// `clientMessageId`), 204 (receipts, typing), or an error's.
        public var status: Int
        public var message: Message?
        public var error: ErrorBody.Detail?
        /// With a 429 or 503: when to send the line again.
        public var retryAfterSeconds: Int?

        public init(id: String? = nil, clientMessageId: String? = nil, status: Int, message: Message? = nil, error: ErrorBody.Detail? = nil, retryAfterSeconds: Int? = nil) {
            self.id = id
            self.clientMessageId = clientMessageId
            self.status = status
            self.message = message
            self.error = error
            self.retryAfterSeconds = retryAfterSeconds
        }

        /// A message's answer as ``API/makeEncoder()`` writes it, with its newline, from the
        /// message's ``Message/wrappedJSON`` (`{"message":…}`, which the sender's event carries too).
        public static func jsonLine(id: String?, status: Int, wrappedMessage: [UInt8]) -> [UInt8] {
            var json = DirectJSON(capacity: wrappedMessage.count + 32)
            json.raw("{")
            if let id {
                json.key("id"); json.string(id); json.raw(",")
            }
            json.append(json: wrappedMessage.dropFirst().dropLast())
            json.raw(",")
            json.key("status"); json.integer(Int64(status))
            json.append(json: "}\n".utf8)
            return json.bytes
        }

        /// Reads a message's answer as ``jsonLine(id:status:wrappedMessage:)`` writes it without an
        /// id (and without its newline): the message and its status; nil for anything else.
        public static func messageFromCanonicalJSON(_ bytes: some Collection<UInt8>) -> (message: Message, status: Int)? {
            let suffixes: [(Int, [UInt8])] = [(201, Array(#","status":201}"#.utf8)), (200, Array(#","status":200}"#.utf8))]
            guard bytes.count > 16, bytes.first == UInt8(ascii: "{") else { return nil }
            for (status, suffix) in suffixes where bytes.suffix(suffix.count).elementsEqual(suffix) {
                // `{"message":{…}` + `}` is the wrapped message.
                var wrapped = Array(bytes.dropLast(suffix.count))
                wrapped.append(UInt8(ascii: "}"))
                guard let message = Message.fromWrappedJSON(wrapped) else { return nil }
                return (message, status)
            }
            return nil
        }
    }
}
