/// One client's event stream, as a pure state machine: per conversation it writes messages in seq
/// order, each once, and a stream that cannot do so in time ends — so that its client resumes by
/// cursor and reads what it missed from the store — rather than stay open and silent while it owes
/// its client events.
///
/// A message past a gap waits for the seqs before it (the owner sends them again until this
/// gateway acknowledges them); after ``gapMax`` it ends the stream (``Directive/end(_:)``).
public struct EventStreamStateMachine<Conversation: Hashable & Comparable & Sendable, Event: Sendable>: Sendable {
    public typealias Instant = ContinuousClock.Instant

    public enum Directive: Sendable {
        /// Write these events to the client, in this order.
        case write([(conversation: Conversation, seq: Int64, event: Event)])
        /// End the stream: a gap in `Conversation` was not filled in time.
        case end(Conversation)
    }

    private struct Order {
        var lastWritten: Int64
        var waiting: [Int64: Event] = [:]
        var gapSince: Instant?
    }

    public let gapMax: Duration
    /// Guards a simulation turns off to see that some seed catches each (never in production):
    /// a repeat is dropped; a message past a gap waits for the seqs before it.
    @_spi(Testing) public var dropsRepeats = true
    @_spi(Testing) public var holdsPastGaps = true
    private var orders: [Conversation: Order] = [:]
    /// Conversations with a message waiting past a gap.
    private var gapped: Set<Conversation> = []
    public private(set) var ended = false

    /// - Parameter written: per conversation, the last seq the client has (what its replay wrote).
    ///   A conversation not named starts at the first of its messages to arrive: a stream opened
    ///   without a cursor, or whose replay did not reach back to a quiet conversation, has nothing
    ///   to compare it with (its client loaded the history itself).
    public init(written: [Conversation: Int64], gapMax: Duration = .seconds(5)) {
        self.gapMax = gapMax
        self.orders = written.mapValues { Order(lastWritten: $0) }
    }

    /// Whether a message waits past a gap (only then can ``tick(now:)`` end the stream).
    public var isWaiting: Bool { !gapped.isEmpty }

    /// The last seq written of `conversation`; nil before its first message.
    public func lastWritten(_ conversation: Conversation) -> Int64? { orders[conversation]?.lastWritten }

    /// A message of `conversation` reached this stream.
    public mutating func received(_ conversation: Conversation, seq: Int64, _ event: Event, now: Instant) -> [Directive] {
        guard !ended else { return [] }
        var order = orders[conversation] ?? Order(lastWritten: seq - 1)
        guard seq > order.lastWritten else { return dropsRepeats ? [] : [.write([(conversation, seq, event)])] }
        if !holdsPastGaps {
            order.lastWritten = seq
            orders[conversation] = order
            return [.write([(conversation, seq, event)])]
        }
        if seq == order.lastWritten + 1, order.waiting.isEmpty {
            // The usual case, the next seq with nothing waiting (so no gap either): written at once.
            order.lastWritten = seq
            orders[conversation] = order
            return [.write([(conversation, seq, event)])]
        }
        order.waiting[seq] = event
        var written: [(conversation: Conversation, seq: Int64, event: Event)] = []
        while let next = order.waiting.removeValue(forKey: order.lastWritten + 1) {
            order.lastWritten += 1
            written.append((conversation, order.lastWritten, next))
        }
        order.gapSince = order.waiting.isEmpty ? nil : (order.gapSince ?? now)
        if order.gapSince == nil { gapped.remove(conversation) } else { gapped.insert(conversation) }
        orders[conversation] = order
        return written.isEmpty ? [] : [.write(written)]
    }

    /// Replaces the event of `seq` of `conversation` if it waits past a gap (a message erased
    /// while it waited goes out as its tombstone); whether one waited.
    public mutating func replaceWaiting(_ conversation: Conversation, seq: Int64, with event: Event) -> Bool {
        guard orders[conversation]?.waiting[seq] != nil else { return false }
        orders[conversation]?.waiting[seq] = event
        return true
    }

    /// Ends the stream once a gap is older than ``gapMax``.
    public mutating func tick(now: Instant) -> [Directive] {
        guard !ended, !gapped.isEmpty else { return [] }
        for conversation in gapped.sorted() {
            if let since = orders[conversation]?.gapSince, since.advanced(by: gapMax) <= now {
                ended = true
                return [.end(conversation)]
            }
        }
        return []
    }
}
