#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Swift's global executor replaced by one queue run on one thread, in the order jobs were
/// enqueued: with every node of a simulation on one ``SteppedClock`` and every random draw seeded,
/// the interleaving of their tasks is then the same on every run of a seed, and so is the run
/// (with `SWIFT_DETERMINISTIC_HASHING=1`, so that dictionaries iterate alike too).
///
/// Installed through the runtime's `swift_task_enqueueGlobal_hook`, as SwiftNIO installs its event
/// loops as the global executor; once in a process, before any task runs, and never undone. Work
/// that waits on the machine's clock (`Task.sleep` on `ContinuousClock`) is outside it: the
/// simulation's nodes wait only on their stepped clock.
public final class SimulationExecutor: SerialExecutor, @unchecked Sendable {
    public static let shared = SimulationExecutor()

    private struct State {
        var jobs: [UnownedJob] = []
        var next = 0
        /// Tasks waiting for every other job to have run (``settled()``).
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    public func enqueue(_ job: consuming ExecutorJob) {
        enqueue(UnownedJob(job))
    }

    public func enqueue(_ job: UnownedJob) {
        state.withLock { $0.jobs.append(job) }
    }

    /// Suspends until every job enqueued meanwhile, and every job those enqueue, has run: the
    /// simulation's nodes did all they could before the clock moves on.
    public func settled() async {
        await withCheckedContinuation { continuation in
            state.withLock { $0.waiting.append(continuation) }
        }
    }

    /// Runs jobs on the calling thread, one at a time in order, until `done` holds; false if
    /// nothing is left to run and nobody waits to be resumed before then (every task waits on a
    /// clock that nothing moves).
    public func run(until done: () -> Bool) -> Bool {
        while !done() {
            let job = state.withLock { state -> UnownedJob? in
                if state.next < state.jobs.count {
                    defer {
                        state.next += 1
                        if state.next > 4_096 {
                            state.jobs.removeFirst(state.next)
                            state.next = 0
                        }
                    }
                    return state.jobs[state.next]
                }
                return nil
            }
            if let job {
                job.runSynchronously(on: asUnownedSerialExecutor())
                continue
            }
            // Nothing left: whoever waited for that goes on (in the order it began to wait).
            let waiting = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                defer { state.waiting = [] }
                return state.waiting
            }
            guard !waiting.isEmpty else { return false }
            for continuation in waiting { continuation.resume() }
        }
        return true
    }

    private typealias EnqueueGlobalHook = @convention(thin) (UnownedJob, @convention(thin) (UnownedJob) -> Void) -> Void

    private static let installed = Mutex(false)

    /// Makes this executor Swift's global executor. False if the runtime has no such hook (or it
    /// was taken); the simulation then runs on the usual thread pool, its interleaving the
    /// runtime's.
    public static func install() -> Bool {
        installed.withLock { installed in
            if installed { return true }
            guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "swift_task_enqueueGlobal_hook") else { return false }
            let hook = symbol.assumingMemoryBound(to: UnsafeRawPointer?.self)
            guard hook.pointee == nil else { return false }
            let enqueue: EnqueueGlobalHook = { job, _ in SimulationExecutor.shared.enqueue(job) }
            withUnsafeBytes(of: enqueue) { bytes in
                hook.pointee = bytes.load(as: UnsafeRawPointer.self)
            }
            installed = true
            return true
        }
    }
}
