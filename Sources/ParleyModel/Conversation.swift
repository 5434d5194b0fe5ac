import Foundation

/// `direct` (exactly two members, no name) or `group`.
public enum ConversationKind: String, Hashable, Sendable, Codable {
    case direct
    case group
}

/// A member's role in a conversation: the owner of a group may remove others and rename it.
public enum MemberRole: String, Hashable, Sendable, Codable {
    case owner
    case member
}

/// A member of a conversation with its receipt watermarks.
public struct ConversationMember: Hashable, Sendable, Codable {
    public var userId: UserID
    public var role: MemberRole
    /// Highest seq delivered to this member's devices; only moves forward.
    public var deliveredSeq: Int64
    /// Highest seq this member has read; only moves forward, implies delivered.
    public var readSeq: Int64
    /// The member's own fields for this conversation (a translation language): the member reads
    /// them, and bots that are members; nobody else.
    public var metadata: Metadata?

    public init(userId: UserID, role: MemberRole, deliveredSeq: Int64 = 0, readSeq: Int64 = 0) {
        self.userId = userId
        self.role = role
        self.deliveredSeq = deliveredSeq
        self.readSeq = readSeq
    }
}

/// A conversation as the store keeps it (without its messages).
public struct ConversationRecord: Hashable, Sendable, Codable {
    public var id: ConversationID
    public var kind: ConversationKind
    public var name: String?
    public var ownerId: UserID
    /// The seq of the last committed message (0 when none).
    public var lastSeq: Int64
    public var createdAt: Date
    /// The last message's `sentAt`, else `createdAt`: what "newest activity first" sorts by.
    public var lastActivityAt: Date
    public var members: [ConversationMember]
    /// The members who muted the conversation (get no push notifications for it), sorted. Each
    /// member sees only whether they did (`API.Conversation.muted`).
    public var mutedBy: [UserID]
    /// The number of the last change to its messages (``MessageChange/changeSeq``; 0 when none).
    public var lastChangeSeq: Int64
    /// The seqs of its pinned messages, the most recently pinned first, at most
    /// ``ConversationRecord/pinnedMax``.
    public var pinned: [Int64]
    /// A group's photo: an image upload of its owner's, which its members may download while it is.
    public var photo: Media?
    /// The app's own fields: members read them, the group's owner (either member of a direct
    /// conversation) writes them.
    public var metadata: Metadata?

    /// The most messages a conversation pins.
    public static let pinnedMax = 50

    public init(
        id: ConversationID, kind: ConversationKind, name: String?, ownerId: UserID, lastSeq: Int64 = 0,
        createdAt: Date, lastActivityAt: Date? = nil, members: [ConversationMember], mutedBy: [UserID] = [], lastChangeSeq: Int64 = 0,
        pinned: [Int64] = [], photo: Media? = nil
    ) {
        self.photo = photo
        self.lastChangeSeq = lastChangeSeq
        self.pinned = pinned
        self.id = id
        self.kind = kind
        self.name = name
        self.ownerId = ownerId
        self.lastSeq = lastSeq
        self.createdAt = createdAt
        self.lastActivityAt = lastActivityAt ?? createdAt
        self.members = members
        self.mutedBy = mutedBy
    }

    public func member(_ user: UserID) -> ConversationMember? {
        members.first { $0.userId == user }
    }

    public func isMuted(by user: UserID) -> Bool {
        mutedBy.contains(user)
    }

    /// Records that `user` muted the conversation or unmuted it.
    public mutating func setMuted(_ muted: Bool, by user: UserID) {
        mutedBy.removeAll { $0 == user }
        if muted { mutedBy.append(user); mutedBy.sort() }
    }
}

/// What last happened to a conversation (API.md's `change` of a `conversation` event).
public enum ConversationChangeKind: String, Codable, Sendable, Hashable {
    case created
    case updated
    case memberAdded = "member_added"
    case memberRemoved = "member_removed"
}

/// A user's unread messages over every conversation they are in (`GET /v1/users/me/unread`, and
/// the badge of a push notification): how many, and in how many conversations.
public struct UnreadCount: Codable, Sendable, Hashable {
    public var messages: Int64
    public var conversations: Int64

    public init(messages: Int64, conversations: Int64) {
        self.messages = messages
        self.conversations = conversations
    }
}
