import Foundation
import Logging
import Metrics
import ParleyCluster
import ParleyModel
import Synchronization

/// A conversation's events on their way to the gateways that hold its members' streams: the shell
/// around its ``DeliveryStateMachine``, which decides what goes to which gateway, in what order,
/// and what goes again. This only does the IO it is told — asks the directory, calls the gateways'
/// inboxes through the node's ``GatewayCourier``, reads the store — and ticks the machine while
/// time matters to it (a held seq, an append of unknown outcome, a failed batch waiting for its
/// resend).
///
/// Events queue for a single consumer, which takes everything queued at once and asks the
/// directory once which gateways hold the streams of all those events' members. The directory is
/// asked after the events happened, through the node's ``GatewayDirectory``: its answers are
/// remembered for a lease, and a stream opening on a gateway an answer lacks counts as open only
/// once every node that holds the answer forgot it. Under load one lookup serves every event
/// queued meanwhile.
final class ConversationFanOut: Sendable {
    /// An event and the members it is for, as of when it happened.
    struct Item: Sendable {
        var event: ChatEvent
        var members: [UserID]
        /// A member the event is not for (a typing user).
        var except: UserID?
        var estimatedBytes: Int
    }

    typealias Machine = DeliveryStateMachine<String, Item>

    private enum Input {
        /// `pushTo`: the members a push notification is owed to should they hold no stream.
        case committed(Message, pushTo: [UserID])
        case republished(Message, pushTo: [UserID])
        case published(ChatEvent, except: UserID?)
        case change(MessageChange)
    }

    private struct State {
        var machine: Machine
        /// The members of the conversation as of its latest event: whom messages read back from
        /// the store are for, and whose gateways the deliveries go to.
        var members: [UserID] = []
        /// The directory's freshest answer for each member.
        var gatewayOf = MemberGateways()
        var queued: [(Input, [UserID])] = []
        var consuming = false
        var ticking = false
        /// Store reads failed in a row (logged at warning only the first).
        var failedStoreReads = 0
    }

    /// Reads committed messages of this conversation after a seq (at most `limit`, ascending).
    typealias ReadCommitted = @Sendable (_ after: Int64, _ limit: Int) async throws -> [Message]

    private let directory: GatewayDirectory
    private let courier: GatewayCourier
    /// The conversation's push notifications, when the node sends any: told, for each message,
    /// which of its members hold no stream.
    let pushes: ConversationPushes?
    private let readCommitted: ReadCommitted
    private let state: Mutex<State>
    private let clock: any ClusterClock
    private let logger: Logger

    /// - Parameters:
    ///   - lastSeq: the conversation's last seq at activation: released messages start after it.
    ///   - members: its members at activation: whom what a store read finds is for until an event
    ///     says otherwise (an owner whose first append's outcome is lost reads it back before any
    ///     event came).
    ///   - timings: how long committed messages wait for a seq before them that this owner was not
    ///     told of (after it the missing seqs are read from the store, ``readCommitted``), and how
    ///     long after a failed call its batch goes again.
    init(
        directory: GatewayDirectory, courier: GatewayCourier, lastSeq: Int64, members: [UserID], timings: DeliveryTimings = DeliveryTimings(),
        clock: any ClusterClock, logger: Logger, pushes: ConversationPushes? = nil, readCommitted: @escaping ReadCommitted
    ) {
        self.directory = directory
        self.pushes = pushes
        self.clock = clock
        self.courier = courier
        self.readCommitted = readCommitted
        self.logger = logger
        var policy = Machine.Policy()
        policy.holdMax = timings.holdMax
        policy.retry = timings.retry
        // Every call to a gateway ends, at the latest with the cluster's call timeout, and its
        // outcome is reported: the machine's own timeout is only a backstop.
        policy.ackTimeout = courier.callTimeout * 2
        // A batch is one delivery call, under the cluster's frame limit (4 MiB by default) with room to spare.
        policy.batchCostMax = 1 << 20
        self.state = Mutex(State(machine: Machine(releasedThrough: lastSeq, policy: policy, cost: \.estimatedBytes), members: members))
    }

    /// A message was committed: it goes to `members`' streams once every seq before it has.
    ///
    /// Commits of a conversation end in seq order, but their answers may come out of it, so a
    /// message can wait for the ones before it; a seq that never comes (its commit reached the
    /// store but its answer was lost) is read from the store after `holdMax`.
    func committed(_ message: Message, members: [UserID], pushTo: [UserID] = []) {
        enqueue(.committed(message, pushTo: pushTo), members: members)
    }

