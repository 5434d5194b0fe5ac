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
                    await commit(batch.items)
                    perform(machine.withLock { $0.commitFinished(batch.id) })
                }
            }
        }
    }

    private func commit(_ batch: [Entry]) async {
        let started = ContinuousClock.now
        Self.batchSizes.record(batch.count)
        do {
            let outcomes = try await commitBatch(batch.map(\.request))
            guard outcomes.count == batch.count else {
                let error = ChatStoreError(.unavailable, "the store answered \(outcomes.count) outcomes for \(batch.count) appends")
                for entry in batch { entry.slot.complete(.failure(error)) }
                return
            }
            for (entry, outcome) in zip(batch, outcomes) { entry.slot.complete(.success(outcome)) }
            Self.appended.increment(by: outcomes.count { if case .appended = $0 { true } else { false } })
        } catch {
            let failure = error as? ChatStoreError ?? ChatStoreError(.unavailable, "commit failed: \(error)")
            for entry in batch { entry.slot.complete(.failure(failure)) }
        }
        Self.commitLatency.recordNanoseconds(started.duration(to: .now).nanoseconds)
    }

    static let batchSizes = Recorder(label: "parley.store.commit_batch_size")
    static let commitLatency = Metrics.Timer(label: "parley.store.commit_latency")
    static let appended = Counter(label: "parley.messages.appended")
}
