import DequeModule
import Foundation
import ParleyModel

extension StreamCursor {
    /// The cursor after an event: never moves back.
    public func advanced(by event: ChatEvent) -> StreamCursor {
        guard let at = event.durableAt else { return self }
        return StreamCursor(millis: max(millis, at.millisecondsSince1970))
    }
}

/// One client's event stream, as a pure state machine: everything a stream decides, for a shell
/// (the gateway's `LiveEventStream`) that does the IO it is told and reports what happened. Like
/// ``DeliveryStateMachine``, every input returns what to do (``Action``) and every timer is a
/// ``tick(now:active:writable:)``.
///
/// - **Replay, then ready, then live.** A resume's replay is written page by page
///   (``replay(_:now:)``); live events that arrive meanwhile wait, in order, until ``start(now:)``
///   writes `ready` and then them.
/// - **Order.** Per conversation, messages go out in seq order, each once; one past a gap waits
///   for the seqs before it (its ``EventStreamStateMachine`` layer). A gap not filled within
///   ``EventStreamStateMachine/gapMax`` ends the stream: its client resumes by cursor and reads
///   what it missed, rather than waiting on a silent stream.
/// - **The cursor each event carries**, from which a resume replays: during a replay, the cursor
///   the client resumed from (the replay goes conversation by conversation, so one conversation's
///   newest message may be far ahead of the next one's oldest, and a resume from the middle must
///   start the replay again), `ready` the newest instant replayed; while a message waits past a
///   gap, the cursor from before the gap, so that a resume from any event written meanwhile
///   replays the gap; otherwise the newest instant written.
/// - **Erasures.** A message erased while it waits past a gap goes out as its tombstone, and its
///   `message_erased` event is not written; any other erasure is written as it comes.
/// - **Changes to messages**, per conversation in ``MessageChange/changeSeq`` order, each once,
///   and each only once the message it follows (``MessageChange/afterSeq``) is written: one past
///   a gap in the numbers, or ahead of its message, waits, and ends the stream as a message's gap
///   does. A conversation's first change to arrive (or to be replayed) starts its numbers.
/// - **The sender's own message** (``receivedAhead(_:shared:now:)``), written with its send's
///   response when it is the conversation's next message for this stream; the delivery's copy
///   is then a repeat.
/// - **The slow reader.** A client that takes nothing for ``unwritableFor``, or while its stream
///   cannot take more has been written ``unwritableBytesMax`` bytes (``admit(bytes:writable:)``),
///   is ended rather than buffered for.
/// - **Pings** every `pingTicks` ticks, in a phase of the stream's own.
public struct StreamSessionStateMachine: Sendable {
    public typealias Instant = ContinuousClock.Instant

    /// An event as it goes out: with the JSON the hub encoded once for every stream, if it did.
    public struct Outgoing: Sendable {
        public var event: ChatEvent
        public var shared: [UInt8]?

        public init(event: ChatEvent, shared: [UInt8]?) {
            self.event = event
            self.shared = shared
        }
    }

    public enum Frame: Sendable {
        case event(Outgoing, cursor: StreamCursor)
        case ready(cursor: StreamCursor)
        case ping
    }

    public enum EndReason: Sendable, Hashable {
        /// The client went away (its connection closed, its stream reset).
        case clientGone
        /// The gateway finished the stream (it is shutting down, or its user logged out).
        case finished
        /// A message of `conversation` waited past a gap after `lastSeq` for too long.
        case gap(ConversationID, lastSeq: Int64)
        /// The client took nothing for `Duration`.
        case unwritable(Duration)
        /// `bytes` were written while the client could take nothing more.
        case slowReader(bytes: Int)

        /// Whether the response ends abruptly, without its end: the client resumes by cursor.
        public var isAbrupt: Bool {
            switch self {
            case .clientGone, .finished: false
            case .gap, .unwritable, .slowReader: true
            }
        }
    }

