import Foundation
import Logging
import ParleyCluster
import ParleyModel
import Synchronization

/// A conversation's events on their way to the gateways that hold its members' streams: one
/// delivery per gateway node per batch, in order.
///
/// Messages are released in seq order (a commit that returns early waits for the seqs before it);
/// events then pass one at a time through a single consumer, which looks up the members' gateways
/// in the presence shards and hands each gateway's share to that gateway's ordered path
/// (``OrderedDeliveryStateMachine``).
///
/// The directory is asked for every event, not cached: a cached answer would miss a stream opened
/// after it until it expired, and that stream would never see those events live. (Cost: one call
/// per presence shard of the members per event; a gateway-side catch-up after a stream opens would
/// allow a cache.)
final class ConversationFanOut: Sendable {
    private struct State {
        var machine = OrderedDeliveryStateMachine<String, EventDelivery>()
        /// The next seq to release, and committed messages waiting for the ones before them.
        var nextSeq: Int64
        var held: [Int64: (Message, [UserID])] = [:]
    }

    private let system: ClusterSystem
    private let state: Mutex<State>
    /// Each event with the members it is for (as of when it happened).
    private let events: AsyncStream<(ChatEvent, [UserID])>.Continuation
    private let logger: Logger

    /// - Parameter lastSeq: the conversation's last seq at activation: released messages start after it.
    init(system: ClusterSystem, lastSeq: Int64, logger: Logger) {
        self.system = system
        self.logger = logger
        self.state = Mutex(State(nextSeq: lastSeq + 1))
        let (stream, continuation) = AsyncStream<(ChatEvent, [UserID])>.makeStream()
        self.events = continuation
        Task { [self] in
            for await (event, recipients) in stream {
                let gateways = await gateways(of: recipients)
                for (gateway, users) in gateways.sorted(by: { $0.key < $1.key }) {
                    let action = state.withLock { $0.machine.enqueue(EventDelivery(event: event, recipients: users), to: gateway) }
                    perform(action)
                }
            }
        }
    }

    /// Ends the consumer (the actor was deactivated); deliveries in flight still finish.
    func finish() {
        events.finish()
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
        for (message, members) in ready { events.yield((.message(message), members)) }
    }

    /// Publishes an event that needs no seq order of its own (a receipt, typing), after what came
    /// before it.
    func publish(_ event: ChatEvent, members: [UserID]) {
        events.yield((event, members))
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
            Task { [self] in
                do {
                    try await GatewayInbox.resolve(id: GatewayInbox.id(gateway: gateway), using: system).deliver(batch)
                    perform(state.withLock { $0.machine.delivered(to: gateway) })
                } catch {
                    try? await Task.sleep(for: .milliseconds(100))
                    perform(state.withLock { $0.machine.failed(to: gateway) })
                }
            }
        }
    }

    /// Which gateways hold streams of `members`, from their presence shards.
    private func gateways(of members: [UserID]) async -> [String: [UserID]] {
        let byShard = Dictionary(grouping: members, by: PresenceShard.shard(of:))
        let system = self.system
        return await withTaskGroup(of: [String: [UserID]].self) { group in
            for users in byShard.values {
                group.addTask {
                    guard let first = users.first else { return [:] }
                    return (try? await PresenceShard.resolve(for: first, using: system).gateways(of: users)) ?? [:]
                }
            }
            return await group.reduce(into: [String: [UserID]]()) { merged, part in
                merged.merge(part) { $0 + $1 }
            }
        }
    }
}
