import Foundation

/// What a user shows: `online` or `away` while one of its event streams is open, else `offline`.
public enum PresenceStatus: String, Hashable, Sendable, Codable {
    case online
    case away
    case offline
}

/// A user's presence, as API.md serves it.
public struct Presence: Hashable, Sendable, Codable {
    public var userId: UserID
    public var status: PresenceStatus
    /// When the user's last stream closed; nil while online or when never seen.
    public var lastSeenAt: Date?

    public init(userId: UserID, status: PresenceStatus, lastSeenAt: Date? = nil) {
        self.userId = userId
        self.status = status
        self.lastSeenAt = lastSeenAt
    }
}
