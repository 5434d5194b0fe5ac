import Foundation
import Logging
import Synchronization

/// A crash test's fault: `PARLEY_TEST_CRASH_AT=<step>[:<n>]` kills this process with SIGKILL — as
/// a power cut would, with nothing flushed or said — the n-th time (1 by default) it passes the
/// named step of a long process (``ChatServices/checkpoint``: `deletion.begun`,
/// `deletion.announced`, `deletion.left`, `deletion.finished`, and `erasure.batch` after each
/// store transaction of an erasure, before its fan-out). Unset, nothing is checked.
enum CrashPoint {
    static func checkpoint(environment: [String: String], logger: Logger) -> @Sendable (String) -> Void {
        guard let text = environment["PARLEY_TEST_CRASH_AT"], !text.isEmpty else { return { _ in } }
        let parts = text.split(separator: ":", maxSplits: 1)
        let step = String(parts[0])
        let nth = parts.count == 2 ? max(1, Int(parts[1]) ?? 1) : 1
        logger.warning("this process kills itself at a step (a crash test's fault)", metadata: ["crash.step": "\(step)", "crash.nth": "\(nth)"])
        let passes = Mutex(0)
        return { passed in
            guard passed == step else { return }
            let count = passes.withLock { count in
                count += 1
                return count
            }
            if count == nth { kill(getpid(), SIGKILL) }
        }
    }
}
