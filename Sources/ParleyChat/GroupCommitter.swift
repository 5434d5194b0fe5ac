import Dispatch
import Foundation
import Metrics
import ParleyCluster
import ParleyModel
import ParleyStore
import Synchronization

/// The node's group commit: appends from every conversation of this node are batched into one
/// store transaction, and each is acknowledged only after that transaction committed. Up to the
/// store's ``ChatStore/concurrentCommits`` transactions run at once, never two holding the same
/// conversation. The shell around ``GroupCommitStateMachine``.
public final class GroupCommitter: Sendable {
    struct Entry: Sendable {
        var request: AppendRequest
        var slot: OneShot<Result<AppendOutcome, ChatStoreError>>
    }

    /// Commits one batch in one transaction (``ChatStore/commit(_:)``).
    public typealias Commit = @Sendable ([AppendRequest]) async throws -> [AppendOutcome]

    /// How commits run: a task each, or one after another on a thread of the committer's.
    private enum Committing: Sendable {
        case tasks(Commit)
        case thread(CommitThread)
    }

    private let committing: Committing
    private let machine: Mutex<GroupCommitStateMachine<Entry, ConversationID>>
    /// The time of the commit interval's timer.
    private let clock: any ClusterClock

    /// A store with one writer that blocks its thread (``ChatStore/blockingCommit``) commits on a
    /// thread of its own; any other through tasks.
    public convenience init(
        store: any ChatStore, maxBatch: Int = 512, minInterval: Duration = .zero, maxConcurrentCommits: Int? = nil, clock: any ClusterClock
    ) {
        let concurrent = maxConcurrentCommits ?? store.concurrentCommits
        if concurrent == 1, let blockingCommit = store.blockingCommit {
            self.init(maxBatch: maxBatch, minInterval: minInterval, clock: clock, blockingCommit: blockingCommit)
        } else {
            self.init(maxBatch: maxBatch, minInterval: minInterval, maxConcurrentCommits: concurrent, clock: clock) {
                try await store.commit($0)
            }
        }
    }

    /// Commits run as tasks, up to `maxConcurrentCommits` at once.
    public init(
        maxBatch: Int = 512, minInterval: Duration = .zero, maxConcurrentCommits: Int = 1, clock: any ClusterClock,
        commit: @escaping Commit
    ) {
        self.clock = clock
        self.committing = .tasks(commit)
        self.machine = Mutex(GroupCommitStateMachine(maxBatch: maxBatch, minInterval: minInterval, maxConcurrentCommits: maxConcurrentCommits))
    }

    /// Commits run one after another on a thread of this committer's: each starts as soon as the
    /// last one ended and `minInterval` allows, on the thread that ran it (no task per commit, no
    /// hop between commits); the thread also keeps the interval's timer, on `clock`. The thread
    /// ends when the committer goes.
    public init(maxBatch: Int = 512, minInterval: Duration = .zero, clock: any ClusterClock, blockingCommit: @escaping BlockingCommit) {
        let thread = CommitThread(commit: blockingCommit, clock: clock)
        self.clock = clock
        self.committing = .thread(thread)
        self.machine = Mutex(GroupCommitStateMachine(maxBatch: maxBatch, minInterval: minInterval, maxConcurrentCommits: 1))
        thread.start(self)
    }

    deinit {
        if case .thread(let thread) = committing { thread.stop() }
    }

    /// Appends waiting for a commit (not those in one).
    public var pendingCount: Int { machine.withLock { $0.pendingCount } }

    /// Appends one message; returns when its batch is committed (or failed).
    public func append(_ request: AppendRequest) async throws(ChatStoreError) -> AppendOutcome {
        let slot = OneShot<Result<AppendOutcome, ChatStoreError>>()
        perform(machine.withLock { $0.enqueue(Entry(request: request, slot: slot), key: request.conversationId, now: clock.now) })
        return try await slot.wait().get()
    }

