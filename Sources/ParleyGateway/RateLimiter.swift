import Synchronization

/// Token buckets by key: `burst` tokens, refilled at `perSecond`. Pure state plus a lock; the
/// caller passes the instant, so tests drive it with a manual clock.
public final class RateLimiter: Sendable {
    public struct Rule: Sendable, Hashable {
        public var perSecond: Double
        public var burst: Double

        public init(perSecond: Double, burst: Double) {
            self.perSecond = perSecond
            self.burst = burst
        }
    }

    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    public let rule: Rule
    private let buckets = Mutex<[String: Bucket]>([:])

    public init(_ rule: Rule) {
        self.rule = rule
    }

    /// Takes a token for `key`: nil when allowed, else how long until one is available.
    public func acquire(_ key: String, now: ContinuousClock.Instant = .now) -> Duration? {
        buckets.withLock { buckets in
            var bucket = buckets[key] ?? Bucket(tokens: rule.burst, updated: now)
            let elapsed = bucket.updated.duration(to: now)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            bucket.tokens = min(rule.burst, bucket.tokens + max(0, seconds) * rule.perSecond)
            bucket.updated = now
            defer {
                // Forget full buckets now and then so the table does not grow without bound.
                if buckets.count > 100_000 { buckets = buckets.filter { $0.value.tokens < rule.burst } }
            }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                buckets[key] = bucket
                return nil
            }
            buckets[key] = bucket
            return .seconds((1 - bucket.tokens) / rule.perSecond)
        }
    }
}