    /// A message committed before, found again (a send's retry, a new owner's recovery): released
    /// in order if it is still to be (this owner committed it, but the commit's answer was lost),
    /// else sent once more — streams drop a seq they already wrote.
    func republish(_ message: Message, members: [UserID], pushTo: [UserID] = []) {
        enqueue(.republished(message, pushTo: pushTo), members: members)
    }

    /// `message` may be owed to `pushTo` as a push notification (an earlier owner owed it): decided
    /// once the presence shards can tell, as for a message found again.
    func owedAgain(_ message: Message, pushTo: [UserID]) {
        decideLater(message, pushTo)
    }

    /// An event that needs no seq order of its own (a receipt, typing, a change to the
    /// conversation), after what came before it; not for `except`.
    func publish(_ event: ChatEvent, members: [UserID], except: UserID? = nil) {
        enqueue(.published(event, except: except), members: members)
    }

    /// A change to a message: after message `change.afterSeq`, so after the message it changes.
    func publish(_ change: MessageChange, members: [UserID]) {
        enqueue(.change(change), members: members)
    }

    /// An append failed without saying whether it committed (the store's answer lost after its
    /// `COMMIT`, a timeout). When it did commit and nothing is committed after it, no later seq
    /// shows the gap, and only a retry of its send would publish it — one that may never come if
    /// the sender is gone. So after `holdMax` the store is read past the last released seq.
    func appendUncertain() {
        logger.trace("an append's outcome is not known; the store will be read")
        state.withLock { $0.machine.commitUncertain(now: clock.now) }
        startTicking()
    }

    /// Seqs held back waiting for the ones before them (for tests).
    var heldCount: Int { state.withLock { $0.machine.heldCount } }

    private func enqueue(_ input: Input, members: [UserID]) {
        let start = state.withLock { state -> Bool in
            state.queued.append((input, members))
            defer { state.consuming = true }
            return !state.consuming
        }
        if start { Task(executorPreference: courier.preferredExecutor) { [self] in await consume() } }
    }

    /// The single consumer: runs while events are queued, in the order they were queued.
    private func consume() async {
        while true {
            let batch = state.withLock { state -> [(Input, [UserID])] in
                defer { state.queued = [] }
                if state.queued.isEmpty { state.consuming = false }
                return state.queued
            }
            guard !batch.isEmpty else { return }
            // The directory's word alone decides the gateways: this node's view of the membership
            // may lag (a node that just started or rejoined has not heard of every gateway, and may
            // still hold a restarted gateway's old incarnation as down).
            let askedAt = clock.now
            let (answer, presumed) = await directory.gatewaysAndPresumed(of: Array(Set(batch.flatMap(\.1))))
            logger.trace("the directory answered", metadata: ["directory.answer": "\(answer.sorted { $0.key < $1.key })"])
            var owed: [(Message, offline: [UserID], online: [UserID])] = []
            var undecided: [(Message, [UserID])] = []
            let directives = state.withLock { state -> [Machine.Directive] in
                let now = clock.now
                var directives = state.machine.gateways(state.gatewayOf.remember(answer, askedAt: askedAt), now: now)
                for (input, members) in batch {
                    state.members = members
                    switch input {
                    case .committed(let message, let pushTo):
                        directives += state.machine.committed(message.seq, Self.item(.message(message), members), now: now)
                        if !pushTo.isEmpty {
                            let split = Self.owed(message, pushTo, answer, presumed: presumed)
                            owed.append((message, split.offline, split.online))
                            if !split.presumed.isEmpty { undecided.append((message, split.presumed)) }
                        }
                    case .republished(let message, let pushTo):
                        directives += state.machine.republished(message.seq, Self.item(.message(message), members), now: now)
                        if !pushTo.isEmpty { decideLater(message, pushTo) }
                    case .published(let event, let except):
                        directives += state.machine.published(Self.item(event, members, except: except), now: now)
                    case .change(let change):
                        directives += state.machine.published(Self.item(.change(change), members), afterSeq: change.afterSeq, now: now)
                    }
                }
                return directives
            }
            perform(directives)
            for (message, offline, online) in owed { pushes?.committed(message, offline: offline, online: online) }
            for (message, members) in undecided { decideLater(message, members) }
        }
    }

