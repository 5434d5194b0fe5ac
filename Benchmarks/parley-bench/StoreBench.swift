import ArgumentParser
import Foundation
import ParleyChat
import ParleyLoad
import ParleyModel
import ParleyStore
import ParleyStorePostgres
import ParleyStoreSQLite
import Synchronization

/// Durable appends/s through the node's group commit, in one process: `K` appends in flight over
/// `C` conversations, each acknowledged only after its batch committed.
struct StoreBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "store", abstract: "Measure durable appends/s through group commit.")

    @Option(help: "sqlite:PATH, postgres://USER@HOST:PORT/DB, or memory.")
    var store = "sqlite:/tmp/parley-bench-\(UUID().uuidString).sqlite"
    @Option(help: "Conversations the appends spread over.")
    var conversations = 1
    @Option(help: "Appends to time (after a warm-up of a tenth as many).")
    var appends = 200_000
    @Option(help: "Appends in flight (closed loop: each starts when another finished).")
    var inFlight = 256
    @Option(help: "Open loop instead: appends offered at this rate per second, each at its scheduled time, whatever the store does; latency counts from the scheduled time. 0: closed loop.")
    var rate: Double = 0
    @Option(help: "Open loop: how often the driver wakes to start the appends that are due, in microseconds (latency still counts from each append's own scheduled time).")
    var tickMicros = 200
    @Option(help: "Largest batch per commit.")
    var maxBatch = 512
    @Option(help: "The least time between the starts of two commits, in microseconds (0: none).")
    var commitIntervalMicros = 0
    @Option(help: "Commits run at once (default: the store's own; 1 for SQLite, 2 for PostgreSQL).")
    var concurrentCommits: Int?
    @Option(help: "SQLite synchronous mode: normal or full.")
    var synchronous = "normal"
    @Flag(help: "Random (version 4) client message IDs instead of time-ordered ones (version 7, what Parley's clients make).")
    var randomIds = false
    @Option(help: "SQLite: background checkpoint interval in ms (0: SQLite's automatic checkpoints instead).")
    var backgroundCheckpointMs = 50
    @Option(help: "SQLite: bytes of the file each connection reads through a memory map, in MiB (0: none, every page read with pread).")
    var mmapMib = SQLiteChatStore.Settings().mmapBytes >> 20

    func run() async throws {
        // The random half of client message IDs comes from a seeded generator per sender, seeded
        // from the system once per run: the system generator is a `getrandom` call per ID, ~6 % of
        // the process at 50,000 appends/s, and the IDs stand for ones clients make on their own
        // devices. (A stored property with a value would be skipped by the command's decoding.)
        let seed = UInt64.random(in: .min ... .max)
        var settings = SQLiteChatStore.Settings()
        settings.synchronous = synchronous == "full" ? .full : .normal
        settings.backgroundCheckpoint = backgroundCheckpointMs > 0 ? .milliseconds(backgroundCheckpointMs) : nil
        settings.mmapBytes = mmapMib << 20
        let (chatStore, path) = try openBenchmarkStore(store, sqlite: settings)
        defer { removeSQLiteFiles(path) }
        try await chatStore.migrate()
        let owned = try await ownedConversations(conversations, in: chatStore)
        if let concurrentCommits, concurrentCommits < 1 { throw ValidationError("--concurrent-commits must be at least 1") }
        let committer = GroupCommitter(
            store: chatStore, maxBatch: maxBatch, minInterval: .microseconds(commitIntervalMicros), maxConcurrentCommits: concurrentCommits, clock: ContinuousClock())
        guard rate >= 0, rate.isFinite else { throw ValidationError("--rate must be 0 (closed loop) or a positive number of appends per second") }
        guard tickMicros >= 1 else { throw ValidationError("--tick-micros must be at least 1") }
        let load = rate > 0 ? String(format: "offered %.0f/s (open loop)", rate) : "in flight \(inFlight)"
        _ = try await drive(committer, owned, count: max(1, appends / 10), seed: seed)  // warm-up
        let started = ContinuousClock.now
        let latencies = try await rate > 0
            ? driveOpenLoop(committer, owned, count: appends, seed: seed) : drive(committer, owned, count: appends, seed: seed)
        let elapsed = started.duration(to: .now)
        print("store: \(store.hasPrefix("sqlite:") ? "sqlite (synchronous=\(synchronous))" : store.hasPrefix("postgres") ? "postgresql" : store)  conversations \(conversations)  \(load)  max batch \(maxBatch)  concurrent commits \(concurrentCommits ?? chatStore.concurrentCommits)  client message IDs \(randomIds ? "random" : "time-ordered")")
        print(String(format: "appends: %d in %.2f s = %.0f appends/s  ", appends, elapsed.seconds, Double(appends) / elapsed.seconds)
            + "latency " + latencies.summary([50, 99]))
    }

    /// `count` appends offered at `rate` per second, spread round-robin over the conversations: each
    /// is started at its scheduled time however many are still waiting, and its latency is measured
    /// from that time, so a store that falls behind shows it (no coordinated omission).
    private func driveOpenLoop(_ committer: GroupCommitter, _ owned: [(ConversationID, Int64)], count: Int, seed: UInt64) async throws -> Latencies {
        // Unstructured tasks, not a task group: a group with ~100,000 children waiting removes each
        // finished one by a scan of the others (the runtime's TaskGroup::removeChildTask was 83 % of
        // the process when commits finished out of spawn order).
        let run = OpenLoopRun(count: count)
        let start = ContinuousClock.now
        let interval = Duration.seconds(1 / rate)
        var next = 0
        while next < count {
            let due = min(count, Int(start.duration(to: .now).seconds * rate) + 1)
            while next < due {
                let i = next
                let scheduled = start + interval * i
                let (id, epoch) = owned[i % owned.count]
                Task {
                    var random = SeededRandom(seed: seed &+ UInt64(i))
                    do {
                        let outcome = try await committer.append(AppendRequest(
                            conversationId: id, epoch: epoch, senderId: "u_a",
                            clientMessageId: randomIds ? UUID().uuidString.lowercased() : ClientMessageID.make(now: Date(), using: &random),
                            text: "benchmark message \(i)", sentAt: Date()))
                        guard case .appended = outcome else { throw ValidationError("append \(i): \(outcome)") }
                        run.finished(latency: scheduled.duration(to: .now), window: Int(Double(i) / rate * 10))
                    } catch {
                        run.failed(error)
                    }
                }
                next += 1
            }
            try await Task.sleep(for: .microseconds(tickMicros))
        }
        let perWindow = try await run.result()
        let windows = perWindow.keys.sorted().map { (start: Double($0) / 10, p99: perWindow[$0]?.percentile(99) ?? .zero) }
        if let worst = windows.max(by: { $0.p99 < $1.p99 }) {
            let slow = windows.filter { $0.p99 > .milliseconds(10) }
            print("per 100 ms of the schedule: p99 over 10 ms in \(slow.count) of \(windows.count)"
                + (slow.isEmpty ? "" : " (from " + slow.prefix(40).map { String(format: "%.1f", $0.start) }.joined(separator: " ") + (slow.count > 40 ? " …" : "") + " s)")
                + String(format: "; the worst from %.1f s: p99 ", worst.start) + Latencies.format(worst.p99))
        }
        return perWindow.values.reduce(into: Latencies()) { $0.merge($1) }
    }

    /// `inFlight` tasks append `count` messages in total, spread round-robin over the conversations.
    private func drive(_ committer: GroupCommitter, _ owned: [(ConversationID, Int64)], count: Int, seed: UInt64) async throws -> Latencies {
        try await withThrowingTaskGroup(of: Latencies.self) { group in
            for worker in 0..<inFlight {
                group.addTask {
                    var latencies = Latencies()
                    var random = SeededRandom(seed: seed &+ UInt64(worker))
                    var i = worker
                    while i < count {
                        let (id, epoch) = owned[i % owned.count]
                        let started = ContinuousClock.now
                        let outcome = try await committer.append(AppendRequest(
                            conversationId: id, epoch: epoch, senderId: "u_a",
                            clientMessageId: randomIds ? UUID().uuidString.lowercased() : ClientMessageID.make(now: Date(), using: &random),
                            text: "benchmark message \(i)", sentAt: Date()))
                        guard case .appended = outcome else { throw ValidationError("append \(i): \(outcome)") }
                        latencies.record(started.duration(to: .now))
                        i += inFlight
                    }
                    return latencies
                }
            }
            return try await group.reduce(into: Latencies()) { $0.merge($1) }
        }
    }
}

