import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import Synchronization

/// Tokens a user's actor said are valid, remembered by their text for a lease so that a request
/// costs neither a call to that actor nor a signature check; and tokens this gateway was told are
/// revoked.
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
        var claims: TokenAuthority.Claims
        var leaseEnd: Instant
    }

    let lease: Duration
    /// Past this many remembered tokens, expired ones are dropped (and if none were, all).
    let capacity: Int
    /// By the token's text, as the client sends it (so its signature is not checked again).
    private var valid: [String: Entry] = [:]
    /// Token ID → the text remembered for it (revocations name IDs).
    private var textOf: [String: String] = [:]
    /// Revoked token IDs, each until one lease after the gateway heard of it.
    private var revoked: [String: Instant] = [:]
    /// Users all of whose tokens but one (or all) were revoked, each until one lease after.
    private var revokedUsers: [UserID: (except: String?, until: Instant)] = [:]

    init(lease: Duration, capacity: Int = 100_000) {
        self.lease = lease
        self.capacity = capacity
    }

    /// The caller of a token remembered as valid, if its lease has not run out and the token has
    /// not expired.
    func caller(token: String, now: Instant, wallClock: Date) -> (user: User, claims: TokenAuthority.Claims)? {
        guard let entry = valid[token], now < entry.leaseEnd, wallClock < entry.claims.expiresAt else { return nil }
        return (entry.user, entry.claims)
    }

    /// The claims of a token this gateway verified and remembered, also once its lease ran out:
    /// the same text under the same secret, so its signature need not be checked again when the
    /// actor is asked anew. Nil for a token expired, revoked or not remembered.
    func verifiedClaims(token: String, wallClock: Date) -> TokenAuthority.Claims? {
        guard let entry = valid[token], wallClock < entry.claims.expiresAt else { return nil }
        return entry.claims
    }

    /// The actor said the token (verified: `claims` are its own) is valid, answering a question
    /// asked at `askedAt`.
    mutating func remember(_ user: User, claims: TokenAuthority.Claims, token: String, askedAt: Instant, now: Instant) {
        if let until = revoked[claims.tokenId], now < until { return }
        if let user = revokedUsers[claims.userId], now < user.until, claims.tokenId != user.except { return }
        if valid.count >= capacity {
            valid = valid.filter { now < $0.value.leaseEnd }
            if valid.count >= capacity { valid.removeAll() }
            textOf = Dictionary(valid.map { ($0.value.claims.tokenId, $0.key) }, uniquingKeysWith: { first, _ in first })
        }
        if let old = textOf[claims.tokenId], old != token { valid[old] = nil }
        valid[token] = Entry(user: user, claims: claims, leaseEnd: askedAt.advanced(by: lease))
        textOf[claims.tokenId] = token
    }

    /// These tokens were revoked: forget them, and refuse answers about them still on their way.
    mutating func revoke(_ tokenIds: [String], now: Instant) {
        if revoked.count >= capacity { revoked = revoked.filter { now < $0.value } }
        for tokenId in tokenIds {
            if let text = textOf.removeValue(forKey: tokenId) { valid[text] = nil }
            revoked[tokenId] = now.advanced(by: lease)
        }
    }

    /// Every token of `user` but `except` was revoked: forget them, and refuse answers about them
    /// still on their way (also about tokens this gateway never saw).
    mutating func revoke(user: UserID, except: String?, now: Instant) {
        revokedUsers = revokedUsers.filter { now < $0.value.until }
        for (text, entry) in valid where entry.user.id == user && entry.claims.tokenId != except {
            valid[text] = nil
            textOf[entry.claims.tokenId] = nil
        }
        revokedUsers[user] = (except, now.advanced(by: lease))
    }

    /// How many tokens are remembered as valid (for tests and metrics).
    var count: Int { valid.count }
}

/// The gateway's ``AuthenticationCache``, shared by its request handlers and its inbox.
final class SharedAuthenticationCache: Sendable {
    private let cache: Mutex<AuthenticationCache>
    private let clock: any ClusterClock

    init(lease: Duration, clock: any ClusterClock) {
        cache = Mutex(AuthenticationCache(lease: lease))
        self.clock = clock
    }

    func caller(token: String, now: ContinuousClock.Instant, wallClock: Date) -> (user: User, claims: TokenAuthority.Claims)? {
        cache.withLock { $0.caller(token: token, now: now, wallClock: wallClock) }
    }

    func verifiedClaims(token: String, wallClock: Date) -> TokenAuthority.Claims? {
        cache.withLock { $0.verifiedClaims(token: token, wallClock: wallClock) }
    }

    func remember(_ user: User, claims: TokenAuthority.Claims, token: String, askedAt: ContinuousClock.Instant) {
        let now = clock.now
        cache.withLock { $0.remember(user, claims: claims, token: token, askedAt: askedAt, now: now) }
    }

    func revoke(_ revocation: GatewayInbox.Revocation) {
        let now = clock.now
        cache.withLock { cache in
            switch revocation {
            case .tokens(let tokenIds): cache.revoke(tokenIds, now: now)
            case .user(let user, let except): cache.revoke(user: user, except: except, now: now)
            }
        }
    }
}