    /// Who of `pushTo` is owed `message`, decided once the presence shards can tell. A shard that
    /// just started counts every user it knows no stream of as streaming on every gateway for a
    /// session lease, until the gateways have renewed their streams with it (so that no event is
    /// withheld from a stream it has not heard of), and a directory remembers such an answer for
    /// its own lease. Shards start when the ring changes — after an owner died, as its
    /// conversations' new owner republishes what it may not have handed on — and on their first
    /// call: asked at once, their users would all look online, and none would be owed anything.
    /// A member still presumed then is taken as offline: a notification too many shows once.
    private func decideLater(_ message: Message, _ pushTo: [UserID]) {
        guard let pushes else { return }
        let (directory, clock) = (directory, clock)
        Task {
            try? await clock.sleep(for: PresenceShard.sessionLease + GatewayDirectory.lease)
            let (answer, presumed) = await directory.gatewaysAndPresumed(of: pushTo)
            let split = Self.owed(message, pushTo, answer, presumed: presumed)
            pushes.committed(message, offline: split.offline + split.presumed, online: split.online)
        }
    }

    /// Which of `pushTo` hold no stream by the directory's `answer`, which do, and which the
    /// answer names on gateways only by presumption.
    private static func owed(
        _ message: Message, _ pushTo: [UserID], _ answer: [UserID: [String]], presumed: Set<UserID>
    ) -> (offline: [UserID], online: [UserID], presumed: [UserID]) {
        var split: (offline: [UserID], online: [UserID], presumed: [UserID]) = ([], [], [])
        for member in pushTo {
            if presumed.contains(member) {
                split.presumed.append(member)
            } else if answer[member]?.isEmpty == false {
                split.online.append(member)
            } else {
                split.offline.append(member)
            }
        }
        return split
    }

    private static func item(_ event: ChatEvent, _ members: [UserID], except: UserID? = nil) -> Item {
        Item(event: event, members: members, except: except, estimatedBytes: EventDelivery(event: event, recipients: members).estimatedBytes)
    }

    private func perform(_ directives: [Machine.Directive]) {
        for directive in directives {
            switch directive {
            case .send(let gateway, let from, let items):
                send(items, from: from, to: gateway)
            case .readStore(let after, let before):
                Task(executorPreference: courier.preferredExecutor) { [self] in await readStore(after: after, before: before) }
            }
        }
        if state.withLock({ $0.machine.needsTicks }) { startTicking() }
    }

    /// Hands a batch to the courier, each event for the members whose streams that gateway holds
    /// (as the directory last said), and reports the outcome to the machine.
    private func send(_ items: [Item], from: Int64, to gateway: String) {
        let gatewayOf = state.withLock { $0.gatewayOf }
        let deliveries = items.compactMap { item -> EventDelivery? in
            let recipients = item.members.filter { $0 != item.except && gatewayOf.holds($0, on: gateway) }
            return recipients.isEmpty ? nil : EventDelivery(event: item.event, recipients: recipients)
        }
        let through = from + Int64(items.count) - 1
        if logger.logLevel <= .trace {
            let messages = deliveries.compactMap { delivery -> String? in
                guard case .message(let message) = delivery.event else { return nil }
                return "\(message.seq) to \(delivery.recipients)"
            }
            logger.trace("batch sent", metadata: [
                "gateway": "\(gateway)", "batch.from": "\(from)", "batch.through": "\(through)",
                "events.count": "\(deliveries.count)", "messages": "\(messages)",
            ])
        }
        guard !deliveries.isEmpty else {
            perform(state.withLock { $0.machine.acknowledged(gateway, through: through, now: clock.now) })
            return
        }
        Task(executorPreference: courier.preferredExecutor) { [self] in
            if await courier.deliver(deliveries, to: gateway) {
                perform(state.withLock { $0.machine.acknowledged(gateway, through: through, now: clock.now) })
            } else {
                Self.failedBatches.increment()
                state.withLock { $0.machine.failed(gateway, now: clock.now) }
                startTicking()
            }
        }
    }