    public enum Action: Sendable {
        /// Write this frame (then tell ``admit(bytes:writable:)`` its size before the next).
        case write(Frame)
        case flush
        /// The stream is over: nothing more is written. An abrupt end closes the response.
        case end(EndReason)
    }

    public enum Phase: Sendable, Hashable {
        /// Writing a resume's replay; live events wait.
        case replaying
        case live
        case ended(EndReason)
    }

    /// The guards of a stream's order, each of which a simulation can run without, to see that
    /// some seed fails then (never in production).
    @_spi(Testing) public enum Guard: String, CaseIterable, Sendable {
        /// Live events that arrive during a replay wait for its end.
        case replayQueue = "replay-queue"
        /// A message the stream wrote already is not written again.
        case repeats
        /// A message past a gap waits for the seqs before it.
        case order
        /// The sender's own message goes ahead of its delivery only as its conversation's next.
        case aheadWhenNext = "ahead-when-next"
    }

    /// The guards this session runs without (a simulation's; empty in production).
    @_spi(Testing) public var without: Set<Guard> = [] {
        didSet {
            order.dropsRepeats = !without.contains(.repeats)
            order.holdsPastGaps = !without.contains(.order)
        }
    }

    public private(set) var phase: Phase = .replaying
    /// The cursor the next live event builds on (see the type's description).
    public private(set) var cursor: StreamCursor
    private var replayedThrough: StreamCursor?
    private var cursorPastGap: StreamCursor?
    private var order: EventStreamStateMachine<ConversationID, Outgoing>
    /// Per conversation, the changes to messages written and waiting.
    private var changeOrders: [ConversationID: ChangeOrder] = [:]
    /// Conversations with a change waiting.
    private var changesWaiting: Set<ConversationID> = []

    private struct ChangeOrder {
        /// The last number written; nil before the first.
        var lastWritten: Int64?
        /// By number.
        var waiting: [Int64: Outgoing] = [:]
        var waitingSince: Instant?
    }
    /// Live events that arrived during the replay, in order.
    private var queue = Deque<Outgoing>()
    private var needsFlush = false
    private var ticks = 0
    private let pingTicks: Int
    private let pingOffset: Int
    private let unwritableBytesMax: Int
    private let unwritableFor: Duration
    private var bytesWhileUnwritable = 0
    private var unwritableSince: Instant?

    /// - Parameters:
    ///   - cursor: the cursor the client resumed from, or now for a stream opened without one.
    ///   - pingTicks: ticks between two pings; `pingOffset` the stream's phase among them, so
    ///     that streams opened together do not all ping in the same tick.
    public init(
        cursor: StreamCursor, pingTicks: Int, pingOffset: Int = 0, unwritableBytesMax: Int, unwritableFor: Duration, gapMax: Duration
    ) {
        self.cursor = cursor
        self.pingTicks = max(1, pingTicks)
        self.pingOffset = pingOffset
        self.unwritableBytesMax = unwritableBytesMax
        self.unwritableFor = unwritableFor
        self.order = EventStreamStateMachine(written: [:], gapMax: gapMax)
    }

    public var isEnded: Bool { if case .ended = phase { true } else { false } }

    /// The last seq written of `conversation`; nil before its first message.
    public func lastWritten(_ conversation: ConversationID) -> Int64? { order.lastWritten(conversation) }

    // MARK: Inputs

    /// A page of a resume's replay: written now, each event with the cursor the client resumed from.
    public mutating func replay(_ events: [ChatEvent], now: Instant) -> [Action] {
        guard phase == .replaying else { return [] }
        var actions: [Action] = []
        var through = replayedThrough ?? cursor
        for event in events {
            through = through.advanced(by: event)
            for out in ordered(Outgoing(event: event, shared: nil), now: now) { actions.append(.write(.event(out, cursor: cursor))) }
        }
        replayedThrough = through
        needsFlush = needsFlush || !actions.isEmpty
        return actions + flushIfNeeded()
    }

