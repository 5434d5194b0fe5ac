import DequeModule
import ParleyModel

/// A conversation's events on their way from its owner to the gateways that hold its members'
/// streams, as one pure state machine: what to send to which gateway, what to send again, when to
/// read the store. The shell does the IO it is told and reports what happened; every timer is a
/// ``tick(now:)``.
///
/// - **Order.** Commits may be reported out of seq order, or not at all (a commit's answer lost
///   after it reached the store). Messages are released in seq order; a seq missing for
///   ``Policy/holdMax`` is read from the store (``Directive/readStore(after:before:)``), so a
///   lost answer holds the later messages back for a bounded time, never for good. Events without
///   a seq of their own (receipts, typing, changes to the conversation) are released when they are
///   published, after what was released before them. Each released event takes the next
///   *position* of this owner's released order.
/// - **One path per gateway.** Each gateway gets the released events in order, one batch in
///   flight at a time, and acknowledges the last position of each batch it received. A batch that
///   failed is sent again from the first unacknowledged position after the retry delay, which
///   doubles up to ``Policy/retry``'s most; one with no answer at all within
///   ``Policy/ackTimeout`` is sent again at once. So a lost batch, a lost acknowledgement or a
///   gateway that was cut off for a while costs a resend, and the gateway's streams drop a
///   message they already wrote, by seq.
/// - **Bounded memory.** Released events are kept until every gateway acknowledged them, at most
///   ``Policy/retainedMax``; a gateway that falls further behind is sent what is kept, and its
///   streams, seeing the gap, end so that their clients resume from the store.
///
/// Which gateways hold streams of the members is the shell's to say (``gateways(_:now:)``), from
/// the directory asked *after* the events happened: a gateway named for the first time gets the
/// events released from then on. Events before that are in the replay of the streams that opened
/// there, which read the store after the owner could be told.
public struct DeliveryStateMachine<Gateway: Hashable & Comparable & Sendable, Event: Sendable>: Sendable {
    public typealias Instant = ContinuousClock.Instant

    public enum Directive: Sendable {
        /// Send these events — positions `from`, `from + 1`, … — to the gateway; report
        /// ``acknowledged(_:through:now:)`` with the last, or ``failed(_:now:)``.
        case send(Gateway, from: Int64, events: [Event])
        /// Read the committed messages with seqs in `after + 1 ..< before` and report them with
        /// ``storeRead(_:now:)`` (or ``storeReadFailed(now:)``).
        case readStore(after: Int64, before: Int64)
    }

    public struct Policy: Sendable {
        /// How long a released seq's successor waits for it before the store is read.
        public var holdMax: Duration = .seconds(1)
        /// Reads of the store that leave the gap before the held seqs are given up after this many:
        /// the held events are then released past it (streams that miss them end and resume).
        public var storeReadsMax = 10
        /// The wait after a failed batch before it is sent again.
        public var retry = Backoff(first: .milliseconds(200), max: .seconds(2))
        /// A batch with neither an acknowledgement nor a failure reported this long after it was
        /// sent is taken as lost. A shell whose calls always end (with a timeout of their own)
        /// sets it above that timeout.
        public var ackTimeout: Duration = .seconds(1)
        public var batchMax = 256
        /// The most a batch may cost (the machine's `cost` of its events), unless its first event
        /// alone costs more.
        public var batchCostMax = Int.max
        /// Released events kept for gateways that have not acknowledged them.
        public var retainedMax = 10_000

        public init() {}
    }

    private struct Path {
        /// The last position the gateway acknowledged, and the last sent to it.
        var acknowledged: Int64
        var sent: Int64
        /// When the batch in flight was sent.
        var sentAt: Instant?
        /// When a failed batch goes again, and the wait after the next failure.
        var resendAt: Instant?
        var retryDelay: Duration
    }

