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

    private let commitBatch: Commit
    private let machine: Mutex<GroupCommitStateMachine<Entry, ConversationID>>

    public convenience init(store: any ChatStore, maxBatch: Int = 512, maxWait: Duration = .zero, maxConcurrentCommits: Int? = nil) {
        self.init(maxBatch: maxBatch, maxWait: maxWait, maxConcurrentCommits: maxConcurrentCommits ?? store.concurrentCommits) {
            try await store.commit($0)
        }
    }

    public init(maxBatch: Int = 512, maxWait: Duration = .zero, maxConcurrentCommits: Int = 1, commit: @escaping Commit) {
        self.commitBatch = commit
        self.machine = Mutex(GroupCommitStateMachine(maxBatch: maxBatch, maxWait: maxWait, maxConcurrentCommits: maxConcurrentCommits))
    }

    /// Appends one message; returns when its batch is committed (or failed).
    public func append(_ request: AppendRequest) async throws(ChatStoreError) -> AppendOutcome {
        let slot = OneShot<Result<AppendOutcome, ChatStoreError>>()
        perform(machine.withLock { $0.enqueue(Entry(request: request, slot: slot), key: request.conversationId) })
        return try await slot.wait().get()
    }

    private func perform(_ action: GroupCommitStateMachine<Entry, ConversationID>.Action) {
        switch action {
        case .none:
            break
        case .armTimer:
            let wait = machine.withLock { $0.maxWait }
            Task {
                try? await Task.sleep(for: wait)
                perform(machine.withLock { $0.timerFired() })
            }
        case .commit(let batches):
            for batch in batches {
                Task {
                    let results = await commit(batch.items)
                    // The next commit starts before these appends are answered: the store is not
                    // idle while hundreds of callers are resumed (what they are told is durable
                    // already, and later commits of their conversations wait for this one anyway).
                    perform(machine.withLock { $0.commitFinished(batch.id) })
                    for (entry, result) in zip(batch.items, results) { entry.slot.complete(result) }
                }
            }
        }
    }

    /// Commits `batch`; the result of each append, in order.
    private func commit(_ batch: [Entry]) async -> [Result<AppendOutcome, ChatStoreError>] {
        let started = ContinuousClock.now
        defer { Self.commitLatency.recordNanoseconds(started.duration(to: .now).nanoseconds) }
        Self.batchSizes.record(batch.count)
        do {
            let outcomes = try await commitBatch(batch.map(\.request))
            guard outcomes.count == batch.count else {
                let error = ChatStoreError(.unavailable, "the store answered \(outcomes.count) outcomes for \(batch.count) appends")
                return Array(repeating: .failure(error), count: batch.count)
            }
            Self.appended.increment(by: outcomes.count { if case .appended = $0 { true } else { false } })
            return outcomes.map { .success($0) }
        } catch {
            let failure = error as? ChatStoreError ?? ChatStoreError(.unavailable, "commit failed: \(error)")
            return Array(repeating: .failure(failure), count: batch.count)
        }
    }

    static let batchSizes = Recorder(label: "parley.store.commit_batch_size")
    static let commitLatency = Metrics.Timer(label: "parley.store.commit_latency")
    static let appended = Counter(label: "parley.messages.appended")
}
