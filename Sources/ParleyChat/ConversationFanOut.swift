import Foundation
import Logging
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
        var machine = OrderedDeliveryStateMachine<String, EventDelivery>()
        /// The next seq to release, and committed messages waiting for the ones before them.
        var nextSeq: Int64
        var held: [Int64: (Message, [UserID])] = [:]
        /// Events waiting for the consumer, each with the members it is for (as of when it
        /// happened), and whether a consumer is running.
        var queued: [(ChatEvent, [UserID])] = []
        var consuming = false
    }

    private let directory: GatewayDirectory
    private let courier: GatewayCourier
    private let state: Mutex<State>
    private let logger: Logger

    /// - Parameter lastSeq: the conversation's last seq at activation: released messages start after it.
    init(directory: GatewayDirectory, courier: GatewayCourier, lastSeq: Int64, logger: Logger) {
        self.directory = directory
        self.courier = courier
        self.logger = logger
        self.state = Mutex(State(nextSeq: lastSeq + 1))
    }

    /// A message was committed: publish it to `members` once every seq before it was published.
    func committed(_ message: Message, members: [UserID]) {
        let ready = state.withLock { state -> [(Message, [UserID])] in
            guard message.seq >= state.nextSeq else { return [] }
            state.held[message.seq] = (message, members)
            var ready: [(Message, [UserID])] = []
            while let next = state.held.removeValue(forKey: state.nextSeq) {
                ready.append(next)
                state.nextSeq += 1
            }
            return ready
        }
        enqueue(ready.map { (.message($0.0), $0.1) })
    }

    /// A message committed before (a send's retry found it): published again unless its seq is
    /// still to be released in order, which publishes it anyway.
    func republish(_ message: Message, members: [UserID]) {
        guard state.withLock({ message.seq < $0.nextSeq }) else { return }
        enqueue([(.message(message), members)])
    }

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

    private func perform(_ action: OrderedDeliveryStateMachine<String, EventDelivery>.Action) {
        switch action {
        case .none:
            break
        case .drop(let gateway, let items):
            logger.warning("gateway unreachable: events dropped (its streams fill gaps from the store)", metadata: [
                "gateway": "\(gateway)", "events.count": "\(items.count)",
            ])
        case .send(let gateway, let batch):
            Task(executorPreference: courier.preferredExecutor) { [self] in
                if await courier.deliver(batch, to: gateway) {
                    perform(state.withLock { $0.machine.delivered(to: gateway) })
                } else {
                    try? await Task.sleep(for: .milliseconds(100))
                    perform(state.withLock { $0.machine.failed(to: gateway) })
                }
            }
        }
    }
}
