import Foundation
import ParleyCluster
import ParleyModel

/// A message to send, as the gateway hands it to the conversation's owner. The sender is the
/// authenticated user, never a field a client chose.
public struct SendMessage: Codable, Sendable, Hashable {
    public var senderId: UserID
    public var clientMessageId: String
    public var text: String
    /// The sender's uploads, as ``UserActor/attach(_:to:)`` found them: the gateway asks first.
    public var attachments: [Attachment]
    /// The seq of the message it replies to.
    public var replyTo: Int64?
    /// The members it mentions, as the sender named them.
    public var mentions: [UserID]
    /// The app's own fields, kept with the message as they are.
    public var metadata: Metadata?

    public init(
        senderId: UserID, clientMessageId: String, text: String, attachments: [Attachment] = [], replyTo: Int64? = nil, mentions: [UserID] = [],
        metadata: Metadata? = nil
    ) {
        self.metadata = metadata?.orNilWhenEmpty
        self.senderId = senderId
        self.clientMessageId = clientMessageId
        self.text = text
        self.attachments = attachments
        self.replyTo = replyTo
        self.mentions = mentions
    }

    /// The most members one message mentions.
    public static let mentionsMax = 50

    /// Its mentions once each, in the sender's order, checked against the conversation's members;
    /// nil for none.
    func mentions(among record: ConversationRecord) throws(ChatError) -> [UserID]? {
        var seen: Set<UserID> = []
        let mentioned = mentions.filter { seen.insert($0).inserted }
        guard !mentioned.isEmpty else { return nil }
        let strangers = mentioned.filter { record.member($0) == nil }
        guard strangers.isEmpty else {
            throw ChatError(.invalidRequest, "mentions: not members of this conversation: \(strangers.map(\.rawValue).joined(separator: ", "))")
        }
        return mentioned
    }
}

/// The durable message, and whether this call created it (`201`) or found it (`200`).
public struct SendResult: Codable, Sendable, Hashable {
    public var message: Message
    public var created: Bool

    public init(message: Message, created: Bool) {
        self.message = message
        self.created = created
    }
}

/// A conversation to create: the creator is the authenticated user.
public struct CreateConversation: Codable, Sendable, Hashable {
    public var creatorId: UserID
    /// The other members (the creator may be among them or not).
    public var memberIds: [UserID]
    public var name: String?

    public init(creatorId: UserID, memberIds: [UserID], name: String? = nil) {
        self.creatorId = creatorId
        self.memberIds = memberIds
        self.name = name
    }

    /// Exactly one other member and no name: a direct conversation.
    public var isDirect: Bool { name == nil && Set(memberIds).subtracting([creatorId]).count == 1 }

    /// The record to store, checked against API.md's rules.
    func record(id: ConversationID, limits: ChatLimits, now: Date) throws(ChatError) -> ConversationRecord {
        // In the order the creator named them, once each: the order members joined in, which
        // decides who owns the group when its owner leaves.
        var named: Set<UserID> = [creatorId]
        let others = memberIds.filter { named.insert($0).inserted }
        guard !others.isEmpty else { throw ChatError(.invalidRequest, "memberIds must name at least one other user") }
        if let name {
            guard (1...64).contains(name.count) else { throw ChatError(.invalidRequest, "name must be 1–64 characters") }
            try StoredText.require(name, field: "name")
        }
        guard others.count + 1 <= limits.groupSizeMax else {
            throw ChatError(.invalidRequest, "a group has at most \(limits.groupSizeMax) members")
        }
        if isDirect {
            guard id == ConversationActor.directID(creatorId, others[0]) else {
                throw ChatError(.invalidRequest, "a direct conversation's ID is ConversationActor.directID of its two members")
            }
            return ConversationRecord(
                id: id, kind: .direct, name: nil, ownerId: creatorId, createdAt: now,
                members: [ConversationMember(userId: creatorId, role: .member), ConversationMember(userId: others[0], role: .member)])
        }
        return ConversationRecord(
            id: id, kind: .group, name: name, ownerId: creatorId, createdAt: now,
            members: [ConversationMember(userId: creatorId, role: .owner)] + others.map { ConversationMember(userId: $0, role: .member) })
    }
}

