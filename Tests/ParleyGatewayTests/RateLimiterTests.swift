import ParleyGateway
import Testing

@Suite struct RateLimiterTests {
    @Test func aBurstThenTheRateAndTheWaitUntilTheNextToken() {
        let limiter = RateLimiter(.init(perSecond: 2, burst: 3))
        let start = ContinuousClock.now
        for _ in 0..<3 { #expect(limiter.acquire("u", now: start) == nil) }
        let wait = limiter.acquire("u", now: start)
        #expect(wait == .milliseconds(500))
        #expect(limiter.acquire("someone else", now: start) == nil, "keys are independent")
        #expect(limiter.acquire("u", now: start.advanced(by: .milliseconds(500))) == nil, "one token back after 1/rate")
        #expect(limiter.acquire("u", now: start.advanced(by: .milliseconds(500))) != nil)
    }

    /// A bucket that has filled up again is forgotten: distinct keys, one call each, leave only
    /// the buckets of the last refill time held (the table no longer grows with every key), and a
    /// key still short of tokens keeps its limit meanwhile.
    @Test func bucketsThatRefilledAreForgotten() {
        let rule = RateLimiter.Rule(perSecond: 0.2, burst: 5)  // 25 s to refill
        let limiter = RateLimiter(rule, capacity: 1_000_000)
        let start = ContinuousClock.now
        for _ in 0..<5 { #expect(limiter.acquire("victim", now: start) == nil) }
        for index in 0..<100_000 {
            _ = limiter.acquire("key-\(index)", now: start.advanced(by: .milliseconds(index)))
            if index == 2_000 {
                #expect(limiter.acquire("victim", now: start.advanced(by: .milliseconds(index))) != nil, "still limited after 2 s of other keys")
            }
        }
        // 100 s of keys, 1 ms apart: those of the last 25 s are held, give or take the sweep's lag.
        #expect(limiter.count < 27_000, "\(limiter.count) keys held")
        // Long after, a few calls forget what is left.
        let later = start.advanced(by: .seconds(1_000))
        for index in 0..<10_000 { _ = limiter.acquire("late-\(index % 10)", now: later) }
        #expect(limiter.count <= 10 + 1, "\(limiter.count) keys held")
    }

    /// Past its capacity a limiter forgets its oldest keys first: memory stays bounded however
    /// many keys arrive at once.
    @Test func aFloodOfKeysStaysWithinTheCapacity() {
        let limiter = RateLimiter(.init(perSecond: 0.2, burst: 5), capacity: 1_000)
        let start = ContinuousClock.now
        for index in 0..<50_000 { _ = limiter.acquire("key-\(index)", now: start) }
        #expect(limiter.count == 1_000)
        for _ in 0..<5 { #expect(limiter.acquire("newest", now: start) == nil) }
        #expect(limiter.acquire("newest", now: start) != nil, "a new key is limited as any other")
    }
}
