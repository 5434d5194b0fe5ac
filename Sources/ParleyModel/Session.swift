import Foundation

/// One of a user's sessions as API.md serves it (`GET /v1/sessions`): a token's login, never
/// the token itself.
public struct UserSession: Hashable, Sendable, Codable {
    /// The token's ID: names the session, cannot sign in.
    public var id: String
    public var createdAt: Date
    /// When a gateway last checked the token with the cluster, to within ``StoredSession/touchEvery``.
    public var lastUsedAt: Date
    public var expiresAt: Date
    public var userAgent: String?
    /// The session of the request that asked.
    public var current: Bool

    public init(id: String, createdAt: Date, lastUsedAt: Date, expiresAt: Date, userAgent: String?, current: Bool) {
        self.id = id
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.expiresAt = expiresAt
        self.userAgent = userAgent
        self.current = current
    }
}

/// A session as the store keeps it: one row per token issued, removed when the token is revoked.
public struct StoredSession: Hashable, Sendable, Codable {
    public var tokenId: String
    public var userId: UserID
    public var createdAt: Date
    public var lastUsedAt: Date
    public var expiresAt: Date
    public var userAgent: String?

    /// How stale ``lastUsedAt`` may get: a token in use is written back at most this often, not on
    /// every check (a busy user's token is checked every few seconds on every gateway).
    public static let touchEvery: Duration = .seconds(600)
    /// The most of a `User-Agent` kept, in bytes.
    public static let userAgentMax = 256

    public init(tokenId: String, userId: UserID, createdAt: Date, lastUsedAt: Date, expiresAt: Date, userAgent: String?) {
        self.tokenId = tokenId
        self.userId = userId
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.expiresAt = expiresAt
        self.userAgent = userAgent
    }

    public func summary(current: String) -> UserSession {
        UserSession(id: tokenId, createdAt: createdAt, lastUsedAt: lastUsedAt, expiresAt: expiresAt, userAgent: userAgent, current: tokenId == current)
    }

    /// A `User-Agent` as kept: control characters dropped (it is shown to the user), cut to
    /// ``userAgentMax`` bytes on a character boundary; nil when nothing is left.
    public static func userAgent(_ header: String?) -> String? {
        guard let header else { return nil }
        var kept = ""
        var bytes = 0
        for scalar in header.unicodeScalars where !(scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)) {
            let size = String(scalar).utf8.count
            guard bytes + size <= userAgentMax else { break }
            kept.unicodeScalars.append(scalar)
            bytes += size
        }
        return kept.isEmpty ? nil : kept
    }
}