/// The conversation, and whether this call created it (`201`) or found it (`200`).
public struct CreateResult: Codable, Sendable, Hashable {
    public var conversation: ConversationRecord
    public var created: Bool
}

/// Limits the chat actors enforce (API.md's defaults).
public struct ChatLimits: Sendable {
    /// Unicode scalars in a message text.
    public var textScalarsMax = 4000
    public var groupSizeMax = 1000
    public var historyLimitMax = 200
    /// Unicode scalars in an annotation's value (a translation may be longer than its message).
    public var annotationScalarsMax = 16_000
    /// Attachments on one message, and Unicode scalars in each one's caption.
    public var attachmentsMax = 10
    public var captionScalarsMax = 1_000
    /// How long a deleted account's handle stays taken.
    public var handleQuarantine = AccountDeletion.defaultHandleQuarantine
    /// How long after it was sent its sender may edit a message.
    public var editWindow: Duration = .seconds(48 * 3600)
    /// Different emoji on one message.
    public var reactionsPerMessageMax = 20

    public init() {}
}

extension ChatError: ClusterErrorConvertible {
    /// A chat error crosses nodes with its own code (`not_found`, `forbidden`, …).
    public var clusterError: ClusterCallError {
        ClusterCallError(code: .init(rawValue: code.rawValue), message: message)
    }
}

extension SendMessage {
    /// Checks the request as API.md defines it: a UUID `clientMessageId`, 1–4,000 scalars of
    /// text that are not all whitespace — or no text and 1–10 attachments, each caption at most
    /// 1,000 scalars.
    func validate(limits: ChatLimits) throws(ChatError) {
        try Self.validate(clientMessageId: clientMessageId, text: text, captions: attachments.map(\.caption), limits: limits)
        try Self.validate(replyTo: replyTo, mentions: mentions, by: senderId)
        try metadata?.validate(field: "metadata")
    }

    /// A send's reply and mentions, before the conversation is asked: a gateway checks them too.
    public static func validate(replyTo: Int64?, mentions: [UserID], by sender: UserID) throws(ChatError) {
        if let replyTo, replyTo < 1 { throw ChatError(.invalidRequest, "replyTo must be a message's seq, 1 or more") }
        guard mentions.count <= mentionsMax else { throw ChatError(.invalidRequest, "mentions: at most \(mentionsMax) members, not \(mentions.count)") }
        guard !mentions.contains(sender) else { throw ChatError(.invalidRequest, "mentions: a sender does not mention themself") }
    }

    /// The same checks, before the attachments are looked up: a gateway makes them before it
    /// records anything for a send.
    public static func validate(clientMessageId: String, text: String, captions: [String?], limits: ChatLimits) throws(ChatError) {
        guard ClientMessageID.isValid(clientMessageId) else {
            throw ChatError(.invalidRequest, "clientMessageId must be a UUID")
        }
        guard captions.count <= limits.attachmentsMax else {
            throw ChatError(.invalidRequest, "attachments: at most \(limits.attachmentsMax), not \(captions.count)")
        }
        for (index, caption) in captions.enumerated() {
            guard let caption else { continue }
            guard caption.unicodeScalars.count <= limits.captionScalarsMax else {
                throw ChatError(.invalidRequest, "attachments[\(index)].caption: at most \(limits.captionScalarsMax) Unicode scalars")
            }
            try StoredText.require(caption, field: "attachments[\(index)].caption")
        }
        let scalars = text.unicodeScalars.count
        if scalars == 0, !captions.isEmpty { return }
        guard scalars >= 1 else { throw ChatError(.invalidRequest, "text must not be empty (unless the message has attachments)") }
        guard scalars <= limits.textScalarsMax else {
            throw ChatError(.invalidRequest, "text has \(scalars) Unicode scalars; at most \(limits.textScalarsMax)")
        }
        guard text.unicodeScalars.contains(where: { !$0.properties.isWhitespace }) else {
            throw ChatError(.invalidRequest, "text must not be only whitespace")
        }
        try StoredText.require(text, field: "text")
    }
}
