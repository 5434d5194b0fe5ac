/// One ordered path per destination: items for a destination leave in the order they were
/// enqueued, one batch in flight at a time, retried after a failure. Pure: the shell sends what it
/// returns and reports the outcome.
///
/// Remote calls issued from concurrent tasks are not ordered, so events that must arrive in order
/// (a conversation's messages, by seq) go through here.
///
/// A failed batch is sent again for as long as its destination is a live member, up to
/// `retryMax` from its first failure. Dropping events for a gateway that is still up would leave
/// its streams silent about them until the conversation's next message shows the gap; a gateway
/// that cannot be reached for longer is declared down by failure detection well within
/// `retryMax`, and ends its streams itself (their clients resume by cursor).
public struct OrderedDeliveryStateMachine<Destination: Hashable & Sendable, Item: Sendable>: Sendable {
    public typealias Instant = ContinuousClock.Instant

    public enum Action {
        /// Nothing to do now.
        case none
        /// Send these items to the destination, then report ``delivered(to:)`` or ``failed(to:destinationLive:now:)``.
        case send(Destination, [Item])
        /// The destination is no longer a live member, or failed for `retryMax`: these items are
        /// dropped.
        case drop(Destination, [Item])
    }

    private struct Queue {
        var pending: [Item] = []
        var inFlight: [Item]?
        /// When the failures in a row began.
        var failingSince: Instant?
    }

    public let batchMax: Int
    /// The most a batch may cost (``cost``), unless its first item alone costs more.
    public let batchCostMax: Int
    private let cost: @Sendable (Item) -> Int
    public let retryMax: Duration
    private var queues: [Destination: Queue] = [:]

    public init(
        batchMax: Int = 256, batchCostMax: Int = .max, cost: @escaping @Sendable (Item) -> Int = { _ in 1 }, retryMax: Duration = .seconds(30)
    ) {
        precondition(batchMax > 0 && batchCostMax > 0 && retryMax >= .zero, "batchMax \(batchMax) and batchCostMax \(batchCostMax) must be positive and retryMax \(retryMax) not negative")
        self.batchMax = batchMax
        self.batchCostMax = batchCostMax
        self.cost = cost
        self.retryMax = retryMax
    }

    /// Items waiting or in flight for `destination`.
    public func backlog(of destination: Destination) -> Int {
        guard let queue = queues[destination] else { return 0 }
        return queue.pending.count + (queue.inFlight?.count ?? 0)
    }

    public mutating func enqueue(_ item: Item, to destination: Destination) -> Action {
        queues[destination, default: Queue()].pending.append(item)
        return next(for: destination)
    }

    /// The batch in flight arrived.
    public mutating func delivered(to destination: Destination) -> Action {
        queues[destination]?.inFlight = nil
        queues[destination]?.failingSince = nil
        return next(for: destination)
    }

    /// The batch in flight failed: it is sent again (first in line), or dropped with everything
    /// queued behind it when the destination is not a live member or has failed for `retryMax`.
    public mutating func failed(to destination: Destination, destinationLive: Bool, now: Instant) -> Action {
        guard var queue = queues[destination], let batch = queue.inFlight else { return .none }
        queue.inFlight = nil
        let since = queue.failingSince ?? now
        if !destinationLive || since.duration(to: now) >= retryMax {
            queues[destination] = nil
            return .drop(destination, batch + queue.pending)
        }
        queue.failingSince = since
        queue.pending.insert(contentsOf: batch, at: 0)
        queues[destination] = queue
        return next(for: destination)
    }

    private mutating func next(for destination: Destination) -> Action {
        guard var queue = queues[destination], queue.inFlight == nil else { return .none }
        guard !queue.pending.isEmpty else {
            queues[destination] = nil
            return .none
        }
        var taken = 0
        var total = 0
        while taken < min(batchMax, queue.pending.count) {
            let next = cost(queue.pending[taken])
            guard taken == 0 || total + next <= batchCostMax else { break }
            total += next
            taken += 1
        }
        let batch = Array(queue.pending.prefix(taken))
        queue.pending.removeFirst(taken)
        queue.inFlight = batch
        queues[destination] = queue
        return .send(destination, batch)
    }
}
