import Foundation
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// The store's connections to PostgreSQL, kept usable through a failover of the server behind the
/// store's address (a Patroni cluster behind HAProxy, or one server restarting).
///
/// postgres-nio's pool, left to itself, makes a failover worse than it is: an operation waits for
/// a connection for as long as connects fail (its lease gives up only after 60 s), and each failed
/// connect backs the next one off by a further quarter, from 100 ms — after a 12 s outage the
/// next try is 3 s away, after 25 s it is 6 s away. So this pool watches for the server going:
/// - a failover symptom on an operation (``symptom(of:)``: a reset or refused connection, a
///   read-only transaction (25006), an administrator's or a crash's shutdown (57P01, 57P02,
///   57P03), any connection exception (class 08)), or an operation waiting `stallAfter` with none
///   finishing while a direct connection fails, marks the server **away**;
/// - while it is away, every operation fails at once (``Away``), which the store reports as
///   `unavailable`: a send answers `503` with `Retry-After` instead of hanging, and the node goes
///   on serving streams;
/// - the postgres-nio pool in use when it went is replaced by a new one: the operations waiting on
///   the old one for a connection fail at once, and the new one, untouched while the server is
///   away, has no backoff to wait out when it comes back;
/// - a probe connects directly every `probeInterval` until it finds a server that accepts writes
///   (`pg_is_in_recovery()` is false: HAProxy's `/primary` check passes while the promoted member
///   still refuses writes), and operations flow again.
///
/// An operation's outcome is unknown when its connection breaks mid-commit; the store says
/// `unavailable` and the conversation reads the truth back (``ChatStore/commit(_:)``).
final class PostgresPool: Sendable {
    /// The server is away: an operation was refused without being tried.
    struct Away: Error, CustomStringConvertible {
        var seconds: Double
        var reason: String
        var description: String {
            "PostgreSQL has not accepted writes for \(String(format: "%.1f", seconds)) s (\(reason)); retry"
        }
    }

    private struct State {
        var client: PostgresClient
        var runner: Task<Void, Never>
        /// When the server went away and why; nil while it is available.
        var away: (since: ContinuousClock.Instant, reason: String)?
        var inFlight = 0
        /// When an operation last finished, or the first of several in flight began.
        var lastProgress: ContinuousClock.Instant
        var stopped = false
    }

    private let configuration: PostgresClient.Configuration
    private let probeConfiguration: PostgresConnection.Configuration
    private let logger: Logger
    private let stallAfter: Duration
    private let probeInterval: Duration
    private let state: Mutex<State>
    private let watcher = Mutex<Task<Void, Never>?>(nil)
    /// Set right before the first pool's `run()` is called, for ``running()``.
    private let firstRun = RunFlag()

