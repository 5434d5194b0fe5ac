import Foundation

/// One user blocking another: `blocker` receives nothing from `blocked` in a direct
/// conversation, no push for `blocked`'s messages anywhere, and neither sees the other's presence.
public struct Block: Hashable, Sendable, Codable {
    public var blocker: UserID
    public var blocked: UserID

    public init(blocker: UserID, blocked: UserID) {
        self.blocker = blocker
        self.blocked = blocked
    }
}

/// A block as the store keeps it: since when.
public struct StoredBlock: Hashable, Sendable, Codable {
    public var block: Block
    public var at: Date

    public init(block: Block, at: Date) {
        self.block = block
        self.at = at
    }
}

/// `GET /v1/users/me/blocks`: one user the caller blocked.
public struct BlockedUser: Hashable, Sendable, Codable {
    public var userId: UserID
    public var blockedAt: Date

    public init(userId: UserID, blockedAt: Date) {
        self.userId = userId
        self.blockedAt = blockedAt
    }
}