    private func perform(_ action: GroupCommitStateMachine<Entry, ConversationID>.Action) {
        switch action {
        case .none:
            break
        case .armTimer(let deadline):
            switch committing {
            case .thread(let thread):
                thread.arm(at: deadline)
            case .tasks:
                Task {
                    try? await clock.sleep(until: deadline)
                    perform(machine.withLock { $0.timerFired(now: clock.now) })
                }
            }
        case .commit(let batches):
            switch committing {
            case .thread(let thread):
                thread.submit(batches)
            case .tasks(let commitBatch):
                for batch in batches {
                    Task {
                        let results = await commit(batch.items, through: commitBatch)
                        // The next commit starts before these appends are answered: the store is
                        // not idle while hundreds of callers are resumed (what they are told is
                        // durable already, and later commits of their conversations wait for this
                        // one anyway).
                        perform(machine.withLock { $0.commitFinished(batch.id, now: clock.now) })
                        for (entry, result) in zip(batch.items, results) { entry.slot.complete(result) }
                    }
                }
            }
        }
    }

    /// Commits `batch`; the result of each append, in order.
    private func commit(_ batch: [Entry], through commitBatch: Commit) async -> [Result<AppendOutcome, ChatStoreError>] {
        let started = clock.now
        let outcomes: Result<[AppendOutcome], any Error>
        do {
            outcomes = .success(try await commitBatch(batch.map(\.request)))
        } catch {
            outcomes = .failure(error)
        }
        return Self.results(of: outcomes, for: batch, took: started.duration(to: clock.now))
    }

    /// Commits `batch` on the commit thread; starts the next commit before it answers these
    /// appends, as the tasks do.
    fileprivate func commitOnThread(_ batch: GroupCommitStateMachine<Entry, ConversationID>.Batch, _ commit: BlockingCommit) {
        let started = clock.now
        let outcomes = Result { try commit(batch.items.map(\.request)) }
        let results = Self.results(of: outcomes, for: batch.items, took: started.duration(to: clock.now))
        perform(machine.withLock { $0.commitFinished(batch.id, now: clock.now) })
        for (entry, result) in zip(batch.items, results) { entry.slot.complete(result) }
    }

    /// The commit thread's timer went off: the appends that waited go now.
    fileprivate func timerFiredOnThread() {
        perform(machine.withLock { $0.timerFired(now: clock.now) })
    }

    /// What each append of a batch is told, in order; records the commit's metrics.
    private static func results(
        of outcomes: Result<[AppendOutcome], any Error>, for batch: [Entry], took: Duration
    ) -> [Result<AppendOutcome, ChatStoreError>] {
        commitLatency.recordNanoseconds(took.nanoseconds)
        batchSizes.record(batch.count)
        switch outcomes {
        case .success(let outcomes):
            guard outcomes.count == batch.count else {
                let error = ChatStoreError(.unavailable, "the store answered \(outcomes.count) outcomes for \(batch.count) appends")
                return Array(repeating: .failure(error), count: batch.count)
            }
            appended.increment(by: outcomes.count { if case .appended = $0 { true } else { false } })
            return outcomes.map { .success($0) }
        case .failure(let error):
            let failure = error as? ChatStoreError ?? ChatStoreError(.unavailable, "commit failed: \(error)")
            return Array(repeating: .failure(failure), count: batch.count)
        }
    }

    static let batchSizes = Recorder(label: "parley.store.commit_batch_size")
    static let commitLatency = Metrics.Timer(label: "parley.store.commit_latency")
    static let appended = Counter(label: "parley.messages.appended")
}

/// The thread a blocking store's commits run on: it commits the batches the state machine hands
/// out one after another and sleeps only when there is none. On the machine's clock it is an OS
/// thread; on any other clock (a simulation's) the same loop runs as a task that waits on that
/// clock, so that the production path is the one simulated.
private final class CommitThread: Sendable {
    typealias Batch = GroupCommitStateMachine<GroupCommitter.Entry, ConversationID>.Batch

    private struct State {
        var batches: [Batch] = []
        /// When the state machine's timer goes off (nil: not armed).
        var timer: ContinuousClock.Instant?
        var stopped = false
        /// Wake-ups signalled and not yet taken by the loop (a task loop's).
        var signals = 0
        /// The task loop waiting for a wake-up.
        var waiter: CheckedContinuation<Void, Never>?
        /// The deadline a task loop's timer task is armed for.
        var sleepingUntil: ContinuousClock.Instant?
    }