    private final class RunFlag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .releasing) }
        var isSet: Bool { value.load(ordering: .acquiring) }
    }

    /// Connects with `configuration`; `probe` is the same server for a direct connection.
    init(
        configuration: PostgresClient.Configuration, probe: PostgresConnection.Configuration, logger: Logger,
        stallAfter: Duration = .seconds(1), probeInterval: Duration = .milliseconds(250)
    ) {
        self.configuration = configuration
        var probe = probe
        probe.options.connectTimeout = .seconds(2)
        self.probeConfiguration = probe
        self.logger = logger
        self.stallAfter = stallAfter
        self.probeInterval = probeInterval
        let (client, runner) = Self.start(configuration, logger: logger, flag: firstRun)
        state = Mutex(State(client: client, runner: runner, lastProgress: .now))
        watcher.withLock { $0 = Task { [weak self] in await self?.watch() } }
    }

    /// The pool operations use now (a new one after the server was away).
    var client: PostgresClient { state.withLock { $0.client } }

    /// Whether the server is away: operations fail at once.
    var isAway: Bool { state.withLock { $0.away != nil } }

    /// Runs `body` on the current pool, or throws ``Away`` at once while the server is away.
    func operation<T>(_ body: (PostgresClient) async throws -> T) async throws -> T {
        let client = try state.withLock { state in
            if let away = state.away {
                throw Away(seconds: Self.seconds(away.since.duration(to: .now)), reason: away.reason)
            }
            if state.inFlight == 0 { state.lastProgress = .now }
            state.inFlight += 1
            return state.client
        }
        do {
            let result = try await body(client)
            finished()
            return result
        } catch {
            finished()
            if let symptom = Self.symptom(of: error) { wentAway(symptom, from: client) }
            throw error
        }
    }

    /// Returns once the first pool runs: postgres-nio warns of a lease made before (it waits for
    /// the pool, but every node start logged a warning that looked like a fault).
    func running() async {
        while !firstRun.isSet { await Task.yield() }
    }

    /// Stops the pool and the watch; operations after it fail.
    func shutdown() {
        state.withLock { state in
            state.stopped = true
            state.runner.cancel()
        }
        watcher.withLock { $0?.cancel() }
    }

    private func finished() {
        state.withLock { state in
            state.inFlight -= 1
            state.lastProgress = .now
        }
    }

    private static func start(
        _ configuration: PostgresClient.Configuration, logger: Logger, flag: RunFlag? = nil
    ) -> (PostgresClient, Task<Void, Never>) {
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        return (client, Task {
            flag?.set()
            await client.run()
        })
    }

    /// Marks the server away (once, and only for a symptom on the pool in use): replaces the pool
    /// and starts probing.
    private func wentAway(_ reason: String, from client: PostgresClient) {
        let old: Task<Void, Never>? = state.withLock { state in
            guard !state.stopped, state.away == nil, state.client === client else { return nil }
            state.away = (.now, reason)
            let old = state.runner
            (state.client, state.runner) = Self.start(configuration, logger: logger)
            return old
        }
        guard let old else { return }
        logger.warning("PostgreSQL is unavailable; operations fail at once until it accepts writes again", metadata: ["reason": "\(reason)"])
        // Cancelling `run()` shuts the old pool down: its waiting leases fail, its connections close.
        old.cancel()
    }

    /// Every `probeInterval`: while the server is away, probes until it accepts writes; while it is
    /// available, probes when operations are in flight and none finished for `stallAfter` — a
    /// lease waiting on a server that refuses connections raises no error to see.
    private func watch() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: probeInterval)
            enum Step { case none, recover(ContinuousClock.Instant), checkStall }
            let step: Step = state.withLock { state in
                guard !state.stopped else { return .none }
                if let away = state.away { return .recover(away.since) }
                if state.inFlight > 0, state.lastProgress.duration(to: .now) >= stallAfter { return .checkStall }
                return .none
            }
            switch step {
            case .none:
                continue
            case .recover(let since):
                if case .writable = await probe() {
                    state.withLock { $0.away = nil }
                    logger.notice("PostgreSQL accepts writes again", metadata: ["after_s": "\(String(format: "%.1f", Self.seconds(since.duration(to: .now))))"])
                }
            case .checkStall:
                switch await probe() {
                case .writable, .refusedOther: break
                case .away(let reason): wentAway("no operation finished for \(stallAfter) and \(reason)", from: client)
                }
            }
        }
    }

    private enum Probe {
        case writable
        /// The server is gone, unreachable or read-only.
        case away(String)
        /// The server answered with an error that is not a failover's (a full server, a wrong
        /// password): not what the pool replaces itself for.
        case refusedOther
    }

    /// Connects directly (2 s to connect, 2 s to answer) and asks whether the server accepts writes.
    private func probe() async -> Probe {
        let configuration = probeConfiguration
        let logger = logger
        return await withTaskGroup(of: Probe?.self) { group in
            group.addTask {
                do {
                    let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
                    defer { Task { try? await connection.close() } }
                    for try await inRecovery in try await connection.query("SELECT pg_is_in_recovery()", logger: logger).decode(Bool.self) {
                        return inRecovery ? .away("the server is in recovery (read-only)") : .writable
                    }
                    return .away("the server did not answer")
                } catch {
                    if let symptom = Self.symptom(of: error) { return .away("a direct connection failed: \(symptom)") }
                    return .refusedOther
                }
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(4))
                return Task.isCancelled ? nil : .away("a direct connection did not answer within 4 s")
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? .away("the probe was cancelled")
        }
    }

    /// What `error` says of the server if it is a failover symptom, else nil.
    static func symptom(of error: any Error) -> String? {
        switch error {
        case let error as PostgresTransactionError:
            for inner in [error.beginError, error.closureError, error.commitError] {
                if let inner, let symptom = symptom(of: inner) { return symptom }
            }
            return nil
        case let error as PSQLError:
            switch error.code {
            case .connectionError, .serverClosedConnection, .uncleanShutdown:
                // A PSQLError's own description hides its detail (it may quote a query); an I/O
                // error's does not.
                let cause = error.underlying.flatMap { $0 is PSQLError ? nil : ": \($0)" } ?? ""
                return "connection lost (\(error.code)\(cause))"
            case .server:
                let state = error.serverInfo?[.sqlState] ?? ""
                if Self.failoverStates.contains(state) || state.hasPrefix("08") {
                    return "SQLSTATE \(state): \(error.serverInfo?[.message] ?? "")"
                }
                return nil
            default:
                return nil
            }
        case is IOError, is ChannelError:
            return "connection failed (\(error))"
        default:
            return nil
        }
    }

    /// read_only_sql_transaction (a replica, or a primary being demoted or not yet promoted),
    /// admin_shutdown, crash_shutdown, cannot_connect_now (starting or shutting down).
    static let failoverStates: Set<String> = ["25006", "57P01", "57P02", "57P03"]

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
