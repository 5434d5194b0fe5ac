/// When to commit a batch of appends: the pure core of the node's group commit.
///
/// Up to `maxConcurrentCommits` commits run at once (one for a store with a single writer). While
/// they run, new appends queue up and go together in the next commit as soon as one finishes, so
/// batches grow with load by themselves. Commits also start at least `minInterval` apart: an
/// append that comes sooner after the last commit began waits until then, with whatever else comes
/// (zero: it goes at once); one that comes later goes at once. A batch never exceeds `maxBatch`,
/// and a full one goes at once.
///
/// Every item has a key (its conversation). A key is in at most one running commit: an item whose
/// key is being committed waits for that commit to finish, and so does every later item with that
/// key. So commits of one key happen one after another, in the order the items came — which is
/// what keeps a conversation's seqs in the order its sends arrived — while commits of different
/// keys overlap.
public struct GroupCommitStateMachine<Item: Sendable, Key: Hashable & Sendable>: Sendable {
    /// Items committed together, in the order they came.
    public struct Batch: Sendable {
        /// Pass it back to ``GroupCommitStateMachine/commitFinished(_:now:)``.
        public let id: Int
        public let items: [Item]
    }

    public enum Action: Sendable {
        /// Nothing to do now.
        case none
        /// Call ``timerFired(now:)`` at this instant.
        case armTimer(at: ContinuousClock.Instant)
        /// Commit each of these (they may run at once), then call ``commitFinished(_:now:)`` for each.
        case commit([Batch])
    }

    public let maxBatch: Int
    public let minInterval: Duration
    public let maxConcurrentCommits: Int
    /// Items waiting, per key, in the order they came.
    private var waiting: [Key: [Item]] = [:]
    /// Keys with waiting items and no running commit, in the order they became so: the next
    /// batch's. Every step is proportional to the items it moves, never to all that wait: with
    /// thousands waiting behind one busy key, a scan of them all on each append took PostgreSQL's
    /// open loop down to 323 appends/s.
    private var ready: [Key] = []
    private var readyHead = 0
    /// The keys of each running commit, by batch id, and the batch holding each key.
    private var running: [Int: [Key]] = [:]
    private var holder: [Key: Int] = [:]
    public private(set) var pendingCount = 0
    private var nextBatch = 0
    private var timerArmed = false
    /// When the last commit started.
    private var lastStart: ContinuousClock.Instant?

    public var isCommitting: Bool { !running.isEmpty }
    public var commitsRunning: Int { running.count }

    /// The items waiting for `key`, in order.
    public func pending(for key: Key) -> [Item] { waiting[key] ?? [] }

    public init(maxBatch: Int = 512, minInterval: Duration = .zero, maxConcurrentCommits: Int = 1) {
        precondition(maxBatch > 0, "maxBatch \(maxBatch) must be positive")
        precondition(maxConcurrentCommits > 0, "maxConcurrentCommits \(maxConcurrentCommits) must be positive")
        self.maxBatch = maxBatch
        self.minInterval = minInterval
        self.maxConcurrentCommits = maxConcurrentCommits
    }

    public mutating func enqueue(_ item: Item, key: Key, now: ContinuousClock.Instant) -> Action {
        let wasWaiting = waiting[key] != nil
        waiting[key, default: []].append(item)
        pendingCount += 1
        // A key waiting already is in `ready` or held by a running commit; a new one is ready
        // unless a running commit holds it.
        if !wasWaiting && holder[key] == nil { ready.append(key) }
        guard running.count < maxConcurrentCommits else { return .none }
        if pendingCount >= maxBatch { return takeBatches(now: now) }
        return startOrWait(now: now)
    }

    public mutating func timerFired(now: ContinuousClock.Instant) -> Action {
        timerArmed = false
        return startOrWait(now: now)
    }

    public mutating func commitFinished(_ batch: Int, now: ContinuousClock.Instant) -> Action {
        guard let keys = running.removeValue(forKey: batch) else {
            preconditionFailure("commitFinished(\(batch)): no such commit is running")
        }
        for key in keys {
            holder[key] = nil
            if waiting[key] != nil { ready.append(key) }
        }
        return startOrWait(now: now)
    }

    /// The next batches if `minInterval` has passed since the last commit started, else the timer
    /// for that moment (once); nothing when nothing is ready.
    private mutating func startOrWait(now: ContinuousClock.Instant) -> Action {
        guard readyHead < ready.count, running.count < maxConcurrentCommits else { return .none }
        if let lastStart, now < lastStart + minInterval {
            guard !timerArmed else { return .none }
            timerArmed = true
            return .armTimer(at: lastStart + minInterval)
        }
        return takeBatches(now: now)
    }

    /// As many batches as there are free commit slots and ready keys.
    private mutating func takeBatches(now: ContinuousClock.Instant) -> Action {
        var batches: [Batch] = []
        while running.count < maxConcurrentCommits, let batch = takeBatch() {
            batches.append(batch)
        }
        if !batches.isEmpty { lastStart = now }
        return batches.isEmpty ? .none : .commit(batches)
    }

    private mutating func takeBatch() -> Batch? {
        guard readyHead < ready.count else { return nil }
        nextBatch += 1
        var items: [Item] = []
        var keys: [Key] = []
        while items.count < maxBatch, readyHead < ready.count {
            let key = ready[readyHead]
            readyHead += 1
            guard var queue = waiting.removeValue(forKey: key) else { continue }
            let taken = min(queue.count, maxBatch - items.count)
            items += queue.prefix(taken)
            queue.removeFirst(taken)
            if !queue.isEmpty { waiting[key] = queue }  // the rest waits for this commit
            keys.append(key)
            holder[key] = nextBatch
        }
        if readyHead > 1024 && readyHead * 2 > ready.count {
            ready.removeFirst(readyHead)
            readyHead = 0
        }
        pendingCount -= items.count
        running[nextBatch] = keys
        return Batch(id: nextBatch, items: items)
    }
}
