import HummingbirdBcrypt
import NIOPosix
import Synchronization

/// bcrypt for registrations and logins, with a bound on the work waiting for it: each hash takes
/// tens of milliseconds of a core by design, so a flood of logins (wrong passwords cost the same)
/// queued without bound would hold every later request for as long as the queue took. Past
/// `outstandingMax` hashes running or waiting, a request is refused at once (`503` with
/// `Retry-After`) instead.
final class PasswordHashing: Sendable {
    let cost: UInt8
    let outstandingMax: Int
    private let outstanding = Mutex(0)

    init(cost: UInt8, outstandingMax: Int) {
        self.cost = cost
        self.outstandingMax = outstandingMax
    }

    func hash(_ password: String) async throws -> String {
        let cost = self.cost
        return try await run { Bcrypt.hash(password, cost: cost) }
    }

    func verify(_ password: String, hash: String) async throws -> Bool {
        try await run { Bcrypt.verify(password, hash: hash) }
    }

    /// Hashes running or waiting (for tests).
    var count: Int { outstanding.withLock { $0 } }

    /// Runs `work` on the thread pool if fewer than `outstandingMax` are running or waiting.
    func run<T: Sendable>(_ work: @escaping @Sendable () -> T) async throws -> T {
        let admitted = outstanding.withLock { count -> Bool in
            guard count < outstandingMax else { return false }
            count += 1
            return true
        }
        guard admitted else {
            throw APIError.unavailable("too many sign-ins and registrations at once; retry shortly")
        }
        defer { outstanding.withLock { $0 -= 1 } }
        return try await NIOThreadPool.singleton.runIfActive(work)
    }
}
