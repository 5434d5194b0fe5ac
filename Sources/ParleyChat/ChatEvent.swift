import Foundation
import ParleyModel

/// Something members' streams should see, as the conversation's owner hands it to gateways.
public enum ChatEvent: Codable, Sendable, Hashable {
    /// A committed message (durable).
    case message(Message)
    /// A member's watermarks moved (durable).
    case receipt(ReceiptEvent)
    /// A member started or stopped typing (live only).
    case typing(TypingEvent)
    /// The conversation was created or changed (durable).
    case conversation(ConversationChange)
    /// A user the recipients share a conversation with came online, went away or offline (live only).
    case presence(Presence)
    /// A bot annotated a message (durable).
    case annotation(Annotation)
    /// A message was erased: its tombstone (durable).
    case erasure(Erasure)
    /// A message was edited, deleted for everyone or reacted to (durable).
    case change(MessageChange)
    /// A user the recipients share a conversation with (or the recipient) changed their display
    /// name or photo (live only).
    case user(User)

    /// When a durable event was committed (what a resume cursor counts in); nil for live-only.
    public var durableAt: Date? {
        switch self {
        case .message(let message): message.sentAt
        case .receipt(let receipt): receipt.at
        case .conversation(let change): change.at
        case .annotation(let annotation): annotation.at
        case .erasure(let erasure): erasure.at
        case .change(let change): change.at
        case .typing, .presence, .user: nil
        }
    }
}

public struct ConversationChange: Codable, Sendable, Hashable {
    public typealias Kind = ConversationChangeKind

    public var conversation: ConversationRecord
    public var change: Kind
    /// When the change was committed.
    public var at: Date

    public init(conversation: ConversationRecord, change: Kind, at: Date) {
        self.conversation = conversation
        self.change = change
        self.at = at.millisecondPrecision
    }
}

public struct ReceiptEvent: Codable, Sendable, Hashable {
    public var conversationId: ConversationID
    public var userId: UserID
    public var deliveredSeq: Int64
    public var readSeq: Int64
    /// When the watermarks moved.
    public var at: Date

    public init(conversationId: ConversationID, userId: UserID, deliveredSeq: Int64, readSeq: Int64, at: Date) {
        self.conversationId = conversationId
        self.userId = userId
        self.deliveredSeq = deliveredSeq
        self.readSeq = readSeq
        self.at = at.millisecondPrecision
    }
}

/// Typing is live only and carries nothing beyond what clients see.
public typealias TypingEvent = API.TypingEvent

/// An event and the users on the receiving gateway whose streams it is for.
public struct EventDelivery: Codable, Sendable, Hashable {
    public var event: ChatEvent
    public var recipients: [UserID]

    public init(event: ChatEvent, recipients: [UserID]) {
        self.event = event
        self.recipients = recipients
    }

    /// About how many bytes this takes on the cluster wire (never less): what batches of deliveries
    /// are bounded by, so that none is over the frame limit however long the texts are.
    var estimatedBytes: Int {
        let text: Int
        switch event {
        case .message(let message): text = message.text.utf8.count
        case .conversation(let change): text = change.conversation.members.count * 64 + (change.conversation.name?.utf8.count ?? 0)
        case .annotation(let annotation): text = annotation.value.utf8.count + annotation.key.utf8.count
        case .change(let change): text = (change.text?.utf8.count ?? 0) + (change.emoji?.utf8.count ?? 0)
        default: text = 0
        }
        return 256 + text + recipients.reduce(0) { $0 + $1.rawValue.utf8.count + 8 }
    }
}
