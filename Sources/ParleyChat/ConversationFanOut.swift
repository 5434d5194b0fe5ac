import Foundation
import Logging
import Metrics
import ParleyCluster
import ParleyModel
import Synchronization

/// A conversation's events on their way to the gateways that hold its members' streams: one
/// delivery per gateway node per batch, in order.
///
/// Messages are released in seq order (a commit that returns early waits for the seqs before it);
/// events then queue for a single consumer, which takes everything queued at once, asks the
/// presence shards once which gateways hold the streams of all those events' members, and hands
/// each gateway its share, event by event, on that gateway's ordered path
/// (``OrderedDeliveryStateMachine``), through the node's ``GatewayCourier``.
///
/// The directory is asked after the events happened, through the node's ``GatewayDirectory``:
/// its answers are remembered for a lease, and a stream opening on a gateway an answer lacks
/// counts as open only once every node that holds the answer forgot it. Under load one lookup
/// serves every event queued meanwhile.
final class ConversationFanOut: Sendable {
    private struct State {
        // A batch is one delivery call, under the cluster's frame limit (4 MiB by default) with room to spare.
        var machine = OrderedDeliveryStateMachine<String, EventDelivery>(batchCostMax: 1 << 20, cost: { $0.estimatedBytes })
        /// The next seq to release, and committed messages waiting for the ones before them.
        var nextSeq: Int64
        var held: [Int64: (Message, [UserID])] = [:]
        /// Events waiting for the consumer, each with the members it is for (as of when it
        /// happened), and whether a consumer is running.
        var queued: [(ChatEvent, [UserID])] = []
        var consuming = false
        /// A read of held-back seqs from the store is scheduled or running, and how many in a row
        /// left a gap.
        var repairing = false
        var repairsShort = 0
        /// A read of the store past the last released seq is scheduled (after an append whose
        /// outcome is unknown).
        var checkingTail = false
    }

    /// Reads committed messages of this conversation after a seq (at most `limit`, ascending).
    typealias ReadCommitted = @Sendable (_ after: Int64, _ limit: Int) async throws -> [Message]

    private let directory: GatewayDirectory
    private let courier: GatewayCourier
    private let readCommitted: ReadCommitted
    private let holdMax: Duration
    private let state: Mutex<State>
    private let logger: Logger

    /// - Parameters:
    ///   - lastSeq: the conversation's last seq at activation: released messages start after it.
    ///   - holdMax: how long committed messages wait for a seq before them that this owner was not
    ///     told of; after it, the missing seqs are read from the store (``readCommitted``).
    init(
        directory: GatewayDirectory, courier: GatewayCourier, lastSeq: Int64, holdMax: Duration = .seconds(1),
        logger: Logger, readCommitted: @escaping ReadCommitted
    ) {
        self.directory = directory
        self.courier = courier
        self.readCommitted = readCommitted
        self.holdMax = holdMax
        self.logger = logger
        self.state = Mutex(State(nextSeq: lastSeq + 1))
    }

    /// A message was committed: publish it to `members` once every seq before it was published.
    ///
    /// Commits of a conversation end in seq order, but their answers may come out of it, so a
    /// message can wait for the ones before it. A seq that never comes — its commit reached the
    /// store but its answer was lost (a PostgreSQL connection that broke after `COMMIT`) — would
    /// hold back every later message for good; after ``holdMax`` the missing seqs are read from
    /// the store instead (a later seq committed, so they are durable).
    func committed(_ message: Message, members: [UserID]) {
        let (ready, repair) = state.withLock { state -> ([(Message, [UserID])], Bool) in
            guard message.seq >= state.nextSeq else { return ([], false) }
            state.held[message.seq] = (message, members)
            var ready: [(Message, [UserID])] = []
            while let next = state.held.removeValue(forKey: state.nextSeq) {
                ready.append(next)
                state.nextSeq += 1
            }
            let repair = !state.held.isEmpty && !state.repairing
            if repair { state.repairing = true }
            return (ready, repair)
        }
        enqueue(ready.map { (.message($0.0), $0.1) })
        if repair { scheduleRepair() }
    }

    /// A message committed before (a send's retry found it): published again — or, if its seq is
    /// still to be released (this owner committed it, but the commit's answer was lost), released
    /// in order as a commit.
    func republish(_ message: Message, members: [UserID]) {
        guard state.withLock({ message.seq < $0.nextSeq }) else {
            committed(message, members: members)
            return
        }
        enqueue([(.message(message), members)])
    }

