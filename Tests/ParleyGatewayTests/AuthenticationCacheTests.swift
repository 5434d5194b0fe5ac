import Foundation
import ParleyModel
@testable import ParleyGateway
import ParleyTestKit
import Testing

@Suite struct AuthenticationCacheTests {
    let ann = User(id: UserID(rawValue: "u_ann"), handle: "ann", displayName: "Ann", createdAt: Date(timeIntervalSince1970: 0))

    /// A token found valid is accepted without asking for one lease counted from when the gateway
    /// asked, not from when the answer came; then the actor is asked again.
    @Test func aValidTokenIsRememberedForOneLeaseFromTheQuestion() {
        var time = ManualTime()
        var cache = AuthenticationCache(lease: .seconds(5))
        let askedAt = time.now
        #expect(cache.user(tokenId: "t1", userId: ann.id, now: askedAt) == nil, "nothing is known before the actor answered")
        cache.remember(ann, tokenId: "t1", askedAt: askedAt, now: time.advance(by: .seconds(1)))
        #expect(cache.user(tokenId: "t1", userId: ann.id, now: time.advance(by: .milliseconds(3_999))) == ann)
        #expect(cache.user(tokenId: "t1", userId: ann.id, now: time.advance(by: .milliseconds(1))) == nil, "5 s after the question")
        #expect(cache.user(tokenId: "t1", userId: UserID(rawValue: "u_other"), now: askedAt) == nil, "another user's claim to the token")
    }

    /// A revocation forgets the token at once, and an answer that was on its way when it arrived
    /// (asked before) is not remembered; other tokens are untouched.
    @Test func aRevokedTokenIsForgottenAndALateAnswerIsRefused() {
        var time = ManualTime()
        var cache = AuthenticationCache(lease: .seconds(5))
        cache.remember(ann, tokenId: "t1", askedAt: time.now, now: time.now)
        cache.remember(ann, tokenId: "t2", askedAt: time.now, now: time.now)
        let inFlight = time.advance(by: .seconds(1))
        cache.revoke(["t1", "t3"], now: time.advance(by: .milliseconds(10)))
        #expect(cache.user(tokenId: "t1", userId: ann.id, now: time.now) == nil)
        #expect(cache.user(tokenId: "t2", userId: ann.id, now: time.now) == ann)
        cache.remember(ann, tokenId: "t3", askedAt: inFlight, now: time.advance(by: .milliseconds(10)))
        #expect(cache.user(tokenId: "t3", userId: ann.id, now: time.now) == nil, "the answer asked for before the revocation")
        #expect(cache.count == 1)
    }

    /// Past its capacity the cache drops tokens whose lease ran out before it grows.
    @Test func aFullCacheDropsExpiredTokensFirst() {
        var time = ManualTime()
        var cache = AuthenticationCache(lease: .seconds(5), capacity: 3)
        cache.remember(ann, tokenId: "old-1", askedAt: time.now, now: time.now)
        cache.remember(ann, tokenId: "old-2", askedAt: time.now, now: time.now)
        time.advance(by: .seconds(3))
        cache.remember(ann, tokenId: "young", askedAt: time.now, now: time.now)
        time.advance(by: .seconds(3))
        cache.remember(ann, tokenId: "new", askedAt: time.now, now: time.now)
        #expect(cache.count == 2)
        #expect(cache.user(tokenId: "young", userId: ann.id, now: time.now) == ann)
        #expect(cache.user(tokenId: "new", userId: ann.id, now: time.now) == ann)
    }
}
