import Foundation

/// A user as API.md serves it.
public struct User: Hashable, Sendable, Codable {
    public var id: UserID
    /// Unique, 3–32 characters of `a-z 0-9 _ . -`.
    public var handle: String
    public var displayName: String
    public var avatarURL: String?
    public var createdAt: Date

    public init(id: UserID, handle: String, displayName: String, avatarURL: String? = nil, createdAt: Date) {
        self.id = id
        self.handle = handle
        self.displayName = displayName
        self.avatarURL = avatarURL
        self.createdAt = createdAt
    }
}

/// A user with what only the server keeps: the salted slow hash of its password.
public struct StoredUser: Hashable, Sendable {
    public var user: User
    public var passwordHash: String

    public init(user: User, passwordHash: String) {
        self.user = user
        self.passwordHash = passwordHash
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
