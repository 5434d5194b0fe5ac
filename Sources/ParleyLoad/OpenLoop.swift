import Histogram

/// Sends on a fixed schedule whatever the server does (open loop): send `k` is due at
/// `start + k / rate`, it is started at that time even if earlier sends have not finished, and
/// its latency counts from the **scheduled** time — so a server that stalls shows its stall in the
/// numbers instead of slowing the sender down and hiding it (coordinated omission).
public struct OpenLoop: Sendable {
    public var rate: Double
    public var count: Int

    public init(rate: Double, count: Int) {
        precondition(rate > 0 && count >= 0)
        self.rate = rate
        self.count = count
    }

    /// When send `k` is due, after `start`.
    public func scheduled(_ k: Int, from start: ContinuousClock.Instant) -> ContinuousClock.Instant {
        start.advanced(by: .seconds(Double(k) / rate))
    }

    public struct Result: Sendable {
        /// Scheduled time → completion, for each send that completed, in microseconds.
        public var latency = Histogram<UInt64>(highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: .three)
        /// How late each send was started (the sender's own lag), in microseconds.
        public var lag = Histogram<UInt64>(highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: .three)
        public var failures = 0
    }

    /// Runs the schedule: `send(k, scheduled)` for every k, each in its own task at its time.
    /// `send` returns true when the send succeeded (its latency is recorded).
    public func run(
        clock: ContinuousClock = ContinuousClock(),
        send: @escaping @Sendable (_ k: Int, _ scheduled: ContinuousClock.Instant) async -> Bool
    ) async -> Result {
        let start = clock.now.advanced(by: .milliseconds(10))
        return await withTaskGroup(of: (Duration?, Duration).self) { group in
            for k in 0..<count {
                let due = scheduled(k, from: start)
                try? await clock.sleep(until: due)
                let started = clock.now
                group.addTask {
                    let ok = await send(k, due)
                    return (ok ? due.duration(to: clock.now) : nil, due.duration(to: started))
                }
            }
            var result = Result()
            for await (latency, lag) in group {
                _ = result.lag.record(Self.micros(lag))
                if let latency { _ = result.latency.record(Self.micros(latency)) } else { result.failures += 1 }
            }
            return result
        }
    }

    public static func micros(_ duration: Duration) -> UInt64 {
        let value = Double(duration.components.seconds) * 1e6 + Double(duration.components.attoseconds) / 1e12
        return UInt64(max(0, value.rounded()))
    }
}
