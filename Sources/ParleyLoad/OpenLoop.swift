import Histogram
import NIOCore
import Synchronization

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

        /// One finished send: how late it started, and its latency (nil: it failed).
        mutating func record(lag: Duration, latency: Duration?) {
            _ = self.lag.record(OpenLoop.micros(lag))
            if let latency { _ = self.latency.record(OpenLoop.micros(latency)) } else { failures += 1 }
        }
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
            for await (latency, lag) in group { result.record(lag: lag, latency: latency) }
            return result
        }
    }

    public static func micros(_ duration: Duration) -> UInt64 {
        let value = Double(duration.components.seconds) * 1e6 + Double(duration.components.attoseconds) / 1e12
        return UInt64(max(0, value.rounded()))
    }
}

extension OpenLoop {
    /// How much of the schedule ``run(on:send:)`` hands to the event loops at a time, one slice
    /// ahead of when it is due.
    static let slice = Duration.milliseconds(20)

    /// The same schedule, measured the same way, run on event loops: send `k` is a timer of
    /// `loop(k)` that fires at its scheduled time and calls `send(k, scheduled, done)` there;
    /// `send` must call `done` exactly once (from any thread), true when the send succeeded.
    ///
    /// ``run(clock:send:)`` costs a dispatch timer, a task and two or three thread wake-ups per
    /// send; on a machine whose cores the load generator shares with the servers that was a third
    /// of its CPU. Here a task wakes once per ``slice`` to hand that slice's sends to the loops,
    /// and each send is started by its loop's own timer.
    public func run(
        on loop: @escaping @Sendable (_ k: Int) -> any EventLoop,
        send: @escaping @Sendable (_ k: Int, _ scheduled: ContinuousClock.Instant, _ done: @escaping @Sendable (Bool) -> Void) -> Void
    ) async -> Result {
        guard count > 0 else { return Result() }
        let clock = ContinuousClock()
        // One instant on both clocks: sends are scheduled and measured on `clock`; the loops'
        // timers take NIO deadlines.
        let lead = Self.slice + .milliseconds(10)
        let start = clock.now.advanced(by: lead)
        let startDeadline = NIODeadline.now() + .nanoseconds(Int64(lead / .nanoseconds(1)))
        let rate = self.rate, count = self.count
        let progress = ProgressBox(remaining: count)

        @Sendable func fire(_ k: Int) {
            let scheduled = self.scheduled(k, from: start)
            let lag = scheduled.duration(to: clock.now)
            send(k, scheduled) { ok in
                let latency = ok ? scheduled.duration(to: clock.now) : nil
                let finished = progress.state.withLock { $0.record(lag: lag, latency: latency) }
                if let (continuation, result) = finished { continuation.resume(returning: result) }
            }
        }

        return await withCheckedContinuation { continuation in
            progress.state.withLock { $0.continuation = continuation }
            Task {
                var next = 0
                var sliceEnd = start
                while next < count {
                    sliceEnd = sliceEnd.advanced(by: Self.slice)
                    // Handed over one slice before it starts.
                    try? await clock.sleep(until: sliceEnd.advanced(by: Self.slice * -2))
                    var byLoop: [ObjectIdentifier: (loop: any EventLoop, sends: [Int])] = [:]
                    while next < count, self.scheduled(next, from: start) < sliceEnd {
                        let target = loop(next)
                        byLoop[ObjectIdentifier(target), default: (target, [])].sends.append(next)
                        next += 1
                    }
                    for (target, sends) in byLoop.values {
                        target.execute {
                            for k in sends {
                                let due = startDeadline + .nanoseconds(Int64((Double(k) / rate * 1e9).rounded()))
                                target.scheduleTask(deadline: due) { fire(k) }
                            }
                        }
                    }
                }
            }
        }
    }

    private final class ProgressBox: Sendable {
        let state: Mutex<Progress>
        init(remaining: Int) { state = Mutex(Progress(remaining: remaining)) }
    }

    /// What ``run(on:send:)`` has measured, and who waits for the last send.
    private struct Progress: Sendable {
        var result = Result()
        var remaining: Int
        var continuation: CheckedContinuation<Result, Never>?

        /// Records one finished send; the waiter and the result once it was the last.
        mutating func record(lag: Duration, latency: Duration?) -> (CheckedContinuation<Result, Never>, Result)? {
            result.record(lag: lag, latency: latency)
            remaining -= 1
            guard remaining == 0, let continuation else { return nil }
            self.continuation = nil
            return (continuation, result)
        }
    }
}