    /// The replay is over: `ready`, then what arrived meanwhile; from now on events go out as
    /// they come.
    public mutating func start(now: Instant) -> [Action] {
        guard phase == .replaying else { return [] }
        if let replayedThrough { cursor = max(cursor, replayedThrough) }
        phase = .live
        var actions: [Action] = [.write(.ready(cursor: cursor))]
        while let out = queue.popFirst() { actions += emit(ordered(out, now: now)) }
        needsFlush = true
        return actions + flushIfNeeded()
    }

    /// A live event for this stream. Not flushed: the caller flushes after its batch
    /// (``flushIfNeeded()``).
    public mutating func received(_ event: ChatEvent, shared: [UInt8]?, now: Instant) -> [Action] {
        switch phase {
        case .replaying where !without.contains(.replayQueue):
            queue.append(Outgoing(event: event, shared: shared))
            return []
        case .replaying:
            return emit(ordered(Outgoing(event: event, shared: shared), now: now))
        case .live:
            return emit(ordered(Outgoing(event: event, shared: shared), now: now))
        case .ended:
            return []
        }
    }

    /// The message its sender's request just got back from the conversation's owner: written now
    /// (with the send's response, in one flush) if that cannot change what the stream sends —
    /// the stream is live, and the message is the conversation's next for it (the one after the
    /// last written, or seq 1). Otherwise nil, and the delivery brings it: written now, it would
    /// make a predecessor still on its way a repeat. Not flushed.
    public mutating func receivedAhead(_ message: Message, shared: [UInt8]?, now: Instant) -> [Action]? {
        guard phase == .live, (order.lastWritten(message.conversationId) ?? 0) + 1 == message.seq || without.contains(.aheadWhenNext) else {
            return nil
        }
        return emit(ordered(Outgoing(event: .message(message), shared: shared), now: now))
    }

    /// A frame of `bytes` is about to be written, while the client can (`writable`) or cannot
    /// take more. False when it must not be: the stream has ended, or this frame would pass the
    /// slow reader's budget (the stream then ends, ``EndReason/slowReader(bytes:)``).
    public mutating func admit(bytes: Int, writable: Bool) -> Bool {
        guard !isEnded else { return false }
        if writable {
            bytesWhileUnwritable = 0
            return true
        }
        bytesWhileUnwritable += bytes
        guard bytesWhileUnwritable <= unwritableBytesMax else {
            phase = .ended(.slowReader(bytes: bytesWhileUnwritable))
            return false
        }
        return true
    }

    /// Once a second: whether the client is still there (`active`) and takes more (`writable`).
    /// Ends a stream whose client went, took nothing for ``unwritableFor``, or whose message waited
    /// past a gap too long; pings on the stream's ticks.
    public mutating func tick(now: Instant, active: Bool, writable: Bool) -> [Action] {
        guard !isEnded else { return [] }
        guard active else { return clientGone() }
        if writable {
            unwritableSince = nil
        } else {
            let since = unwritableSince ?? now
            unwritableSince = since
            if now - since >= unwritableFor { return end(.unwritable(unwritableFor)) }
        }
        if order.isWaiting, case .end(let conversation) = order.tick(now: now).first {
            return end(.gap(conversation, lastSeq: order.lastWritten(conversation) ?? 0))
        }
        for conversation in changesWaiting.sorted() {
            if let since = changeOrders[conversation]?.waitingSince, since.advanced(by: order.gapMax) <= now {
                return end(.gap(conversation, lastSeq: order.lastWritten(conversation) ?? 0))
            }
        }
        ticks += 1
        guard phase == .live, (ticks + pingOffset) % pingTicks == 0 else { return [] }
        needsFlush = true
        return [.write(.ping)] + flushIfNeeded()
    }

    /// The gateway ends the stream (shutting down, its user logged out): what was written is
    /// flushed, and the response completes.
    public mutating func finish() -> [Action] {
        guard !isEnded else { return [] }
        return end(.finished)
    }

    /// The client went away: nothing more is written.
    public mutating func clientGone() -> [Action] {
        guard !isEnded else { return [] }
        phase = .ended(.clientGone)
        needsFlush = false
        queue.removeAll()
        return [.end(.clientGone)]
    }