    public let policy: Policy
    private let cost: @Sendable (Event) -> Int
    /// The next seq to release.
    public private(set) var nextSeq: Int64
    /// Committed messages waiting for the seqs before them, since when, and how many reads of the
    /// store left the gap.
    private var held: [Int64: Event] = [:]
    /// Events published after a seq not released yet, in the order they were published.
    private var parked = Deque<(seq: Int64, event: Event)>()
    private var heldSince: Instant?
    private var storeReadRunning = false
    private var storeReadsShort = 0
    /// Since when an append's outcome is unknown: its commit may have reached the store with the
    /// answer lost, and with no later commit nothing would show the seq missing.
    private var uncertainSince: Instant?
    /// When the latest append's outcome became unknown.
    private var uncertainLast: Instant?
    /// When the running store read, one past the last released seq, was asked for.
    private var tailReadAskedAt: Instant?
    /// The next position to release.
    private var nextPosition: Int64 = 1
    /// Released events not yet acknowledged by every gateway: positions `retainedFrom`, … .
    private var retained: [Event] = []
    private var retainedFrom: Int64 = 1
    private var paths: [Gateway: Path] = [:]
    /// The gateways of `paths` in order: every pass over them goes this way, so that what the
    /// machine does never depends on a dictionary's order.
    private var order: [Gateway] = []
    /// Paths with a batch in flight, and paths with a failed batch waiting for its resend.
    private var inFlight = 0
    private var resending = 0

    /// - Parameters:
    ///   - releasedThrough: the last seq already released before this owner (at activation: the
    ///     store's last seq).
    ///   - cost: what an event counts for against ``Policy/batchCostMax``.
    public init(releasedThrough: Int64, policy: Policy = Policy(), cost: @escaping @Sendable (Event) -> Int = { _ in 1 }) {
        self.policy = policy
        self.cost = cost
        self.nextSeq = releasedThrough + 1
    }

    /// The gateways events go to.
    public var gateways: Set<Gateway> { Set(paths.keys) }
    /// Seqs held back waiting for the ones before them.
    public var heldCount: Int { held.count }
    /// Nothing held and every gateway acknowledged everything released: an owner handing the
    /// conversation over may stop.
    public var isIdle: Bool {
        held.isEmpty && parked.isEmpty && uncertainSince == nil && !storeReadRunning && paths.values.allSatisfy { $0.acknowledged >= nextPosition - 1 }
    }

    /// Something only time moves on: held seqs, an append of unknown outcome, a failed batch
    /// waiting for its resend. A batch in flight is not on the list — the shell reports its
    /// outcome — unless the shell may never hear of it (a network that loses packets without a
    /// word), which then ticks while ``hasBatchesInFlight``.
    public var needsTicks: Bool { !held.isEmpty || uncertainSince != nil || resending > 0 }
    public var hasBatchesInFlight: Bool { inFlight > 0 }
    /// A failed batch waits for its resend: the shell asks the directory again before it ticks,
    /// so that a gateway whose streams are gone (it died, or they moved) is let go.
    public var isResending: Bool { resending > 0 }

    /// A commit of `seq` ended (or a send's retry found it stored): release it in order.
    public mutating func committed(_ seq: Int64, _ event: Event, now: Instant) -> [Directive] {
        guard seq >= nextSeq else { return [] }
        held[seq] = event
        release(now: now)
        return pump(now: now)
    }

    /// An event without a seq of its own: released now, after what was released before it.
    public mutating func published(_ event: Event, now: Instant) -> [Directive] {
        append(event)
        return pump(now: now)
    }

    /// An event that belongs after message `seq` (a change to a message, after the last one
    /// committed before it): released once every seq through `seq` was, after what was released
    /// or parked before it — so a stream never hears of a change before the messages it follows,
    /// even when a lost commit answer holds those back.
    public mutating func published(_ event: Event, afterSeq seq: Int64, now: Instant) -> [Directive] {
        guard seq >= nextSeq || !parked.isEmpty else { return published(event, now: now) }
        parked.append((seq, event))
        return []
    }