    private func readStore(after: Int64, before: Int64) async {
        do {
            let found = try await readCommitted(after, Int(min(before - after - 1, 500)))
                .filter { $0.seq < before }
            logger.trace("store read", metadata: ["after.seq": "\(after)", "found": "\(found.map(\.seq))"])
            let failures = state.withLock { state in
                defer { state.failedStoreReads = 0 }
                return state.failedStoreReads
            }
            if failures > 0 { logger.info("read held-back seqs from the store again", metadata: ["failed.reads": "\(failures)"]) }
            if !found.isEmpty {
                Self.repairedMessages.increment(by: found.count)
                logger.warning("committed seqs this owner was not told of were read from the store", metadata: [
                    "after.seq": "\(after)", "before.seq": "\(before == .max ? "-" : "\(before)")", "read.count": "\(found.count)",
                ])
            }
            // What the store read found was committed before the read, perhaps after the directory
            // was last asked: it goes out by an answer asked after the read, which names every
            // stream opened before it was committed (the replay of one opened later has it).
            var answer: [UserID: [String]]?
            let askedAt = clock.now
            if !found.isEmpty { answer = await directory.gateways(of: state.withLock { $0.members }) }
            perform(state.withLock { state in
                let members = state.members
                var directives: [Machine.Directive] = []
                if let answer { directives += state.machine.gateways(state.gatewayOf.remember(answer, askedAt: askedAt), now: clock.now) }
                return directives + state.machine.storeRead(found.map { ($0.seq, Self.item(.message($0), members)) }, now: clock.now)
            })
        } catch {
            // Once per outage at warning: through a failover every conversation retries each second.
            let first = state.withLock { state in
                state.machine.storeReadFailed(now: clock.now)
                defer { state.failedStoreReads += 1 }
                return state.failedStoreReads == 0
            }
            logger.log(level: first ? .warning : .debug, "cannot read held-back seqs from the store; trying again", metadata: ["error": "\(error)"])
        }
    }

    /// Ticks the machine while it needs time to move, every `tickEvery`. While a failed batch waits
    /// for its resend, the directory is asked again first: a gateway no member streams on any more
    /// (it died, its streams moved) is let go instead of being called for good.
    private func startTicking() {
        let start = state.withLock { state -> Bool in
            defer { state.ticking = true }
            return !state.ticking
        }
        guard start else { return }
        Task { [self] in
            while true {
                try? await clock.sleep(for: Self.tickEvery)
                let members = state.withLock { $0.machine.isResending ? $0.members : nil }
                let askedAt = clock.now
                let answer = if let members { await directory.gateways(of: members) } else { [UserID: [String]]?.none }
                let (directives, more) = state.withLock { state -> ([Machine.Directive], Bool) in
                    let now = clock.now
                    var directives: [Machine.Directive] = []
                    if let answer {
                        directives += state.machine.gateways(state.gatewayOf.remember(answer, askedAt: askedAt), now: now)
                    }
                    directives += state.machine.tick(now: now)
                    state.ticking = state.machine.needsTicks
                    return (directives, state.ticking)
                }
                perform(directives)
                if !more { return }
            }
        }
    }

    static let tickEvery: Duration = .milliseconds(100)
    static let repairedMessages = Counter(label: "parley.fanout.held_seqs_read_from_store")
    static let failedBatches = Counter(label: "parley.fanout.failed_batches")
}

/// The times a conversation's delivery keeps. Production keeps the defaults; a simulation takes
/// one guard away at a time (a resend that never comes, a store that is never read) to see that
/// some seed then fails.
public struct DeliveryTimings: Sendable {
    /// How long a committed message waits for a seq before it before the store is read.
    public var holdMax: Duration = .seconds(1)
    /// The wait after a failed call before its batch goes again.
    public var retry = Backoff(first: .milliseconds(200), max: .seconds(2))
    /// How far back a node that takes over a departed owner's conversations republishes their
    /// messages (``ConversationRecovery``); zero: not at all.
    public var recoveryWindow: Duration = ConversationRecovery.window

    public init(holdMax: Duration = .seconds(1)) {
        self.holdMax = holdMax
    }
}

/// Which gateways hold each member's streams, as the directory last said — keeping, for each
/// member, the answer to the latest question. Answers can come back out of the order they were
/// asked (one waits on a shard that does not answer), and an older one may lack a stream that
/// opened since: events sent by it would never reach that stream.
public struct MemberGateways: Sendable {
    private var gateways: [UserID: [String]] = [:]
    private var askedAt: [UserID: ContinuousClock.Instant] = [:]

    public init() {}

    /// Takes `answer`, asked at `askedAt`, for each member it names unless the answer to a later
    /// question is held already. Returns the gateways of the members it names, as now held.
    @discardableResult
    public mutating func remember(_ answer: [UserID: [String]], askedAt: ContinuousClock.Instant) -> Set<String> {
        for (user, gateways) in answer where (self.askedAt[user].map { $0 <= askedAt } ?? true) {
            self.gateways[user] = gateways
            self.askedAt[user] = askedAt
        }
        return Set(answer.keys.flatMap { self.gateways[$0] ?? [] })
    }

    public func holds(_ user: UserID, on gateway: String) -> Bool {
        gateways[user]?.contains(gateway) == true
    }
}
