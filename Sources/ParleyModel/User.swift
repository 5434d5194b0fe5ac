import Foundation

/// A user as API.md serves it.
public struct User: Hashable, Sendable, Codable {
    public var id: UserID
    /// Unique, 3–32 characters of `a-z 0-9 _ . -`.
    public var handle: String
    public var displayName: String
    public var avatarURL: String?
    public var createdAt: Date
    /// A bot: made by an operator (`POST /v1/bots`), signs in with a token only, and may annotate
    /// the messages of the conversations it is a member of.
    public var bot: Bool

    public init(id: UserID, handle: String, displayName: String, avatarURL: String? = nil, createdAt: Date, bot: Bool = false) {
        self.id = id
        self.handle = handle
        self.displayName = displayName
        self.avatarURL = avatarURL
        self.createdAt = createdAt
        self.bot = bot
    }

    private enum CodingKeys: String, CodingKey {
        case id, handle, displayName, avatarURL, createdAt, bot
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.id = try container.decode(UserID.self, forKey: .id)
        self.handle = try container.decode(String.self, forKey: .handle)
        self.displayName = try container.decode(String.self, forKey: .displayName)
        self.avatarURL = try container.decodeIfPresent(String.self, forKey: .avatarURL)
        self.createdAt = try container.decode(Date.self, forKey: .createdAt)
        // Absent from what a node of an earlier version sends.
        self.bot = try container.decodeIfPresent(Bool.self, forKey: .bot) ?? false
    }
}

/// A user with what only the server keeps: the salted slow hash of its password.
public struct StoredUser: Hashable, Sendable {
    public var user: User
    public var passwordHash: String
    /// When the password last changed; nil if never. A token with no session recorded (issued
    /// before sessions were) is accepted only while this is nil.
    public var passwordChangedAt: Date?
    /// Since when an operator suspended the user (nil: not suspended): no token of theirs works,
    /// and they cannot sign in.
    public var suspendedAt: Date?

    public init(user: User, passwordHash: String, passwordChangedAt: Date? = nil, suspendedAt: Date? = nil) {
        self.user = user
        self.passwordHash = passwordHash
        self.passwordChangedAt = passwordChangedAt
        self.suspendedAt = suspendedAt
    }
}

/// Where a page of a user's conversations continues: after this activity time and ID.
public struct ConversationPageCursor: Hashable, Sendable, Codable {
    public var lastActivityAt: Date
    public var id: ConversationID

    public init(lastActivityAt: Date, id: ConversationID) {
        self.lastActivityAt = lastActivityAt
        self.id = id
    }
}
