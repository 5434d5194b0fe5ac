import Foundation
import ParleyChat
import ParleyModel
import ParleySimulation
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

@Suite struct GroupCommitStateMachineTests {
    typealias Machine = GroupCommitStateMachine<Int, String>
    /// The clock's reading for the steps where time does not matter.
    static let now = ContinuousClock.now

    static func batches(_ action: Machine.Action) -> [Machine.Batch] {
        if case .commit(let batches) = action { return batches }
        return []
    }

    /// The one batch an action starts (nil when it starts none; a failure when it starts several).
    static func batch(_ action: Machine.Action) -> Machine.Batch? {
        let batches = batches(action)
        #expect(batches.count <= 1, "one batch expected, got \(batches.map(\.items))")
        return batches.first
    }

    @Test func idleAppendsGoAtOnceAndAppendsDuringACommitGoTogetherNext() throws {
        var machine = Machine(maxBatch: 100, minInterval: .zero)
        let first = try #require(Self.batch(machine.enqueue(1, key: "a", now: Self.now)))
        #expect(first.items == [1])
        for i in 2...5 { #expect(Self.batch(machine.enqueue(i, key: "k\(i)", now: Self.now)) == nil, "a commit is running: \(i) waits") }
        let second = try #require(Self.batch(machine.commitFinished(first.id, now: Self.now)))
        #expect(second.items == [2, 3, 4, 5])
        #expect(Self.batch(machine.commitFinished(second.id, now: Self.now)) == nil)
        #expect(!machine.isCommitting)
    }

    @Test func commitsStartAtLeastTheIntervalApartAndAFullBatchGoesAtOnce() throws {
        let interval = Duration.milliseconds(3)
        let start = ContinuousClock.now
        var machine = Machine(maxBatch: 3, minInterval: interval)
        let first = try #require(Self.batch(machine.enqueue(1, key: "a", now: start)), "the first append goes at once")
        #expect(Self.batch(machine.commitFinished(first.id, now: start + .microseconds(200))) == nil)
        // 1 ms after the first commit began: wait until 3 ms, with whatever else comes.
        guard case .armTimer(let deadline) = machine.enqueue(2, key: "a", now: start + .milliseconds(1)) else {
            Issue.record("an append sooner than the interval after the last commit's start arms the timer")
            return
        }
        #expect(deadline == start + interval)
        #expect(Self.batch(machine.enqueue(3, key: "b", now: start + .milliseconds(2))) == nil, "the timer is armed once")
        let together = try #require(Self.batch(machine.timerFired(now: deadline)))
        #expect(together.items == [2, 3])
        #expect(Self.batch(machine.commitFinished(together.id, now: deadline + .microseconds(200))) == nil)
        // Long after: at once.
        let later = start + .milliseconds(50)
        let alone = try #require(Self.batch(machine.enqueue(4, key: "a", now: later)), "an append after the interval goes at once")
        #expect(alone.items == [4])
        // Behind a commit that ends before the interval is over: the next starts at the interval.
        _ = machine.enqueue(5, key: "b", now: later + .microseconds(100))
        guard case .armTimer(let next) = machine.commitFinished(alone.id, now: later + .microseconds(300)) else {
            Issue.record("what waited behind a short commit waits for the interval")
            return
        }
        #expect(next == later + interval)
        // A full batch does not wait.
        _ = machine.enqueue(6, key: "c", now: later + .milliseconds(1))
        let full = try #require(Self.batch(machine.enqueue(7, key: "c", now: later + .milliseconds(1))))
        #expect(full.items == [5, 6, 7], "a full batch goes before the timer")
        #expect(Self.batch(machine.timerFired(now: next)) == nil, "nothing left, and a commit is running")
    }

    @Test func batchesNeverExceedTheMaximum() throws {
        var machine = Machine(maxBatch: 2, minInterval: .zero)
        var running = try #require(Self.batch(machine.enqueue(0, key: "a", now: Self.now)))
        for i in 1...5 { _ = machine.enqueue(i, key: "a", now: Self.now) }
        for expected in [[1, 2], [3, 4], [5]] {
            running = try #require(Self.batch(machine.commitFinished(running.id, now: Self.now)))
            #expect(running.items == expected)
        }
    }

    @Test func commitsOfDifferentKeysOverlapAndAKeyWaitsForItsRunningCommit() throws {
        var machine = Machine(maxBatch: 100, minInterval: .zero, maxConcurrentCommits: 2)
        let a = try #require(Self.batch(machine.enqueue(1, key: "a", now: Self.now)))
        let b = try #require(Self.batch(machine.enqueue(2, key: "b", now: Self.now)), "a second slot is free: b goes at once")
        #expect(machine.commitsRunning == 2)
        #expect(Self.batch(machine.enqueue(3, key: "c", now: Self.now)) == nil, "both slots are taken")
        _ = machine.enqueue(4, key: "a", now: Self.now)
        _ = machine.enqueue(5, key: "c", now: Self.now)
        // b finishes: a is still committing, so 4 waits; c's items go, in order.
        let c = try #require(Self.batch(machine.commitFinished(b.id, now: Self.now)))
        #expect(c.items == [3, 5])
        #expect(machine.pending(for: "a") == [4] && machine.pendingCount == 1)
        let a2 = try #require(Self.batch(machine.commitFinished(a.id, now: Self.now)))
        #expect(a2.items == [4])
        #expect(Self.batch(machine.commitFinished(c.id, now: Self.now)) == nil)
        #expect(Self.batch(machine.commitFinished(a2.id, now: Self.now)) == nil)
        #expect(!machine.isCommitting)
    }

    /// Random interleavings of appends and finishing commits: at most `maxConcurrentCommits`
    /// commits run, none larger than `maxBatch`, no key in two running commits, and each key's
    /// items are committed exactly once, in the order they came.
    @Test(arguments: [1, 2, 4]) func randomInterleavingsKeepEveryKeysOrder(concurrency: Int) {
        var generator = SeededRandom(seed: UInt64(concurrency) * 7919)
        for round in 0..<200 {
            var machine = Machine(maxBatch: 1 + Int(generator.next() % 5), minInterval: .zero, maxConcurrentCommits: concurrency)
            var running: [Int: (keys: Set<String>, items: [Int])] = [:]
            var committed: [String: [Int]] = [:]
            var sent: [String: [Int]] = [:]
            var nextItem = 0
            func start(_ action: Machine.Action) {
                for batch in Self.batches(action) {
                    let keys = Set(batch.items.map { "k\($0 % 3)" })
                    #expect(batch.items.count <= machine.maxBatch)
                    for other in running.values { #expect(other.keys.isDisjoint(with: keys), "round \(round): a key in two running commits") }
                    running[batch.id] = (keys, batch.items)
                    for item in batch.items { committed["k\(item % 3)", default: []].append(item) }
                }
                #expect(running.count <= concurrency)
            }
            for _ in 0..<60 {
                if generator.next() % 3 != 0 || running.isEmpty {
                    let key = "k\(nextItem % 3)"
                    sent[key, default: []].append(nextItem)
                    start(machine.enqueue(nextItem, key: key, now: Self.now))
                    nextItem += 1
                } else {
                    let ids = running.keys.sorted()
                    let id = ids[Int(generator.next() % UInt64(ids.count))]
                    running[id] = nil
                    start(machine.commitFinished(id, now: Self.now))
                }
            }
            while let id = running.keys.min() {
                running[id] = nil
                start(machine.commitFinished(id, now: Self.now))
            }
            #expect(machine.pendingCount == 0)
            #expect(committed == sent, "round \(round): every item once, in order, per key")
        }
    }
}

/// The in-memory store behind a commit that records each batch's size and can be slowed or failed.
final class RecordingStore: Sendable {
    let inner = InMemoryChatStore()
    let commitSizes = Mutex<[Int]>([])
    let delay: Duration
    let failing = Mutex(false)
    /// Commits running now, and the most that ever ran at once.
    let running = Mutex((now: 0, most: 0))

    init(delay: Duration) { self.delay = delay }

    func commit(_ appends: [AppendRequest]) async throws -> [AppendOutcome] {
        commitSizes.withLock { $0.append(appends.count) }
        running.withLock { $0.now += 1; $0.most = max($0.most, $0.now) }
        defer { running.withLock { $0.now -= 1 } }
        try await Task.sleep(for: delay)
        if failing.withLock({ $0 }) { throw ChatStoreError(.unavailable, "disk on fire") }
        return try await inner.commit(appends)
    }

    /// ``commit(_:)`` on the calling thread, as a blocking store (SQLite) commits.
    func blockingCommit(_ appends: [AppendRequest]) throws -> [AppendOutcome] {
        let result = Mutex<Result<[AppendOutcome], any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            do {
                let outcomes = try await commit(appends)
                result.withLock { $0 = .success(outcomes) }
            } catch {
                result.withLock { $0 = .failure(error) }
            }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0 }?.get() ?? []
    }

    func committer(concurrentCommits: Int = 1, minInterval: Duration = .zero) -> GroupCommitter {
        GroupCommitter(minInterval: minInterval, maxConcurrentCommits: concurrentCommits, clock: ContinuousClock()) { try await self.commit($0) }
    }

    /// Commits on the committer's own thread, through ``blockingCommit(_:)``.
    func threadCommitter(minInterval: Duration = .zero) -> GroupCommitter {
        GroupCommitter(minInterval: minInterval, clock: ContinuousClock()) { try self.blockingCommit($0) }
    }

    func committer(_ mode: CommitMode, minInterval: Duration = .zero) -> GroupCommitter {
        mode == .tasks ? committer(minInterval: minInterval) : threadCommitter(minInterval: minInterval)
    }
}

/// How a group commit runs its commits: as tasks, or on a thread of its own (a blocking store).
enum CommitMode: CaseIterable, Sendable { case tasks, thread }

@Suite struct GroupCommitterTests {
    static func setUp(conversations: Int, store: RecordingStore) async throws -> [(ConversationID, Int64)] {
        var owned: [(ConversationID, Int64)] = []
        for _ in 0..<conversations {
            let id = ConversationID.make()
            try await store.inner.createConversation(ConversationRecord(
                id: id, kind: .direct, name: nil, ownerId: "u_a", createdAt: Date(),
                members: [ConversationMember(userId: "u_a", role: .owner), ConversationMember(userId: "u_b", role: .member)]))
            owned.append((id, try await store.inner.acquireOwnership(of: id)))
        }
        return owned
    }