    /// An append failed without saying whether it committed (the store's answer lost after its
    /// `COMMIT`, a timeout). When it did commit and nothing is committed after it, no later seq
    /// shows the gap, and only a retry of its send would publish it — one that may never come if
    /// the sender is gone. So after ``holdMax`` the store is read past the last released seq, and
    /// what is found is released as commits are.
    func appendUncertain(members: [UserID]) {
        let schedule = state.withLock { state -> Bool in
            defer { state.checkingTail = true }
            return !state.checkingTail
        }
        guard schedule else { return }
        Task { [self] in
            try? await Task.sleep(for: holdMax)
            let after = state.withLock { state -> Int64 in
                state.checkingTail = false
                return state.nextSeq - 1
            }
            do {
                let found = try await readCommitted(after, 500)
                if !found.isEmpty {
                    Self.repairedMessages.increment(by: found.count)
                    logger.warning("messages whose appends failed without an answer were found committed", metadata: [
                        "after.seq": "\(after)", "read.count": "\(found.count)",
                    ])
                }
                for message in found { committed(message, members: members) }
            } catch {
                logger.warning("cannot read the store after an append of unknown outcome", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Seqs held back waiting for the ones before them (for tests).
    var heldCount: Int { state.withLock { $0.held.count } }

    private func scheduleRepair() {
        Task { [self] in
            try? await Task.sleep(for: holdMax)
            await repair()
        }
    }

    /// Reads the seqs missing before the held ones from the store and releases them; again after
    /// ``holdMax`` while a gap remains (a failed read, or a commit still on its way).
    private func repair() async {
        let gap = state.withLock { state -> (after: Int64, before: Int64, members: [UserID])? in
            guard let first = state.held.keys.min(), let members = state.held[first]?.1 else {
                state.repairing = false
                return nil
            }
            return (state.nextSeq - 1, first, members)
        }
        guard let gap else { return }
        do {
            let found = try await readCommitted(gap.after, Int(min(gap.before - gap.after - 1, 500)))
            Self.repairedMessages.increment(by: found.count)
            logger.warning("committed seqs this owner was not told of were read from the store", metadata: [
                "after.seq": "\(gap.after)", "before.seq": "\(gap.before)", "read.count": "\(found.count)",
            ])
            state.withLock { $0.repairing = false }
            for message in found where message.seq < gap.before { committed(message, members: gap.members) }
        } catch {
            logger.warning("cannot read held-back seqs from the store; trying again", metadata: ["error": "\(error)"])
            state.withLock { $0.repairing = false }
        }
        // Still a gap (and nobody else scheduled a repair): look again later — up to
        // `repairsMax` times, then release what is held past the gap (the streams read it
        // themselves, or end and resume) rather than hold it, and keep this fan-out, for good.
        let (again, skipped) = state.withLock { state -> (Bool, [(Message, [UserID])]) in
            guard !state.held.isEmpty, !state.repairing else {
                state.repairsShort = 0
                return (false, [])
            }
            state.repairsShort += 1
            guard state.repairsShort >= Self.repairsMax, let first = state.held.keys.min() else {
                state.repairing = true
                return (true, [])
            }
            state.repairsShort = 0
            state.nextSeq = first
            var released: [(Message, [UserID])] = []
            while let next = state.held.removeValue(forKey: state.nextSeq) {
                released.append(next)
                state.nextSeq += 1
            }
            state.repairing = !state.held.isEmpty
            return (state.repairing, released)
        }
        if !skipped.isEmpty {
            logger.error("held-back seqs released past a gap the store did not fill", metadata: ["from.seq": "\(skipped[0].0.seq)"])
            enqueue(skipped.map { (.message($0.0), $0.1) })
        }
        if again { scheduleRepair() }
    }

    /// Reads of the store that leave a gap before the held seqs are given up after this many.
    static let repairsMax = 10

    /// Publishes an event that needs no seq order of its own (a receipt, typing), after what came
    /// before it.
    func publish(_ event: ChatEvent, members: [UserID]) {
        enqueue([(event, members)])
    }

    private func enqueue(_ events: [(ChatEvent, [UserID])]) {
        guard !events.isEmpty else { return }
        let start = state.withLock { state -> Bool in
            state.queued += events
            defer { state.consuming = true }
            return !state.consuming
        }
        if start { Task(executorPreference: courier.preferredExecutor) { [self] in await consume() } }
    }

    /// The single consumer: runs while events are queued, in the order they were queued.
    private func consume() async {
        while true {
            let batch = state.withLock { state -> [(ChatEvent, [UserID])] in
                defer { state.queued = [] }
                if state.queued.isEmpty { state.consuming = false }
                return state.queued
            }
            guard !batch.isEmpty else { return }
            let gatewayOf = await directory.gateways(of: Array(Set(batch.flatMap(\.1))))
            for (event, members) in batch {
                var shares: [String: [UserID]] = [:]
                for member in members {
                    for gateway in gatewayOf[member] ?? [] { shares[gateway, default: []].append(member) }
                }
                if shares.isEmpty {
                    logger.trace("no member of this event has an open stream", metadata: ["members.count": "\(members.count)"])
                }
                for (gateway, users) in shares.sorted(by: { $0.key < $1.key }) {
                    perform(state.withLock { $0.machine.enqueue(EventDelivery(event: event, recipients: users), to: gateway) })
                }
            }
        }
    }

    static let repairedMessages = Counter(label: "parley.fanout.held_seqs_read_from_store")

    private func perform(_ action: OrderedDeliveryStateMachine<String, EventDelivery>.Action) {
        switch action {
        case .none:
            break
        case .drop(let gateway, let items):
            logger.warning("events for a gateway dropped: it is not a live member, or could not be reached for a long time", metadata: [
                "gateway": "\(gateway)", "events.count": "\(items.count)",
            ])
        case .send(let gateway, let batch):
            Task(executorPreference: courier.preferredExecutor) { [self] in
                if await courier.deliver(batch, to: gateway) {
                    perform(state.withLock { $0.machine.delivered(to: gateway) })
                } else {
                    try? await Task.sleep(for: .milliseconds(100))
                    let live = courier.isLive(gateway)
                    perform(state.withLock { $0.machine.failed(to: gateway, destinationLive: live, now: .now) })
                }
            }
        }
    }
}