    /// An append failed without saying whether it committed (a lost answer, a timeout): after
    /// ``Policy/holdMax`` the store is read past the last released seq, so that a message that did
    /// commit is handed on even when nothing is committed after it.
    public mutating func commitUncertain(now: Instant) {
        uncertainSince = uncertainSince ?? now
        uncertainLast = now
    }

    /// A message committed before, found stored again (a send's retry, a new owner's recovery):
    /// released in order if it is still to be; else released once more, after what was released
    /// before — a stream that lacks it (its owner was told of it by nobody, or died before handing
    /// it on) holds the seqs after it, and one that has it drops it.
    public mutating func republished(_ seq: Int64, _ event: Event, now: Instant) -> [Directive] {
        guard seq < nextSeq else { return committed(seq, event, now: now) }
        return published(event, now: now)
    }

    /// What the store answered to ``Directive/readStore(after:before:)``.
    public mutating func storeRead(_ events: [(seq: Int64, event: Event)], now: Instant) -> [Directive] {
        storeReadRunning = false
        if let askedAt = tailReadAskedAt, let last = uncertainLast {
            // The read saw what the appends uncertain for `holdMax` before it was asked committed.
            // One uncertain since (it may have committed after the read) needs a read of its own:
            // with no later commit, nothing else would show its seq missing.
            if last.advanced(by: policy.holdMax) <= askedAt {
                uncertainSince = nil
                uncertainLast = nil
            } else {
                uncertainSince = last
            }
        }
        tailReadAskedAt = nil
        for (seq, event) in events where seq >= nextSeq && held[seq] == nil { held[seq] = event }
        release(now: now)
        if !held.isEmpty {
            storeReadsShort += 1
            if storeReadsShort >= policy.storeReadsMax, let first = held.keys.min() {
                nextSeq = first
                release(now: now)
            }
        }
        return pump(now: now)
    }

    /// The read failed (the store is away: a failover takes seconds): it goes again a hold later,
    /// not at the next tick.
    public mutating func storeReadFailed(now: Instant) {
        storeReadRunning = false
        tailReadAskedAt = nil
        heldSince = now
        if uncertainSince != nil { uncertainSince = now }
    }

    /// The gateways that hold streams of the members now.
    public mutating func gateways(_ current: Set<Gateway>, now: Instant) -> [Directive] {
        guard current.count != order.count || !current.allSatisfy({ paths[$0] != nil }) else { return [] }
        for gateway in order where !current.contains(gateway) {
            if let path = paths.removeValue(forKey: gateway) { forget(path) }
        }
        for gateway in current where paths[gateway] == nil {
            paths[gateway] = Path(acknowledged: nextPosition - 1, sent: nextPosition - 1, retryDelay: policy.retry.first)
        }
        order = paths.keys.sorted()
        trim()
        return pump(now: now)
    }

    /// The gateway received the events through `position`.
    public mutating func acknowledged(_ gateway: Gateway, through position: Int64, now: Instant) -> [Directive] {
        guard var path = paths[gateway], position > path.acknowledged else { return [] }
        path.acknowledged = min(position, path.sent)
        if path.acknowledged == path.sent, path.sentAt != nil {
            path.sentAt = nil
            inFlight -= 1
            path.retryDelay = policy.retry.first
        }
        paths[gateway] = path
        trim()
        return pump(now: now)
    }

    /// The batch in flight to `gateway` failed (its call did): it goes again after the retry delay.
    public mutating func failed(_ gateway: Gateway, now: Instant) {
        guard var path = paths[gateway], path.sentAt != nil else { return }
        path.sentAt = nil
        path.sent = path.acknowledged
        inFlight -= 1
        path.resendAt = now.advanced(by: path.retryDelay)
        resending += 1
        path.retryDelay = policy.retry.next(after: path.retryDelay)
        paths[gateway] = path
    }

