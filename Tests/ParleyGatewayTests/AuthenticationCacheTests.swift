import ParleySimulation
import Foundation
import ParleyModel
@testable import ParleyGateway
import ParleyTestKit
import Testing

@Suite struct AuthenticationCacheTests {
    let ann = User(id: UserID(rawValue: "u_ann"), handle: "ann", displayName: "Ann", createdAt: Date(timeIntervalSince1970: 0))
    let wallClock = Date(timeIntervalSince1970: 1_800_000_000)

    func claims(_ tokenId: String, expiresIn seconds: TimeInterval = 3600) -> TokenAuthority.Claims {
        TokenAuthority.Claims(userId: ann.id, tokenId: tokenId, expiresAt: wallClock.addingTimeInterval(seconds))
    }

    /// A token found valid is accepted by its text without asking for one lease counted from when
    /// the gateway asked, not from when the answer came; then the actor is asked again.
    @Test func aValidTokenIsRememberedForOneLeaseFromTheQuestion() {
        var time = ManualTime()
        var cache = AuthenticationCache(lease: .seconds(5))
        let askedAt = time.now
        #expect(cache.caller(token: "text-1", now: askedAt, wallClock: wallClock) == nil, "nothing is known before the actor answered")
        cache.remember(ann, claims: claims("t1"), token: "text-1", askedAt: askedAt, now: time.advance(by: .seconds(1)))
        #expect(cache.caller(token: "text-1", now: time.advance(by: .milliseconds(3_999)), wallClock: wallClock)?.claims == claims("t1"))
        #expect(cache.caller(token: "text-1", now: time.advance(by: .milliseconds(1)), wallClock: wallClock) == nil, "5 s after the question")
        #expect(cache.caller(token: "text-1 ", now: askedAt, wallClock: wallClock) == nil, "only the very text that was verified")
    }

    /// After its lease a remembered token's claims are still known (the actor is asked again, the
    /// signature not checked again), but not once the token expired or was revoked, and only for
    /// the very text that was verified.
    @Test func aRememberedTokensClaimsOutliveItsLeaseButNotARevocation() {
        var time = ManualTime()
        var cache = AuthenticationCache(lease: .seconds(5))
        cache.remember(ann, claims: claims("t1", expiresIn: 60), token: "text-1", askedAt: time.now, now: time.now)
        time.advance(by: .seconds(6))
        #expect(cache.caller(token: "text-1", now: time.now, wallClock: wallClock) == nil, "the lease ran out")
        #expect(cache.verifiedClaims(token: "text-1", wallClock: wallClock) == claims("t1", expiresIn: 60))
        #expect(cache.verifiedClaims(token: "text-1 ", wallClock: wallClock) == nil, "only the very text that was verified")
        #expect(cache.verifiedClaims(token: "text-1", wallClock: wallClock.addingTimeInterval(60)) == nil, "expired")
        cache.revoke(["t1"], now: time.now)
        #expect(cache.verifiedClaims(token: "text-1", wallClock: wallClock) == nil, "revoked")
    }

    /// A remembered token that expires meanwhile is not accepted from memory.
    @Test func anExpiredTokenIsNotAcceptedFromMemory() {
        let time = ManualTime()
        var cache = AuthenticationCache(lease: .seconds(5))
        cache.remember(ann, claims: claims("t1", expiresIn: 1), token: "text-1", askedAt: time.now, now: time.now)
        #expect(cache.caller(token: "text-1", now: time.now, wallClock: wallClock)?.user == ann)
        #expect(cache.caller(token: "text-1", now: time.now, wallClock: wallClock.addingTimeInterval(1)) == nil)
    }