/// The appends of an open-loop run, finishing on their own tasks: their latencies (by the tenth
/// of a second of the schedule each append was due in), the first failure, and the moment the
/// last one is done.
final class OpenLoopRun: Sendable {
    private struct State {
        var perWindow: [Int: Latencies] = [:]
        var remaining: Int
        var failure: (any Error)?
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state: Mutex<State>

    init(count: Int) { state = Mutex(State(remaining: count)) }

    func finished(latency: Duration, window: Int) {
        done { $0.perWindow[window, default: Latencies()].record(latency) }
    }

    func failed(_ error: any Error) { done { $0.failure = $0.failure ?? error } }

    private func done(_ record: (inout State) -> Void) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            record(&state)
            state.remaining -= 1
            guard state.remaining == 0 else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Waits for every append; throws the first failure. The latencies come by tenth of a second
    /// of the schedule (whether a tail is one stall, spread out, or periodic).
    func result() async throws -> [Int: Latencies] {
        await withCheckedContinuation { continuation in
            let finishedAlready = state.withLock { state -> Bool in
                guard state.remaining > 0 else { return true }
                state.waiter = continuation
                return false
            }
            if finishedAlready { continuation.resume() }
        }
        return try state.withLock { state in
            if let failure = state.failure { throw failure }
            return state.perWindow
        }
    }
}

/// Raw store commits of fixed-size batches, without the group committer: where the time goes.
struct StoreRaw: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "store-raw", abstract: "Time store.commit on fixed batches.")
    @Option var batch = 512
    @Option var batches = 100
    @Option var conversations = 1000
    @Option var cacheKiB = 65_536
    @Option var mmapBytes = 256 << 20
    @Option var checkpointPages = 1000
    @Option var pageSize = 4096
    @Flag(help: "Random (version 4) client message IDs instead of time-ordered ones.")
    var randomIds = false
    @Option(help: "Background checkpoint interval in ms (0: SQLite's automatic checkpoints instead).")
    var backgroundCheckpointMs = 50

    func run() async throws {
        let path = "/tmp/parley-raw-\(UUID().uuidString).sqlite"
        defer { removeSQLiteFiles(path) }
        var settings = SQLiteChatStore.Settings()
        settings.cacheKiB = cacheKiB
        settings.mmapBytes = mmapBytes
        settings.walAutocheckpointPages = checkpointPages
        settings.pageSize = pageSize
        settings.backgroundCheckpoint = backgroundCheckpointMs > 0 ? .milliseconds(backgroundCheckpointMs) : nil
        let store = try SQLiteChatStore(path: path, settings: settings)
        try await store.migrate()
        let owned = try await ownedConversations(conversations, in: store)
        var latencies = Latencies()
        let started = ContinuousClock.now
        var random = SystemRandomNumberGenerator()
        for b in 0..<batches {
            let requests = (0..<batch).map { i in
                let (id, epoch) = owned[(b * batch + i) % owned.count]
                return AppendRequest(
                    conversationId: id, epoch: epoch, senderId: "u_a",
                    clientMessageId: randomIds ? UUID().uuidString.lowercased() : ClientMessageID.make(now: Date(), using: &random), text: "raw \(i)", sentAt: Date())
            }
            let t0 = ContinuousClock.now
            _ = try await store.commit(requests)
            latencies.record(t0.duration(to: .now))
        }
        let elapsed = started.duration(to: .now)
        let wal = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
        print("WAL at the end: \(wal >> 10) KiB")
        print(String(format: "raw commits: %d × %d in %.2f s = %.0f appends/s; per commit ", batches, batch, elapsed.seconds, Double(batch * batches) / elapsed.seconds) + latencies.summary())
    }
}

