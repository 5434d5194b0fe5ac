/// When to commit a batch of appends: the pure core of the node's group commit.
///
/// One commit runs at a time. While it runs, new appends queue up and go together in the next
/// commit as soon as it finishes, so batches grow with load by themselves. When idle, an append
/// waits at most `maxWait` for company (zero: it goes at once), and a batch never exceeds
/// `maxBatch`.
public struct GroupCommitStateMachine<Item>: Sendable where Item: Sendable {
    public enum Action {
        /// Nothing to do now.
        case none
        /// Call ``timerFired()`` after `maxWait`.
        case armTimer
        /// Commit these, then call ``commitFinished()``.
        case commit([Item])
    }

    public let maxBatch: Int
    public let maxWait: Duration
    public private(set) var pending: [Item] = []
    public private(set) var isCommitting = false
    private var timerArmed = false

    public init(maxBatch: Int = 512, maxWait: Duration = .zero) {
        precondition(maxBatch > 0, "maxBatch \(maxBatch) must be positive")
        self.maxBatch = maxBatch
        self.maxWait = maxWait
    }

    public mutating func enqueue(_ item: Item) -> Action {
        pending.append(item)
        guard !isCommitting else { return .none }
        if pending.count >= maxBatch || maxWait <= .zero { return takeBatch() }
        guard !timerArmed else { return .none }
        timerArmed = true
        return .armTimer
    }

    public mutating func timerFired() -> Action {
        timerArmed = false
        guard !isCommitting, !pending.isEmpty else { return .none }
        return takeBatch()
    }

    public mutating func commitFinished() -> Action {
        precondition(isCommitting, "commitFinished without a commit running (pending \(pending.count))")
        isCommitting = false
        guard !pending.isEmpty else { return .none }
        return takeBatch()
    }

    private mutating func takeBatch() -> Action {
        let batch = Array(pending.prefix(maxBatch))
        pending.removeFirst(batch.count)
        isCommitting = true
        return .commit(batch)
    }
}