    /// A revocation forgets the token at once, and an answer that was on its way when it arrived
    /// (asked before) is not remembered; other tokens are untouched.
    @Test func aRevokedTokenIsForgottenAndALateAnswerIsRefused() {
        var time = ManualTime()
        var cache = AuthenticationCache(lease: .seconds(5))
        cache.remember(ann, claims: claims("t1"), token: "text-1", askedAt: time.now, now: time.now)
        cache.remember(ann, claims: claims("t2"), token: "text-2", askedAt: time.now, now: time.now)
        let inFlight = time.advance(by: .seconds(1))
        cache.revoke(["t1", "t3"], now: time.advance(by: .milliseconds(10)))
        #expect(cache.caller(token: "text-1", now: time.now, wallClock: wallClock) == nil)
        #expect(cache.caller(token: "text-2", now: time.now, wallClock: wallClock)?.user == ann)
        cache.remember(ann, claims: claims("t3"), token: "text-3", askedAt: inFlight, now: time.advance(by: .milliseconds(10)))
        #expect(cache.caller(token: "text-3", now: time.now, wallClock: wallClock) == nil, "the answer asked for before the revocation")
        #expect(cache.count == 1)
    }

    /// A password change revokes every token of the user but one: all are forgotten, also those
    /// no revocation could name, and answers about any of them asked before are refused for a
    /// lease; the kept token and other users' tokens are untouched.
    @Test func aUsersRevocationForgetsAllTheirTokensButTheKeptOne() {
        var time = ManualTime()
        var cache = AuthenticationCache(lease: .seconds(5))
        let bob = User(id: UserID(rawValue: "u_bob"), handle: "bob", displayName: "Bob", createdAt: Date(timeIntervalSince1970: 0))
        let bobs = TokenAuthority.Claims(userId: bob.id, tokenId: "b1", expiresAt: wallClock.addingTimeInterval(3600))
        for id in ["kept", "other", "unrecorded"] { cache.remember(ann, claims: claims(id), token: "text-\(id)", askedAt: time.now, now: time.now) }
        cache.remember(bob, claims: bobs, token: "text-b1", askedAt: time.now, now: time.now)
        let inFlight = time.advance(by: .seconds(1))
        cache.revoke(user: ann.id, except: "kept", now: time.advance(by: .milliseconds(10)))
        #expect(cache.caller(token: "text-other", now: time.now, wallClock: wallClock) == nil)
        #expect(cache.caller(token: "text-unrecorded", now: time.now, wallClock: wallClock) == nil)
        #expect(cache.verifiedClaims(token: "text-other", wallClock: wallClock) == nil, "its signature would be trusted again")
        #expect(cache.caller(token: "text-kept", now: time.now, wallClock: wallClock)?.user == ann)
        #expect(cache.caller(token: "text-b1", now: time.now, wallClock: wallClock)?.user == bob)
        cache.remember(ann, claims: claims("late"), token: "text-late", askedAt: inFlight, now: time.advance(by: .milliseconds(10)))
        #expect(cache.caller(token: "text-late", now: time.now, wallClock: wallClock) == nil, "an answer asked for before the revocation")
        cache.remember(ann, claims: claims("kept"), token: "text-kept", askedAt: inFlight, now: time.now)
        #expect(cache.caller(token: "text-kept", now: time.now, wallClock: wallClock)?.user == ann, "the kept token is answered for as before")
        time.advance(by: .seconds(6))
        cache.remember(ann, claims: claims("next-login"), token: "text-next", askedAt: time.now, now: time.now)
        #expect(cache.caller(token: "text-next", now: time.now, wallClock: wallClock)?.user == ann, "a lease later, new logins are remembered")
    }

    /// Past its capacity the cache drops tokens whose lease ran out before it grows.
    @Test func aFullCacheDropsExpiredTokensFirst() {
        var time = ManualTime()
        var cache = AuthenticationCache(lease: .seconds(5), capacity: 3)
        cache.remember(ann, claims: claims("old-1"), token: "old-1", askedAt: time.now, now: time.now)
        cache.remember(ann, claims: claims("old-2"), token: "old-2", askedAt: time.now, now: time.now)
        time.advance(by: .seconds(3))
        cache.remember(ann, claims: claims("young"), token: "young", askedAt: time.now, now: time.now)
        time.advance(by: .seconds(3))
        cache.remember(ann, claims: claims("new"), token: "new", askedAt: time.now, now: time.now)
        #expect(cache.count == 2)
        #expect(cache.caller(token: "young", now: time.now, wallClock: wallClock)?.user == ann)
        cache.revoke(["young"], now: time.now)
        #expect(cache.caller(token: "young", now: time.now, wallClock: wallClock) == nil, "revocations still find what survived the purge")
    }
}
