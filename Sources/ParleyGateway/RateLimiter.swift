import DequeModule
import Synchronization

/// Token buckets by key: `burst` tokens, refilled at `perSecond`. Pure state plus a lock; the
/// caller passes the instant, so tests drive it with a manual clock.
///
/// Bounded, and O(1) amortised per call whatever the keys: a bucket that has filled up again is
/// the same as none, so each is forgotten once it has had time to fill (found by a queue in the
/// order buckets were made, a few looked at per call); past ``capacity`` keys the oldest are
/// forgotten early. Forgetting a bucket only gives its key a full burst again — what a flood of
/// new keys from many hosts could buy for one key, never more than that.
public final class RateLimiter: Sendable {
    public struct Rule: Sendable, Hashable {
        public var perSecond: Double
        public var burst: Double

        public init(perSecond: Double, burst: Double) {
            self.perSecond = perSecond
            self.burst = burst
        }

        /// How long an empty bucket takes to fill: after this since its last use, it is full.
        var refill: Duration { .seconds(burst / perSecond) }
    }

    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    private struct State {
        var buckets: [String: Bucket] = [:]
        /// Every key in ``buckets`` once, oldest first, with when it was looked at last by the sweep.
        var order = Deque<(key: String, since: ContinuousClock.Instant)>()
    }

    public let rule: Rule
    /// The most keys held; the oldest go first past it.
    public let capacity: Int
    private let state = Mutex(State())

    /// Buckets the sweep looks at per call: more than the one a call can add, so the queue
    /// drains as fast as it fills.
    private static let sweepPerCall = 4

    public init(_ rule: Rule, capacity: Int = 100_000) {
        self.rule = rule
        self.capacity = max(1, capacity)
    }

    /// How many keys are held.
    public var count: Int { state.withLock { $0.buckets.count } }

    /// Takes a token for `key`: nil when allowed, else how long until one is available.
    public func acquire(_ key: String, now: ContinuousClock.Instant) -> Duration? {
        state.withLock { state in
            sweep(&state, now: now)
            var bucket: Bucket
            if let held = state.buckets[key] {
                bucket = held
                let elapsed = bucket.updated.duration(to: now)
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                bucket.tokens = min(rule.burst, bucket.tokens + max(0, seconds) * rule.perSecond)
            } else {
                while state.buckets.count >= capacity, let oldest = state.order.popFirst() {
                    state.buckets[oldest.key] = nil
                }
                bucket = Bucket(tokens: rule.burst, updated: now)
                state.order.append((key, now))
            }
            bucket.updated = now
            defer { state.buckets[key] = bucket }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return .seconds((1 - bucket.tokens) / rule.perSecond)
        }
    }

    /// Forgets the oldest buckets that have filled up since they were last used; one used since
    /// goes to the back of the queue, to be looked at once it may have filled.
    private func sweep(_ state: inout State, now: ContinuousClock.Instant) {
        let refill = rule.refill
        for _ in 0..<Self.sweepPerCall {
            guard let (key, since) = state.order.first, since + refill <= now else { return }
            state.order.removeFirst()
            guard let bucket = state.buckets[key] else { continue }
            if bucket.updated + refill <= now {
                state.buckets[key] = nil
            } else {
                state.order.append((key, bucket.updated))
            }
        }
    }
}
