/// When to commit a batch of appends: the pure core of the node's group commit.
///
/// Up to `maxConcurrentCommits` commits run at once (one for a store with a single writer). While
/// they run, new appends queue up and go together in the next commit as soon as one finishes, so
/// batches grow with load by themselves. When idle, an append waits at most `maxWait` for company
/// (zero: it goes at once), and a batch never exceeds `maxBatch`.
///
/// Every item has a key (its conversation). A key is in at most one running commit: an item whose
/// key is being committed waits for that commit to finish, and so does every later item with that
/// key. So commits of one key happen one after another, in the order the items came — which is
/// what keeps a conversation's seqs in the order its sends arrived — while commits of different
/// keys overlap.
public struct GroupCommitStateMachine<Item: Sendable, Key: Hashable & Sendable>: Sendable {
    /// Items committed together, in the order they came.
    public struct Batch: Sendable {
        /// Pass it back to ``GroupCommitStateMachine/commitFinished(_:)``.
        public let id: Int
        public let items: [Item]
    }

    public enum Action: Sendable {
        /// Nothing to do now.
        case none
        /// Call ``timerFired()`` after `maxWait`.
        case armTimer
        /// Commit each of these (they may run at once), then call ``commitFinished(_:)`` for each.
        case commit([Batch])
    }

    public let maxBatch: Int
    public let maxWait: Duration
    public let maxConcurrentCommits: Int
    public private(set) var pending: [(key: Key, item: Item)] = []
    /// The keys of each running commit, by batch id.
    private var running: [Int: Set<Key>] = [:]
    private var nextBatch = 0
    private var timerArmed = false

    public var isCommitting: Bool { !running.isEmpty }
    public var commitsRunning: Int { running.count }

    public init(maxBatch: Int = 512, maxWait: Duration = .zero, maxConcurrentCommits: Int = 1) {
        precondition(maxBatch > 0, "maxBatch \(maxBatch) must be positive")
        precondition(maxConcurrentCommits > 0, "maxConcurrentCommits \(maxConcurrentCommits) must be positive")
        self.maxBatch = maxBatch
        self.maxWait = maxWait
        self.maxConcurrentCommits = maxConcurrentCommits
    }

    public mutating func enqueue(_ item: Item, key: Key) -> Action {
        pending.append((key, item))
        guard running.count < maxConcurrentCommits else { return .none }
        if pending.count >= maxBatch || maxWait <= .zero { return takeBatches() }
        guard !timerArmed else { return .none }
        timerArmed = true
        return .armTimer
    }

    public mutating func timerFired() -> Action {
        timerArmed = false
        return takeBatches()
    }

    public mutating func commitFinished(_ batch: Int) -> Action {
        precondition(running.removeValue(forKey: batch) != nil, "commitFinished(\(batch)): no such commit is running")
        return takeBatches()
    }

    /// As many batches as there are free commit slots and items whose key no running commit holds.
    private mutating func takeBatches() -> Action {
        var batches: [Batch] = []
        while running.count < maxConcurrentCommits, let batch = takeBatch() {
            batches.append(batch)
        }
        return batches.isEmpty ? .none : .commit(batches)
    }

    private mutating func takeBatch() -> Batch? {
        guard !pending.isEmpty else { return nil }
        let busy = running.values.reduce(into: Set<Key>()) { $0.formUnion($1) }
        var items: [Item] = []
        var keys: Set<Key> = []
        var waiting: [(key: Key, item: Item)] = []
        for entry in pending {
            if items.count < maxBatch, !busy.contains(entry.key) {
                items.append(entry.item)
                keys.insert(entry.key)
            } else {
                waiting.append(entry)
            }
        }
        guard !items.isEmpty else { return nil }
        pending = waiting
        nextBatch += 1
        running[nextBatch] = keys
        return Batch(id: nextBatch, items: items)
    }
}
