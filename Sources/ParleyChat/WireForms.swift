import Foundation
import ParleyCluster
import ParleyModel

// The hand-written cluster wire forms (``ClusterWireCodable``) of what every chat message crosses
// the cluster in: the gateway's send and its result, and the deliveries to the gateways. Every
// field is written, so a value reads back equal to the one written (the tests check it).

extension SendMessage: ClusterWireCodable {
    public func write(to wire: inout WireWriter) throws {
        wire.write(senderId.rawValue)
        wire.write(clientMessageId)
        wire.write(text)
        try wire.write(attachments: attachments.isEmpty ? nil : attachments)
        wire.write(replyTo != nil)
        if let replyTo { wire.write(replyTo) }
        wire.write(mentions) { $0.write($1.rawValue) }
        wire.write(metadata?.json ?? "")
    }

    public init(from wire: inout WireReader) throws {
        self.init(
            senderId: UserID(rawValue: try wire.read(String.self)), clientMessageId: try wire.read(String.self), text: try wire.read(String.self),
            attachments: try wire.readAttachments() ?? [])
        replyTo = try wire.read(Bool.self) ? try wire.read(Int64.self) : nil
        mentions = try wire.readList { UserID(rawValue: try $0.read(String.self)) }
        let metadata = try wire.read(String.self)
        if !metadata.isEmpty {
            guard let read = Metadata(json: metadata) else { throw wire.corrupt("metadata that is no JSON object") }
            self.metadata = read
        }
    }
}

extension SendResult: ClusterWireCodable {
    public func write(to wire: inout WireWriter) throws {
        try wire.write(message)
        wire.write(created)
    }

    public init(from wire: inout WireReader) throws {
        self.init(message: try wire.read(Message.self), created: try wire.read(Bool.self))
    }
}

extension EventDelivery: ClusterWireCodable {
    public func write(to wire: inout WireWriter) throws {
        try event.write(to: &wire)
        wire.write(recipients) { $0.write($1.rawValue) }
    }

    public init(from wire: inout WireReader) throws {
        let event = try ChatEvent(from: &wire)
        self.init(event: event, recipients: try wire.readList { UserID(rawValue: try $0.read(String.self)) })
    }
}

extension ChatEvent: ClusterWireCodable {
    /// A message by hand; the other events (a small share of the traffic) in their Codable form.
    public func write(to wire: inout WireWriter) throws {
        if case .message(let message) = self {
            wire.write(UInt8(0))
            try wire.write(message)
        } else {
            wire.write(UInt8(1))
            try wire.write(codable: self)
        }
    }

    public init(from wire: inout WireReader) throws {
        switch try wire.read(UInt8.self) {
        case 0: self = .message(try wire.read(Message.self))
        case 1: self = try wire.read(codable: ChatEvent.self)
        case let other: throw wire.corrupt("bad ChatEvent form \(other)")
        }
    }
}

extension WireWriter {
    mutating func write(_ message: Message) throws {
        write(message.id)
        write(message.conversationId.rawValue)
        write(message.seq)
        write(message.senderId.rawValue)
        write(message.clientMessageId)
        write(message.text)
        write(message.sentAt.timeIntervalSinceReferenceDate.bitPattern)
        // What follows: 0, nothing; 1, the attachments (as ``write(attachments:)`` writes them);
        // 2, the rest of a message that changed since it was sent, or that replies, mentions or
        // carries metadata, in its Codable form (rare: a message read back from the store, a reply).
        let rest = MessageRest(message)
        if rest.isChanged {
            write(UInt8(2))
            try write(codable: rest)
        } else {
            try write(attachments: message.attachments)
        }
    }

    /// A flag, then (rare beside text) the attachments in their Codable form.
    mutating func write(attachments: [Attachment]?) throws {
        guard let attachments else {
            write(false)
            return
        }
        write(true)
        try write(codable: attachments)
    }
}

extension WireReader {
    mutating func read(_ type: Message.Type) throws -> Message {
        let id = try read(String.self)
        var message = Message(
            conversationId: ConversationID(rawValue: try read(String.self)), seq: try read(Int64.self),
            senderId: UserID(rawValue: try read(String.self)), clientMessageId: try read(String.self), text: try read(String.self),
            sentAt: try read(Date.self))
        message.id = id
        switch try read(UInt8.self) {
        case 0:
            break
        case 1:
            message.attachments = try read(codable: [Attachment].self)
        case 2:
            try read(codable: MessageRest.self).apply(to: &message)
            return message
        case let other:
            throw corrupt("bad message form \(other)")
        }
        // No send makes a message of neither text nor files (`invalid_request`): one is a
        // tombstone (``Message/tombstone``) — an erasure's, since a deletion's is written in
        // the changed form.
        if message.text.isEmpty, message.attachments == nil { message = message.tombstone }
        return message
    }

    mutating func readAttachments() throws -> [Attachment]? {
        guard try read(Bool.self) else { return nil }
        return try read(codable: [Attachment].self)
    }
}

/// What a message carries beside its text once it changed after it was sent (edited, deleted,
/// erased or reacted to), or when it replies or mentions.
private struct MessageRest: Codable {
    var attachments: [Attachment]?
    var editedAt: Date?
    var erased: Bool?
    var deleted: Bool?
    var deletedBy: UserID?
    var reactions: [Reaction]?
    var replyTo: MessageQuote?
    var mentions: [UserID]?
    var metadata: Metadata?

    init(_ message: Message) {
        attachments = message.attachments
        editedAt = message.editedAt
        erased = message.erased
        deleted = message.deleted
        deletedBy = message.deletedBy
        reactions = message.reactions
        replyTo = message.replyTo
        mentions = message.mentions
        metadata = message.metadata
    }

    /// Whether the message differs from a plain one as sent (which the short form describes).
    var isChanged: Bool {
        editedAt != nil || erased != nil || deleted != nil || deletedBy != nil || reactions != nil || replyTo != nil || mentions != nil
            || metadata != nil
    }

    func apply(to message: inout Message) {
        message.attachments = attachments
        message.editedAt = editedAt
        message.erased = erased
        message.deleted = deleted
        message.deletedBy = deletedBy
        message.reactions = reactions
        message.replyTo = replyTo
        message.mentions = mentions
        message.metadata = metadata
    }
}