    private enum Step {
        case commit(Batch)
        case timerFired
        case sleep(until: ContinuousClock.Instant?)
        case stop
    }

    private let commit: BlockingCommit
    private let clock: any ClusterClock
    /// An OS thread on the machine's clock; a task on any other.
    private let onOSThread: Bool
    private let state = Mutex(State())
    private let wakeUp = DispatchSemaphore(value: 0)

    init(commit: @escaping BlockingCommit, clock: any ClusterClock) {
        self.commit = commit
        self.clock = clock
        self.onOSThread = clock is ContinuousClock
    }

    /// Holds `committer` weakly: the committer owns the thread, and going stops it.
    func start(_ committer: GroupCommitter) {
        guard onOSThread else {
            Task { [weak committer, self] in await runAsTask(committer) }
            return
        }
        let thread = Thread { [weak committer, self] in
            while true {
                switch step(committer) {
                case .ran:
                    continue
                case .wait(until: nil):
                    wakeUp.wait()
                case .wait(until: let deadline?):
                    let nanoseconds = clock.now.duration(to: deadline).nanoseconds
                    _ = wakeUp.wait(timeout: .now() + .nanoseconds(Int(max(nanoseconds, 0))))
                case .stop:
                    return
                }
            }
        }
        thread.name = "parley-group-commit"
        thread.start()
    }

    /// The thread's loop as a task on `clock`: a timer is a task asleep on the clock that
    /// signals when it wakes.
    private func runAsTask(_ committer: GroupCommitter?) async {
        weak var committer = committer
        while true {
            switch step(committer) {
            case .ran:
                continue
            case .wait(until: let deadline):
                let newTimer = deadline.map { deadline in
                    state.withLock { state in
                        defer { state.sleepingUntil = deadline }
                        return state.sleepingUntil != deadline
                    }
                } ?? false
                if newTimer, let deadline {
                    Task { [clock] in
                        try? await clock.sleep(until: deadline)
                        self.signal()
                    }
                }
                await waitForSignal()
            case .stop:
                return
            }
        }
    }

    private enum Progress {
        /// A commit or the timer ran: look again.
        case ran
        /// Nothing is due before this instant (nil: before a signal).
        case wait(until: ContinuousClock.Instant?)
        case stop
    }

    /// Runs what is due (a commit, the timer's firing), or says how long to wait.
    private func step(_ committer: GroupCommitter?) -> Progress {
        switch state.withLock({ Self.next(&$0, now: clock.now) }) {
        case .commit(let batch):
            guard let committer else { return .stop }
            committer.commitOnThread(batch, commit)
            return .ran
        case .timerFired:
            guard let committer else { return .stop }
            committer.timerFiredOnThread()
            return .ran
        case .sleep(until: let deadline):
            return .wait(until: deadline)
        case .stop:
            return .stop
        }
    }

    private func signal() {
        if onOSThread {
            wakeUp.signal()
            return
        }
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.signals += 1
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    private func waitForSignal() async {
        await withCheckedContinuation { continuation in
            let signalled = state.withLock { state -> Bool in
                guard state.signals == 0 else {
                    state.signals -= 1
                    return true
                }
                state.waiter = continuation
                return false
            }
            if signalled { continuation.resume() }
        }
    }

    func submit(_ batches: [Batch]) {
        state.withLock { $0.batches += batches }
        signal()
    }

    /// Calls the committer's ``GroupCommitter/timerFiredOnThread()`` at `deadline`, from this thread.
    func arm(at deadline: ContinuousClock.Instant) {
        state.withLock { $0.timer = deadline }
        signal()
    }

    func stop() {
        state.withLock { $0.stopped = true }
        signal()
    }

    private static func next(_ state: inout State, now: ContinuousClock.Instant) -> Step {
        if state.stopped { return .stop }
        if !state.batches.isEmpty { return .commit(state.batches.removeFirst()) }
        guard let timer = state.timer else { return .sleep(until: nil) }
        guard timer <= now else { return .sleep(until: timer) }
        state.timer = nil
        return .timerFired
    }
}