    /// Timers: a gap held too long is read from the store; a failed batch whose retry delay is
    /// over, or one unanswered past the acknowledgement timeout, is sent again.
    public mutating func tick(now: Instant) -> [Directive] {
        guard !held.isEmpty || uncertainSince != nil || inFlight > 0 || resending > 0 else { return [] }
        var directives: [Directive] = []
        if let first = held.keys.min(), !storeReadRunning, let since = heldSince, since.advanced(by: policy.holdMax) <= now {
            storeReadRunning = true
            heldSince = now
            directives.append(.readStore(after: nextSeq - 1, before: first))
        } else if !storeReadRunning, let since = uncertainSince, since.advanced(by: policy.holdMax) <= now {
            storeReadRunning = true
            tailReadAskedAt = now
            directives.append(.readStore(after: nextSeq - 1, before: .max))
        }
        var resend = false
        for gateway in order where inFlight > 0 || resending > 0 {
            guard var path = paths[gateway] else { continue }
            if let sentAt = path.sentAt, sentAt.advanced(by: policy.ackTimeout) <= now {
                // Unanswered: lost on its way, or its acknowledgement was. It waited long enough.
                path.sentAt = nil
                path.sent = path.acknowledged
                path.retryDelay = policy.retry.next(after: path.retryDelay)
                inFlight -= 1
            } else if let resendAt = path.resendAt, resendAt <= now {
                path.resendAt = nil
                resending -= 1
            } else {
                continue
            }
            paths[gateway] = path
            resend = true
        }
        return resend ? directives + pump(now: now) : directives
    }

    private mutating func forget(_ path: Path) {
        if path.sentAt != nil { inFlight -= 1 }
        if path.resendAt != nil { resending -= 1 }
    }

    private mutating func release(now: Instant) {
        while let event = held.removeValue(forKey: nextSeq) {
            append(event)
            nextSeq += 1
            storeReadsShort = 0
        }
        while let first = parked.first, first.seq < nextSeq {
            append(first.event)
            parked.removeFirst()
        }
        heldSince = held.isEmpty ? nil : (heldSince ?? now)
    }

    private mutating func append(_ event: Event) {
        retained.append(event)
        nextPosition += 1
        if retained.count > policy.retainedMax {
            let excess = retained.count - policy.retainedMax
            retained.removeFirst(excess)
            retainedFrom += Int64(excess)
        }
        if paths.isEmpty { trim() }
    }

    /// Forgets the events every gateway acknowledged.
    private mutating func trim() {
        // A loop, not `paths.values.map(\.acknowledged).min()`: in this generic type that key path
        // is instantiated at run time on every call (2.5 % of a worker's CPU at 1,000 msg/s).
        var done = nextPosition - 1
        for path in paths.values { done = min(done, path.acknowledged) }
        let count = Int(min(max(0, done - retainedFrom + 1), Int64(retained.count)))
        guard count > 0 else { return }
        retained.removeFirst(count)
        retainedFrom += Int64(count)
    }

    /// A batch to every gateway with nothing in flight or waiting to be resent, and events it has
    /// not been sent.
    private mutating func pump(now: Instant) -> [Directive] {
        var directives: [Directive] = []
        for gateway in order {
            guard var path = paths[gateway], path.sentAt == nil, path.resendAt == nil, path.sent < nextPosition - 1 else { continue }
            // A gateway behind what is kept gets what is kept: its streams see the gap and end.
            let from = max(path.sent + 1, retainedFrom)
            let last = min(nextPosition - 1, from + Int64(policy.batchMax) - 1)
            var events: [Event] = []
            var total = 0
            for index in Int(from - retainedFrom)...Int(last - retainedFrom) {
                let next = cost(retained[index])
                guard events.isEmpty || total + next <= policy.batchCostMax else { break }
                total += next
                events.append(retained[index])
            }
            path.sent = from + Int64(events.count) - 1
            path.acknowledged = max(path.acknowledged, from - 1)
            path.sentAt = now
            paths[gateway] = path
            inFlight += 1
            directives.append(.send(gateway, from: from, events: events))
        }
        return directives
    }
}
