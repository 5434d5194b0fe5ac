import ParleyModel

/// What a conversation's owner owes its members in push notifications, and when each notice goes:
/// a pure state machine, fed by ``ConversationPushes``.
///
/// A committed message is owed to every member other than its sender who holds no event stream
/// when it is delivered and did not mute the conversation. Bursts coalesce per member: the first
/// message owed goes out at once, and the next notice no sooner than ``Policy/window`` after the
/// last one went, covering every message owed meanwhile ("3 new messages"). A member who reads up
/// to a seq is owed nothing up to it; one whose stream opens is owed nothing not yet sent (the
/// stream shows it). A notice that fails goes again after a backoff (at least what the provider
/// asked for), for ``Policy/giveUpAfter`` at most: a notification that old is news no longer.
public struct PushPlanner: Sendable {
    public typealias Instant = ContinuousClock.Instant

    public struct Policy: Sendable {
        /// The least time between two notices of this conversation to one member.
        public var window: Duration = .seconds(3)
        /// The wait after a failed notice (at least what the provider asked for).
        public var retry = Backoff(first: .seconds(1), max: .seconds(60))
        /// How long a notice that keeps failing is tried again.
        public var giveUpAfter: Duration = .seconds(600)

        public init() {}
    }

    public enum Directive: Sendable, Hashable {
        /// Tell `member` of `latest` and the `count` messages owed up to it.
        case notify(UserID, latest: Message, count: Int)
        /// A notice failed for longer than the policy allows: the messages it owed are dropped.
        case gaveUp(UserID, through: Int64)
    }

    private struct Owed: Sendable {
        /// The seqs owed, ascending.
        var seqs: [Int64]
        var latest: Message
        var dueAt: Instant
        var inFlight = false
        /// When the first attempt that has not succeeded yet failed.
        var failingSince: Instant?
        var failures = 0

        mutating func add(_ message: Message) {
            if seqs.last.map({ $0 < message.seq }) ?? true {
                seqs.append(message.seq)
            } else if let index = seqs.firstIndex(where: { $0 >= message.seq }) {
                if seqs[index] != message.seq { seqs.insert(message.seq, at: index) }
            } else {
                seqs.append(message.seq)
            }
            if message.seq > latest.seq { latest = message }
        }
    }

    public let policy: Policy
    private var owed: [UserID: Owed] = [:]
    private var lastSentAt: [UserID: Instant] = [:]
    /// The latest message the last notice sent to each member showed, until they read it.
    private var lastNotified: [UserID: Int64] = [:]
    /// The highest seq a notice (sent or on its way) or a read covered, per member: a message
    /// found again (a send's retry) is not owed twice.
    private var coveredThrough: [UserID: Int64] = [:]

    /// - Parameter read: how far each member has read (a new owner's start): nothing up to it is owed.
    public init(policy: Policy = Policy(), read: [UserID: Int64] = [:]) {
        self.policy = policy
        self.coveredThrough = read
    }

    /// `message` was committed, or found again; it is owed to `offline` (members without a stream,
    /// who did not mute the conversation, not its sender). The members in `online` hold a stream:
    /// what they are owed and not yet sent is dropped.
    public mutating func committed(_ message: Message, offline: [UserID], online: [UserID], now: Instant) -> [Directive] {
        for member in online {
            if let entry = owed[member], !entry.inFlight { owed[member] = nil }
        }
        var directives: [Directive] = []
        for member in offline where message.seq > coveredThrough[member, default: 0] {
            if owed[member] != nil {
                // In place: the entry's seqs are not copied.
                owed[member]?.add(message)
            } else {
                let dueAt = lastSentAt[member].map { max(now, $0.advanced(by: policy.window)) } ?? now
                owed[member] = Owed(seqs: [message.seq], latest: message, dueAt: dueAt)
            }
            if let directive = release(member, now: now) { directives.append(directive) }
        }
        return directives
    }

    /// A message owed was erased: a notice of it tells of its tombstone, never of what it said.
    public mutating func erased(_ tombstone: Message) {
        for member in Array(owed.keys) where owed[member]?.latest.seq == tombstone.seq {
            owed[member]?.latest = tombstone
        }
    }

