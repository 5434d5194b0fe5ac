/// How long to wait between attempts that keep failing: `first` after the first failure,
/// doubling with each failure after it, never more than `max`. Every retry loop in Parley — a
/// cluster call, a gateway's send, an owner's resend to a gateway, a push or webhook that failed,
/// a dial to a peer, the client library's reconnects — waits by one of these.
public struct Backoff: Sendable, Hashable {
    public var first: Duration
    public var max: Duration

    public init(first: Duration, max: Duration) {
        self.first = first
        self.max = Swift.max(first, max)
    }

    /// The wait after `failures` failed attempts in a row (1 or more; fewer counts as 1).
    public func delay(afterFailures failures: Int) -> Duration {
        var delay = first
        // At most 62 doublings: past them any first delay has passed any max.
        for _ in 1..<Swift.max(1, Swift.min(failures, 62)) where delay < max { delay = delay * 2 }
        return Swift.min(delay, max)
    }

    /// The wait after `failures` failed attempts, at least `floor` (what the other side asked
    /// for: a `Retry-After`).
    public func delay(afterFailures failures: Int, atLeast floor: Duration?) -> Duration {
        Swift.max(delay(afterFailures: failures), floor ?? .zero)
    }

    /// The wait that follows `delay`: doubled, at most ``max`` (for a loop that keeps its
    /// current wait rather than a count of failures).
    public func next(after delay: Duration) -> Duration {
        Swift.min(delay * 2, max)
    }
}