/// Reads of a conversation's history, after and before random seqs: what a resume's replay and a
/// client paging back cost.
struct StoreReads: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "store-reads", abstract: "Time reads of a conversation's messages.")
    @Option(help: "sqlite:PATH, postgres://USER@HOST:PORT/DB, or memory.")
    var store = "sqlite:/tmp/parley-reads-\(UUID().uuidString).sqlite"
    @Option(help: "Messages in the conversation read.")
    var messages = 20_000
    @Option(help: "Messages per read.")
    var limit = 50
    @Option(help: "Reads of each kind.")
    var reads = 5_000

    func run() async throws {
        guard messages > 0, limit > 0, reads > 0 else { throw ValidationError("--messages, --limit and --reads must be positive") }
        let (chatStore, path) = try openBenchmarkStore(store, sqlite: SQLiteChatStore.Settings())
        defer { removeSQLiteFiles(path) }
        try await chatStore.migrate()
        guard let (id, epoch) = try await ownedConversations(1, in: chatStore).first else { return }
        var random = SeededRandom(seed: 1)
        for start in stride(from: 0, to: messages, by: 500) {
            _ = try await chatStore.commit((start..<min(start + 500, messages)).map { i in
                AppendRequest(
                    conversationId: id, epoch: epoch, senderId: "u_a", clientMessageId: ClientMessageID.make(now: Date(), using: &random),
                    text: "message \(i) of the history", sentAt: Date())
            })
        }
        for kind in ["after", "before"] {
            var latencies = Latencies()
            for _ in 0..<reads {
                let seq = Int64(random.next() % UInt64(messages)) + 1
                let started = ContinuousClock.now
                let read = kind == "after"
                    ? try await chatStore.messages(in: id, after: seq, limit: limit) : try await chatStore.messages(in: id, before: seq, limit: limit)
                latencies.record(started.duration(to: .now))
                guard read.count == min(limit, kind == "after" ? messages - Int(seq) : Int(seq) - 1) else {
                    throw ValidationError("read \(kind) \(seq) returned \(read.count) messages")
                }
            }
            print("\(reads) reads of up to \(limit) messages \(kind) a random seq of \(messages): " + latencies.summary([50, 99]))
        }
    }
}