    /// A message was deleted for everyone: a notice still owed tells of its tombstone, and a
    /// member whose last notice showed it (and who has not read it since, nor been told of a
    /// later one) is sent one that replaces it — a conversation's notices share a collapse ID
    /// (APNs) and tag (FCM), so the device shows "Message deleted" in its place. Not within the
    /// window: what was said must not stay on a lock screen for seconds more.
    public mutating func deleted(_ tombstone: Message, now: Instant) -> [Directive] {
        erased(tombstone)
        var directives: [Directive] = []
        for member in lastNotified.keys.sorted() where lastNotified[member] == tombstone.seq && owed[member] == nil {
            owed[member] = Owed(seqs: [tombstone.seq], latest: tombstone, dueAt: now)
            if let directive = release(member, now: now) { directives.append(directive) }
        }
        return directives
    }

    /// `member` read up to `seq`: nothing up to it is owed any more.
    public mutating func read(_ member: UserID, through seq: Int64) {
        coveredThrough[member] = max(coveredThrough[member, default: 0], seq)
        if let shown = lastNotified[member], shown <= seq { lastNotified[member] = nil }
        owed[member]?.seqs.removeAll { $0 <= seq }
        if let entry = owed[member], entry.seqs.isEmpty, !entry.inFlight { owed[member] = nil }
    }

    /// The notice to `member` covering up to `seq` went out. What it did not cover waits for the
    /// member's window (``tick(now:)`` releases it).
    public mutating func notified(_ member: UserID, through seq: Int64, now: Instant) {
        lastSentAt[member] = now
        lastNotified[member] = max(lastNotified[member] ?? 0, seq)
        owed[member]?.seqs.removeAll { $0 <= seq }
        guard owed[member]?.seqs.isEmpty == false else {
            owed[member] = nil
            return
        }
        owed[member]?.inFlight = false
        owed[member]?.failures = 0
        owed[member]?.failingSince = nil
        owed[member]?.dueAt = now.advanced(by: policy.window)
    }

    /// The notice to `member` failed; the provider may have said when to try again. It goes again
    /// when ``tick(now:)`` finds it due, unless it has failed for too long.
    public mutating func failed(_ member: UserID, retryAfter: Duration? = nil, now: Instant) -> Directive? {
        guard var entry = owed[member] else { return nil }
        entry.inFlight = false
        entry.failures += 1
        let since = entry.failingSince ?? now
        entry.failingSince = since
        guard now - since < policy.giveUpAfter else {
            owed[member] = nil
            return .gaveUp(member, through: entry.latest.seq)
        }
        entry.dueAt = now.advanced(by: policy.retry.delay(afterFailures: entry.failures, atLeast: retryAfter))
        owed[member] = entry
        return nil
    }

    /// The notices due by `now`, in member order.
    public mutating func tick(now: Instant) -> [Directive] {
        var due: [UserID] = []
        for (member, entry) in owed where !entry.inFlight && entry.dueAt <= now { due.append(member) }
        return due.sorted().compactMap { release($0, now: now) }
    }

    /// Whether a notice waits (for its window or its retry), not on its way.
    public var isWaiting: Bool {
        owed.values.contains { !$0.inFlight }
    }

    /// When the next notice waiting is due.
    public var nextDue: Instant? {
        owed.values.filter { !$0.inFlight }.map(\.dueAt).min()
    }

    /// Members owed a notice, on its way or waiting.
    public var owedCount: Int { owed.count }

    /// The first seq still owed to anyone; nil when nothing is.
    public var firstOwed: Int64? {
        owed.values.compactMap(\.seqs.first).min()
    }

    /// Sends `member`'s notice if it is due and none is on its way.
    private mutating func release(_ member: UserID, now: Instant) -> Directive? {
        guard let entry = owed[member], !entry.inFlight, entry.dueAt <= now else { return nil }
        guard !entry.seqs.isEmpty else {
            owed[member] = nil
            return nil
        }
        owed[member]?.inFlight = true
        coveredThrough[member] = max(coveredThrough[member, default: 0], entry.latest.seq)
        return .notify(member, latest: entry.latest, count: entry.seqs.count)
    }
}
