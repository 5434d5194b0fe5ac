/// Time that moves only when a test says so: the instants fed to pure state machines.
public struct ManualTime: Sendable {
    /// The instant every test timeline starts from.
    public let origin: ContinuousClock.Instant
    public private(set) var now: ContinuousClock.Instant

    public init() {
        self.origin = ContinuousClock.now
        self.now = origin
    }

    /// Moves time forward and returns the new now.
    @discardableResult
    public mutating func advance(by duration: Duration) -> ContinuousClock.Instant {
        precondition(duration >= .zero, "time cannot go back (\(duration))")
        now = now.advanced(by: duration)
        return now
    }

    /// The instant `offset` after the origin.
    public func at(_ offset: Duration) -> ContinuousClock.Instant { origin.advanced(by: offset) }
}