/// The store `--store` names (`sqlite:PATH`, `postgres://…` or `memory`), and the SQLite file's
/// path when it is one (the benchmark removes it afterwards: ``removeSQLiteFiles(_:)``).
func openBenchmarkStore(_ store: String, sqlite settings: SQLiteChatStore.Settings) throws -> (any ChatStore, path: String?) {
    if store == "memory" { return (InMemoryChatStore(), nil) }
    if store.hasPrefix("sqlite:") {
        let path = String(store.dropFirst("sqlite:".count))
        return (try SQLiteChatStore(path: path, settings: settings), path)
    }
    if store.hasPrefix("postgres://") { return (try PostgresChatStore(url: store), nil) }
    throw ValidationError("--store must be sqlite:PATH, postgres://… or memory")
}

/// Removes a benchmark's SQLite file with its WAL and shared-memory files.
func removeSQLiteFiles(_ path: String?) {
    guard let path else { return }
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
}

/// `count` new direct conversations of u_a and u_b, each with the epoch of its ownership (the
/// benchmark is their owner).
func ownedConversations(_ count: Int, in store: any ChatStore) async throws -> [(ConversationID, Int64)] {
    var owned: [(ConversationID, Int64)] = []
    for _ in 0..<count {
        let id = ConversationID.make()
        try await store.createConversation(ConversationRecord(
            id: id, kind: .direct, name: nil, ownerId: "u_a", createdAt: Date(),
            members: [ConversationMember(userId: "u_a", role: .member), ConversationMember(userId: "u_b", role: .member)]))
        owned.append((id, try await store.acquireOwnership(of: id)))
    }
    return owned
}

struct SeedAccount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "seed-account",
        abstract: "Write a user's history straight into a store: groups with one other member, and messages the user sent in them.",
        discussion: "For Scripts/bench-export: the nodes on the store must be stopped while this runs. The users must exist (register them through the API first).")
    @Option(help: "sqlite:PATH or postgres://USER@HOST:PORT/DB.")
    var store: String
    @Option(help: "The user whose history it is (an ID, u_…).")
    var user: String
    @Option(help: "The other member of every group (an ID, u_…).")
    var peer: String
    @Option(help: "Groups to make.")
    var conversations = 5_000
    @Option(help: "Messages the user sends, spread evenly over the groups.")
    var messages = 100_000

    func run() async throws {
        guard conversations > 0, messages >= 0 else { throw ValidationError("--conversations must be positive, --messages not negative") }
        let (chatStore, _) = try openBenchmarkStore(store, sqlite: SQLiteChatStore.Settings())
        try await chatStore.migrate()
        let me = UserID(rawValue: user), other = UserID(rawValue: peer)
        // An hour ago: older than any owner's recovery window, so activating the groups later
        // republishes nothing.
        let sentAt = Date().addingTimeInterval(-3600)
        var owned: [(ConversationID, Int64)] = []
        for index in 0..<conversations {
            let id = ConversationID.make()
            try await chatStore.createConversation(ConversationRecord(
                id: id, kind: .group, name: "history \(index)", ownerId: me, createdAt: sentAt,
                members: [ConversationMember(userId: me, role: .owner), ConversationMember(userId: other, role: .member)]))
            owned.append((id, try await chatStore.acquireOwnership(of: id)))
        }
        var random = SeededRandom(seed: 7)
        let started = ContinuousClock.now
        for start in stride(from: 0, to: messages, by: 500) {
            _ = try await chatStore.commit((start..<min(start + 500, messages)).map { i in
                let (id, epoch) = owned[i % owned.count]
                return AppendRequest(
                    conversationId: id, epoch: epoch, senderId: me, clientMessageId: ClientMessageID.make(now: sentAt, using: &random),
                    text: "message \(i) of the user's history, long enough to look like a real one", sentAt: sentAt)
            })
        }
        print("seeded \(conversations) groups and \(messages) messages in \(DurationText.format(started.duration(to: .now)))")
    }
}
