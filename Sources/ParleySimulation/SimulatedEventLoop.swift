import Foundation
import NIOCore
import ParleyCluster
import Synchronization

/// The event loop of a simulated gateway's client connections: what it is handed runs in the
/// order handed, one job at a time, in a task of Swift's global executor (under a
/// ``SimulationExecutor``, the simulation's one queue), and its timers wait on the simulation's
/// clock. The gateway's streams (`LiveEventStream`) run on it exactly as on a connection's loop.
final class SimulatedEventLoop: EventLoop, Sendable {
    private struct State {
        var jobs: [@Sendable () -> Void] = []
        var draining = false
    }

    private let state = Mutex(State())
    private let clock: any ClusterClock
    private let origin: ContinuousClock.Instant

    /// The loop whose job the current task is running.
    @TaskLocal private static var running: ObjectIdentifier?

    init(clock: any ClusterClock) {
        self.clock = clock
        self.origin = clock.now
    }

    var inEventLoop: Bool { Self.running == ObjectIdentifier(self) }

    var now: NIODeadline { .uptimeNanoseconds(UInt64(max(0, origin.duration(to: clock.now).nanoseconds))) }

    func execute(_ task: @escaping @Sendable () -> Void) {
        let startsDrain = state.withLock { state -> Bool in
            state.jobs.append(task)
            defer { state.draining = true }
            return !state.draining
        }
        guard startsDrain else { return }
        Task { Self.$running.withValue(ObjectIdentifier(self)) { drain() } }
    }

    private func drain() {
        while let job = state.withLock({ state -> (@Sendable () -> Void)? in
            guard !state.jobs.isEmpty else {
                state.draining = false
                return nil
            }
            return state.jobs.removeFirst()
        }) {
            job()
        }
    }

    @discardableResult
    func scheduleTask<T>(deadline: NIODeadline, _ task: @escaping @Sendable () throws -> T) -> Scheduled<T> {
        scheduleTask(in: deadline - now, task)
    }

    @discardableResult
    func scheduleTask<T>(in delay: TimeAmount, _ task: @escaping @Sendable () throws -> T) -> Scheduled<T> {
        let promise = makePromise(of: T.self)
        // Whether the task ran or was cancelled, whichever came first (the promise completes once).
        let settled = Mutex(false)
        let clock = self.clock
        Task {
            try? await clock.sleep(until: clock.now.advanced(by: .nanoseconds(delay.nanoseconds)))
            execute {
                guard settled.withLock({ settled in defer { settled = true }; return !settled }) else { return }
                promise.completeWith(Result { try task() })
            }
        }
        return Scheduled(promise: promise) {
            guard settled.withLock({ settled in defer { settled = true }; return !settled }) else { return }
            promise.fail(EventLoopError.cancelled)
        }
    }

    func preconditionInEventLoop(file: StaticString, line: UInt) {
        precondition(inEventLoop, "not on the simulated event loop", file: file, line: line)
    }

    func preconditionNotInEventLoop(file: StaticString, line: UInt) {
        precondition(!inEventLoop, "on the simulated event loop", file: file, line: line)
    }

    func shutdownGracefully(queue: DispatchQueue, _ callback: @escaping @Sendable ((any Error)?) -> Void) {
        queue.async { callback(nil) }
    }
}
