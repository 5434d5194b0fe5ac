/// One ordered path per destination: items for a destination leave in the order they were
/// enqueued, one batch in flight at a time, retried after a failure. Pure: the shell sends what it
/// returns and reports the outcome.
///
/// Remote calls issued from concurrent tasks are not ordered, so events that must arrive in order
/// (a conversation's messages, by seq) go through here.
public struct OrderedDeliveryStateMachine<Destination: Hashable & Sendable, Item: Sendable>: Sendable {
    public enum Action {
        /// Nothing to do now.
        case none
        /// Send these items to the destination, then report ``delivered(to:)`` or ``failed(to:)``.
        case send(Destination, [Item])
        /// The destination failed `attemptsMax` times in a row: these items are dropped (the
        /// receiver fills gaps from the store).
        case drop(Destination, [Item])
    }

    private struct Queue {
        var pending: [Item] = []
        var inFlight: [Item]?
        var failures = 0
    }

    public let batchMax: Int
    public let attemptsMax: Int
    private var queues: [Destination: Queue] = [:]

    public init(batchMax: Int = 256, attemptsMax: Int = 3) {
        precondition(batchMax > 0 && attemptsMax > 0, "batchMax \(batchMax) and attemptsMax \(attemptsMax) must be positive")
        self.batchMax = batchMax
        self.attemptsMax = attemptsMax
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
        queues[destination]?.failures = 0
        return next(for: destination)
    }

    /// The batch in flight failed: it is sent again (first in line), or dropped with everything
    /// queued behind it after `attemptsMax` failures in a row.
    public mutating func failed(to destination: Destination) -> Action {
        guard var queue = queues[destination], let batch = queue.inFlight else { return .none }
        queue.failures += 1
        queue.inFlight = nil
        if queue.failures >= attemptsMax {
            queues[destination] = nil
            return .drop(destination, batch + queue.pending)
        }
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
        let batch = Array(queue.pending.prefix(batchMax))
        queue.pending.removeFirst(batch.count)
        queue.inFlight = batch
        queues[destination] = queue
        return .send(destination, batch)
    }
}
