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
}

public struct ConversationChange: Codable, Sendable, Hashable {
    /// API.md's `change`.
    public enum Kind: String, Codable, Sendable, Hashable {
        case created
        case updated
        case memberAdded = "member_added"
        case memberRemoved = "member_removed"
    }

    public var conversation: ConversationRecord
    public var change: Kind
}

public struct ReceiptEvent: Codable, Sendable, Hashable {
    public var conversationId: ConversationID
    public var userId: UserID
    public var deliveredSeq: Int64
    public var readSeq: Int64
}

public struct TypingEvent: Codable, Sendable, Hashable {
    public var conversationId: ConversationID
    public var userId: UserID
    public var typing: Bool
}

/// An event and the users on the receiving gateway whose streams it is for.
public struct EventDelivery: Codable, Sendable, Hashable {
    public var event: ChatEvent
    public var recipients: [UserID]
}
