import Foundation
import ParleyCluster
import Synchronization

/// A cluster clock that moves only when the test says so: sleepers wake when it passes their
/// deadline, and the wall clock moves with it. Nodes given one such clock share a timeline that
/// nothing real waits on.
public final class SteppedClock: ClusterClock {
    public typealias Instant = ContinuousClock.Instant

    private struct State {
        var now: Instant
        var wallNow: Date
        var sleepers: [(deadline: Instant, wake: CheckedContinuation<Void, Never>)] = []
    }

    private let state: Mutex<State>
    /// Where the clock started: what a run's times count from.
    public let origin: Instant

    /// - Parameter wallNow: where the wall clock starts.
    public init(wallNow: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        origin = ContinuousClock.now
        state = Mutex(State(now: origin, wallNow: wallNow))
    }

    public var now: Instant { state.withLock { $0.now } }
    public var wallNow: Date { state.withLock { $0.wallNow } }
    public var minimumResolution: Duration { .zero }
    /// Tasks asleep on this clock.
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    public func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        await withCheckedContinuation { continuation in
            let due = state.withLock { state -> Bool in
                guard deadline > state.now else { return true }
                state.sleepers.append((deadline, continuation))
                return false
            }
            if due { continuation.resume() }
        }
    }

    /// Moves both clocks on and wakes the sleepers whose deadline has come.
    public func advance(by duration: Duration) {
        let woken = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.now = state.now.advanced(by: duration)
            let (seconds, attoseconds) = duration.components
            state.wallNow = state.wallNow.addingTimeInterval(Double(seconds) + Double(attoseconds) / 1e18)
            let now = state.now
            let due = state.sleepers.filter { $0.deadline <= now }
            state.sleepers.removeAll { $0.deadline <= now }
            return due.map(\.wake)
        }
        for wake in woken { wake.resume() }
    }
}

extension SteppedClock {
    /// What lets the tasks a step woke run before the next step: a millisecond of real time on
    /// the usual thread pool; with a ``SimulationExecutor``, until every job has run.
    public typealias Settle = @Sendable () async throws -> Void
    public static let realMillisecond: Settle = { try await Task.sleep(for: .milliseconds(1)) }

    /// Moves the clock on in steps until `condition` holds; how far it moved, or nil past `limit`.
    /// After each step the tasks it woke run (`settle`).
    public func advance(
        until condition: () -> Bool, step: Duration, limit: Duration, settle: Settle = SteppedClock.realMillisecond
    ) async throws -> Duration? {
        var moved = Duration.zero
        while !condition() {
            guard moved < limit else { return nil }
            advance(by: step)
            moved += step
            try await settle()
        }
        return moved
    }

    /// Runs `body` while the clock moves on in steps; its outcome, and how far the clock moved.
    public func advance<T: Sendable>(
        step: Duration, settle: Settle = SteppedClock.realMillisecond, while body: @escaping @Sendable () async throws -> T
    ) async throws -> (outcome: Result<T, any Error>, moved: Duration) {
        let task = Task { () -> Result<T, any Error> in
            do { return .success(try await body()) } catch { return .failure(error) }
        }
        let done = Done()
        Task {
            _ = await task.value
            done.set()
        }
        let moved = try await advance(until: { done.isSet }, step: step, limit: .seconds(86_400), settle: settle) ?? .zero
        return (await task.value, moved)
    }

    private final class Done: Sendable {
        private let value = Mutex(false)
        func set() { value.withLock { $0 = true } }
        var isSet: Bool { value.withLock { $0 } }
    }
}