    @Test(arguments: CommitMode.allCases) func concurrentAppendsFromManyConversationsShareCommits(mode: CommitMode) async throws {
        let store = RecordingStore(delay: .milliseconds(5))
        let committer = store.committer(mode)
        let owned = try await Self.setUp(conversations: 20, store: store)
        let outcomes = try await withThrowingTaskGroup(of: AppendOutcome.self) { group in
            for i in 0..<200 {
                let (id, epoch) = owned[i % owned.count]
                group.addTask {
                    try await committer.append(AppendRequest(
                        conversationId: id, epoch: epoch, senderId: "u_a", clientMessageId: UUID().uuidString.lowercased(), text: "m\(i)", sentAt: Date()))
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(outcomes.allSatisfy { if case .appended = $0 { true } else { false } })
        let sizes = store.commitSizes.withLock { $0 }
        #expect(sizes.reduce(0, +) == 200)
        #expect(sizes.count < 200, "appends waiting on a running commit go together: \(sizes)")
        #expect(sizes.max() ?? 0 > 1)
        for (id, _) in owned {
            #expect(try await store.inner.messages(in: id, after: 0, limit: 100).map(\.seq) == Array(1...10))
        }
    }

    /// The committer's timer, in both modes: appends that waited behind a commit go together, not
    /// before the interval since that commit began. The first commit is held open until the others
    /// are queued, so how fast this machine runs the test changes nothing but how long it takes.
    @Test(arguments: CommitMode.allCases)
    func appendsBehindACommitGoTogetherOnceTheIntervalSinceItBeganIsOver(mode: CommitMode) async throws {
        let interval = Duration.seconds(2)
        let store = RecordingStore(delay: .zero)
        let open = Mutex(false)
        let entered = Mutex(0)
        let committer: GroupCommitter = switch mode {
        case .tasks:
            GroupCommitter(minInterval: interval, clock: ContinuousClock()) { appends in
                entered.withLock { $0 += 1 }
                while !open.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(1)) }
                return try await store.commit(appends)
            }
        case .thread:
            GroupCommitter(minInterval: interval, clock: ContinuousClock()) { appends in
                entered.withLock { $0 += 1 }
                while !open.withLock({ $0 }) { usleep(1_000) }
                return try store.blockingCommit(appends)
            }
        }
        let owned = try await Self.setUp(conversations: 3, store: store)
        func append(_ index: Int) -> Task<AppendOutcome, any Error> {
            let (id, epoch) = owned[index]
            return Task {
                try await committer.append(AppendRequest(
                    conversationId: id, epoch: epoch, senderId: "u_a", clientMessageId: UUID().uuidString.lowercased(), text: "m", sentAt: Date()))
            }
        }
        /// Polls `condition` for at most 30 s (a timer that never goes off, or a commit that never
        /// starts, fails the test instead of hanging it); whether it came true.
        func eventually(_ condition: () -> Bool) async throws -> Bool {
            let deadline = ContinuousClock.now + .seconds(30)
            while !condition() {
                guard ContinuousClock.now < deadline else { return false }
                try await Task.sleep(for: .milliseconds(1))
            }
            return true
        }
        // Whatever happens below, the held commit is let go at the end (no commit left spinning).
        defer { open.withLock { $0 = true } }
        let firstStarted = ContinuousClock.now
        let first = append(0)
        try #require(try await eventually { entered.withLock { $0 } == 1 }, "the first append's commit started")
        let three = (0..<3).map(append)
        try #require(try await eventually { committer.pendingCount == 3 }, "three appends queued behind it")
        open.withLock { $0 = true }
        _ = try await eventually { store.commitSizes.withLock { $0.reduce(0, +) } == 4 }
        #expect(store.commitSizes.withLock { $0 } == [1, 3], "the three that queued behind the first commit went in one")
        #expect(firstStarted.duration(to: .now) >= interval, "not before the interval since the first commit began")
        guard store.commitSizes.withLock({ $0 }) == [1, 3] else { return }
        #expect(try await first.value.message?.seq == 1)
        var seqs: [Int64?] = []
        for task in three { seqs.append(try await task.value.message?.seq) }
        #expect(seqs == [2, 1, 1])
    }

    /// On a clock other than the machine's (a simulation's), a blocking store's commits take the
    /// same path with a task in the thread's place, and the interval's timer waits on that clock:
    /// an interval of an hour ends when the clock is moved an hour, not before.
    @Test func aCommitThreadOnAnotherClockWaitsOnThatClock() async throws {
        let clock = SteppedClock()
        let store = RecordingStore(delay: .zero)
        let committer = GroupCommitter(minInterval: .seconds(3600), clock: clock) { try store.blockingCommit($0) }
        let owned = try await Self.setUp(conversations: 1, store: store)
        func append() -> Task<AppendOutcome, any Error> {
            Task {
                try await committer.append(AppendRequest(
                    conversationId: owned[0].0, epoch: owned[0].1, senderId: "u_a", clientMessageId: UUID().uuidString.lowercased(), text: "m",
                    sentAt: clock.wallNow))
            }
        }
        #expect(try await append().value.message?.seq == 1, "the first append goes at once")
        let second = append()
        let deadline = ContinuousClock.now + .seconds(30)
        while committer.pendingCount == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
        #expect(committer.pendingCount == 1, "the second waits for the interval")
        clock.advance(by: .seconds(3599))
        try await Task.sleep(for: .milliseconds(50))
        #expect(store.commitSizes.withLock { $0 } == [1], "not before the interval on the committer's clock")
        clock.advance(by: .seconds(1))
        #expect(try await second.value.message?.seq == 2)
        #expect(store.commitSizes.withLock { $0 } == [1, 1])
    }

    @Test func concurrentCommitsOverlapAndEveryConversationStaysGapless() async throws {
        let store = RecordingStore(delay: .milliseconds(5))
        let committer = store.committer(concurrentCommits: 3)
        let owned = try await Self.setUp(conversations: 30, store: store)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<300 {
                let (id, epoch) = owned[i % owned.count]
                group.addTask {
                    let outcome = try await committer.append(AppendRequest(
                        conversationId: id, epoch: epoch, senderId: "u_a", clientMessageId: UUID().uuidString.lowercased(), text: "m\(i)", sentAt: Date()))
                    #expect(outcome.message != nil)
                }
            }
            try await group.waitForAll()
        }
        #expect(store.running.withLock { $0.most } > 1, "commits of different conversations overlap")
        #expect(store.running.withLock { $0.most } <= 3)
        for (id, _) in owned {
            #expect(try await store.inner.messages(in: id, after: 0, limit: 100).map(\.seq) == Array(1...10))
        }
    }

