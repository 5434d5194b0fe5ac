import ParleyModel
import Synchronization

/// Tokens a user's actor said are valid, remembered for a lease so that a request does not cost a
/// call to that actor; and tokens this gateway was told are revoked.
///
/// A lease counts from when the gateway *asked* (before the actor answered), so it always ends
/// before the lease the actor reckons with. A revocation forgets the token at once and keeps it
/// as revoked for one lease: an answer that was already on its way when the revocation arrived
/// was asked for before it, so its lease ends within that time, and it is refused.
/// The caller passes the instants, so tests drive it by hand.
struct AuthenticationCache {
    typealias Instant = ContinuousClock.Instant

    private struct Entry {
        var user: User
        var leaseEnd: Instant
    }

    let lease: Duration
    /// Past this many remembered tokens, expired ones are dropped (and if none were, all).
    let capacity: Int
    private var valid: [String: Entry] = [:]
    /// Revoked token IDs, each until one lease after the gateway heard of it.
    private var revoked: [String: Instant] = [:]

    init(lease: Duration, capacity: Int = 100_000) {
        self.lease = lease
        self.capacity = capacity
    }

    /// The user of a token remembered as valid, if its lease has not run out.
    func user(tokenId: String, userId: UserID, now: Instant) -> User? {
        guard let entry = valid[tokenId], now < entry.leaseEnd, entry.user.id == userId else { return nil }
        return entry.user
    }

    /// The actor said the token is valid, answering a question asked at `askedAt`.
    mutating func remember(_ user: User, tokenId: String, askedAt: Instant, now: Instant) {
        if let until = revoked[tokenId], now < until { return }
        if valid.count >= capacity {
            valid = valid.filter { now < $0.value.leaseEnd }
            if valid.count >= capacity { valid.removeAll() }
        }
        valid[tokenId] = Entry(user: user, leaseEnd: askedAt.advanced(by: lease))
    }

    /// These tokens were revoked: forget them, and refuse answers about them still on their way.
    mutating func revoke(_ tokenIds: [String], now: Instant) {
        if revoked.count >= capacity { revoked = revoked.filter { now < $0.value } }
        for tokenId in tokenIds {
            valid[tokenId] = nil
            revoked[tokenId] = now.advanced(by: lease)
        }
    }

    /// How many tokens are remembered as valid (for tests and metrics).
    var count: Int { valid.count }
}

/// The gateway's ``AuthenticationCache``, shared by its request handlers and its inbox.
final class SharedAuthenticationCache: Sendable {
    private let cache: Mutex<AuthenticationCache>

    init(lease: Duration) {
        cache = Mutex(AuthenticationCache(lease: lease))
    }

    func user(tokenId: String, userId: UserID, now: ContinuousClock.Instant) -> User? {
        cache.withLock { $0.user(tokenId: tokenId, userId: userId, now: now) }
    }

    func remember(_ user: User, tokenId: String, askedAt: ContinuousClock.Instant) {
        cache.withLock { $0.remember(user, tokenId: tokenId, askedAt: askedAt, now: .now) }
    }

    func revoke(_ tokenIds: [String]) {
        cache.withLock { $0.revoke(tokenIds, now: .now) }
    }
}
