import Foundation
import ParleyCluster
import Synchronization

/// A cluster clock that moves only when the test says so: sleepers wake when it passes their
/// deadline, and the wall clock moves with it. Nodes given one such clock share a timeline that
/// nothing real waits on.
public final class SteppedClock: ClusterClock {
    public typealias Instant = ContinuousClock.Instant

    private struct State {
        var now = ContinuousClock.now
        var wallNow: Date
        var sleepers: [(deadline: Instant, wake: CheckedContinuation<Void, Never>)] = []
    }

    private let state: Mutex<State>

    /// - Parameter wallNow: where the wall clock starts.
    public init(wallNow: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        state = Mutex(State(wallNow: wallNow))
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