    @Test(arguments: CommitMode.allCases) func aFailedCommitFailsEveryAppendInItAndTheNextOneWorks(mode: CommitMode) async throws {
        let store = RecordingStore(delay: .milliseconds(1))
        let committer = store.committer(mode)
        let (id, epoch) = try await Self.setUp(conversations: 1, store: store)[0]
        let request = AppendRequest(conversationId: id, epoch: epoch, senderId: "u_a", clientMessageId: UUID().uuidString, text: "x", sentAt: Date())
        store.failing.withLock { $0 = true }
        await #expect(throws: ChatStoreError(.unavailable, "disk on fire")) { try await committer.append(request) }
        store.failing.withLock { $0 = false }
        #expect(try await committer.append(request).message?.seq == 1)
    }

    @Test func theCommitThreadCommitsOneBatchAtATimeAndEndsWithItsCommitter() async throws {
        let store = RecordingStore(delay: .milliseconds(2))
        var committer: GroupCommitter? = store.threadCommitter()
        let owned = try await Self.setUp(conversations: 5, store: store)
        try await withThrowingTaskGroup(of: Void.self) { [committer] group in
            for i in 0..<100 {
                let (id, epoch) = owned[i % owned.count]
                group.addTask {
                    let outcome = try await committer?.append(AppendRequest(
                        conversationId: id, epoch: epoch, senderId: "u_a", clientMessageId: UUID().uuidString.lowercased(), text: "m\(i)", sentAt: Date()))
                    #expect(outcome?.message != nil)
                }
            }
            try await group.waitForAll()
        }
        #expect(store.running.withLock { $0.most } == 1, "one writer: never two commits at once")
        #expect(store.commitSizes.withLock { $0.count } < 100, "appends waiting on a running commit go together")
        for (id, _) in owned {
            #expect(try await store.inner.messages(in: id, after: 0, limit: 100).map(\.seq) == Array(1...20))
        }
        weak let gone = committer
        committer = nil
        #expect(gone == nil, "the commit thread holds its committer weakly, so the committer (and the thread) can go")
    }
}