    /// A flush if anything was written since the last one.
    public mutating func flushIfNeeded() -> [Action] {
        guard needsFlush, !isEnded else { return [] }
        needsFlush = false
        return [.flush]
    }

    // MARK: Internals

    private mutating func end(_ reason: EndReason) -> [Action] {
        let flush = flushIfNeeded()
        phase = .ended(reason)
        queue.removeAll()
        return flush + [.end(reason)]
    }

    /// What goes out now that `out` arrived: a message as its conversation's order says (itself
    /// and those that waited for it; nothing for a repeat or one past a gap); any other event as it is.
    private mutating func ordered(_ out: Outgoing, now: Instant) -> [Outgoing] {
        if case .erasure(let erasure) = out.event {
            // The message still waits past a gap: it goes out erased, and the erasure has nothing
            // more to tell. Otherwise the client has it (or will read it from the store, erased).
            let tombstone = Outgoing(event: .message(erasure.message), shared: nil)
            return order.replaceWaiting(erasure.message.conversationId, seq: erasure.message.seq, with: tombstone) ? [] : [out]
        }
        if case .change(let change) = out.event { return ordered(change, out, now: now) }
        guard case .message(let message) = out.event else { return [out] }
        var written: [Outgoing] = []
        for directive in order.received(message.conversationId, seq: message.seq, out, now: now) {
            if case .write(let events) = directive { written += events.map(\.event) }
        }
        if !written.isEmpty, changesWaiting.contains(message.conversationId) {
            written += releasedChanges(of: message.conversationId, now: now)
        }
        return written
    }

    /// What goes out now that `change` arrived: itself and the changes that waited for it, as far
    /// as their numbers run on without a gap and their messages are written.
    private mutating func ordered(_ change: MessageChange, _ out: Outgoing, now: Instant) -> [Outgoing] {
        let conversation = change.conversationId
        var changes = changeOrders[conversation] ?? ChangeOrder()
        if let last = changes.lastWritten, change.changeSeq <= last {
            return without.contains(.repeats) ? [out] : []
        }
        if without.contains(.order) {
            changes.lastWritten = max(changes.lastWritten ?? 0, change.changeSeq)
            changeOrders[conversation] = changes
            return [out]
        }
        changes.waiting[change.changeSeq] = out
        changeOrders[conversation] = changes
        return releasedChanges(of: conversation, now: now)
    }

    /// The waiting changes of `conversation` that may go out now, in order.
    private mutating func releasedChanges(of conversation: ConversationID, now: Instant) -> [Outgoing] {
        guard var changes = changeOrders[conversation] else { return [] }
        var released: [Outgoing] = []
        while let next = changes.lastWritten.map({ $0 + 1 }) ?? changes.waiting.keys.min(), let out = changes.waiting[next],
              case .change(let change) = out.event, order.lastWritten(conversation).map({ $0 >= change.afterSeq }) ?? true
        {
            changes.waiting[next] = nil
            changes.lastWritten = next
            released.append(out)
        }
        changes.waitingSince = changes.waiting.isEmpty ? nil : (changes.waitingSince ?? now)
        if changes.waiting.isEmpty { changesWaiting.remove(conversation) } else { changesWaiting.insert(conversation) }
        changeOrders[conversation] = changes
        return released
    }

    /// Writes live events, each with its cursor.
    private mutating func emit(_ outs: [Outgoing]) -> [Action] {
        var actions: [Action] = []
        for out in outs {
            if order.isWaiting || !changesWaiting.isEmpty {
                cursorPastGap = (cursorPastGap ?? cursor).advanced(by: out.event)
            } else {
                cursor = max(cursor, cursorPastGap ?? cursor).advanced(by: out.event)
                cursorPastGap = nil
            }
            actions.append(.write(.event(out, cursor: cursor)))
        }
        needsFlush = needsFlush || !actions.isEmpty
        return actions
    }
}
