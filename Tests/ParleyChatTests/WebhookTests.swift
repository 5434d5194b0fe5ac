import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

/// An endpoint in memory: records what each node delivered, and can be down (it answers
/// nothing but failures) or have a node it hears from be dead.
final class RecordingWebhookEndpoint: Sendable {
    struct Received: Sendable, Hashable {
        var id: String
        var type: WebhookEventType
        /// Nil for what belongs to no conversation (a report).
        var conversation: ConversationID?
        /// `data.message.seq` of a message.
        var seq: Int64?
        var node: String
        var body: [UInt8] = []
    }

    let received = Mutex<[Received]>([])
    let down = Mutex(false)
    let dead = Mutex<Set<String>>([])

    struct Sender: WebhookSender {
        let node: String
        let endpoint: RecordingWebhookEndpoint

        func deliver(_ delivery: WebhookDelivery, to _: WebhookEndpoint) async -> WebhookOutcome {
            // A dead node's process sends nothing: its tasks, still running in this test's
            // process, get nowhere.
            if endpoint.dead.withLock({ $0.contains(node) }) {
                try? await Task.sleep(for: .milliseconds(20))
                return .failed(retryAfter: nil, reason: "this node is dead")
            }
            if endpoint.down.withLock({ $0 }) { return .failed(retryAfter: nil, reason: "503 the endpoint is down") }
            let json = try? JSONSerialization.jsonObject(with: Data(delivery.body)) as? [String: Any]
            let seq = ((json?["data"] as? [String: Any])?["message"] as? [String: Any])?["seq"] as? Int
            endpoint.received.withLock {
                $0.append(Received(id: delivery.id, type: delivery.type, conversation: delivery.conversationId, seq: seq.map(Int64.init), node: node, body: delivery.body))
            }
            return .delivered
        }
    }

    func of(_ conversation: ConversationID) -> [Received] { received.withLock { $0.filter { $0.conversation == conversation } } }

    /// What was received with repeats (same ID) left out; each repeat must be of the same fact.
    func once(_ conversation: ConversationID) -> [Received] {
        var seen: Set<String> = []
        return of(conversation).filter { seen.insert($0.id).inserted }
    }
}

@Suite(.serialized) struct WebhookTests {
    static let (alice, bob, carol, dave): (UserID, UserID, UserID, UserID) = ("u_alice", "u_bob", "u_carol", "u_dave")

    /// Workers with conversations, users' actors and presence shards, each delivering webhooks
    /// through its own sender to `endpoint`, over one store.
    func startCluster(
        _ endpoint: RecordingWebhookEndpoint, store: InMemoryChatStore, workers: [String], recoveryWindow: Duration = .seconds(10)
    ) async throws -> LoopbackCluster {
        try await registerUsers([Self.alice, Self.bob, Self.carol, Self.dave], in: store)
        var policy = WebhookPolicy()
        policy.retry = Backoff(first: .milliseconds(50), max: .milliseconds(200))
        policy.saveEvery = .milliseconds(200)
        let endpoints = [WebhookEndpoint(name: "bots", url: "http://127.0.0.1:1/unused", secret: Array(repeating: 7, count: 32), types: Set(WebhookEventType.allCases))]
        let firstSeen = try await WebhookSettings(endpoints: endpoints, sender: RecordingWebhookEndpoint.Sender(node: "", endpoint: endpoint))
            .recordingFirstSeen(in: store, now: Date().addingTimeInterval(-1)).firstSeen
        let settings = policy
        let cluster = try LoopbackCluster { system, _ in
            guard system.settings.roles.contains(.worker) else { return }
            let sender = RecordingWebhookEndpoint.Sender(node: system.settings.name, endpoint: endpoint)
            var delivery = DeliveryTimings()
            delivery.recoveryWindow = recoveryWindow
            let services = ChatServices(store: store, delivery: delivery, webhooks: WebhookSettings(endpoints: endpoints, sender: sender, policy: settings, firstSeen: firstSeen), clock: ContinuousClock())
            ConversationActor.register(on: system, services: services)
            PresenceShard.register(on: system)
        }
        for worker in workers { try await cluster.start(worker) }
        try await cluster.start("node-g", roles: .gateway)
        try await cluster.waitForUp(Set(workers + ["node-g"]))
        return cluster
    }

    func send(_ text: String, from sender: UserID, to conversation: ConversationID, on system: ClusterSystem) async throws -> Message {
        let request = SendMessage(senderId: sender, clientMessageId: UUID().uuidString, text: text)
        let deadline = ContinuousClock.now.advanced(by: .seconds(15))
        while true {
            do {
                return try await ConversationActor.resolve(conversation, using: system).send(request).message
            } catch where ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))  // a client's retry, same clientMessageId
            }
        }
    }

    @Test func everyKindOfEventReachesTheEndpointInTheOrderCommittedEachOnce() async throws {
        let endpoint = RecordingWebhookEndpoint()
        let cluster = try await startCluster(endpoint, store: InMemoryChatStore(), workers: ["node-a", "node-b"])
        defer { Task { await cluster.stopAll() } }
        let system = cluster["node-g"]
        let group = ConversationID.make()
        let conversation = try ConversationActor.resolve(group, using: system)
        _ = try await conversation.create(CreateConversation(creatorId: Self.alice, memberIds: [Self.bob, Self.carol], name: "trio"))
        var sent: [Message] = []
        for (index, sender) in [Self.alice, Self.bob, Self.carol, Self.alice].enumerated() { sent.append(try await send("m\(index)", from: sender, to: group, on: system)) }
        _ = try await conversation.addMembers([Self.dave], by: Self.alice)
        _ = try await conversation.markReceipts(for: Self.bob, deliveredSeq: 4, readSeq: 3)
        _ = try await conversation.markReceipts(for: Self.carol, deliveredSeq: 4, readSeq: nil)
        _ = try await conversation.change(name: "quartet", metadata: nil, by: Self.dave)
        try await conversation.removeMember(Self.carol, by: Self.alice)
        sent.append(try await send("after", from: Self.dave, to: group, on: system))

        let expected: [WebhookEventType] = [
            .conversationCreated, .messageCreated, .messageCreated, .messageCreated, .messageCreated, .memberAdded, .receiptRead,
            .receiptDelivered, .conversationUpdated, .memberRemoved, .messageCreated,
        ]
        try await eventually(timeout: .seconds(10), "every event delivered") { endpoint.of(group).count >= expected.count }
        try await Task.sleep(for: .milliseconds(300))
        let received = endpoint.of(group)
        #expect(received.map(\.type) == expected)
        #expect(received.compactMap(\.seq) == sent.map(\.seq))
        #expect(Set(received.map(\.id)).count == received.count, "an ID twice")
    }

    @Test func anEndpointDownForAWhileGetsEveryEventAfterInOrder() async throws {
        let endpoint = RecordingWebhookEndpoint()
        let cluster = try await startCluster(endpoint, store: InMemoryChatStore(), workers: ["node-a", "node-b"])
        defer { Task { await cluster.stopAll() } }
        let system = cluster["node-g"]
        let group = ConversationID.make()
        _ = try await ConversationActor.resolve(group, using: system).create(CreateConversation(creatorId: Self.alice, memberIds: [Self.bob, Self.carol, Self.dave], name: "all"))
        try await eventually(timeout: .seconds(10), "the creation delivered") { endpoint.of(group).count == 1 }
        endpoint.down.withLock { $0 = true }
        var sent: [Message] = []
        for index in 0..<30 { sent.append(try await send("m\(index)", from: [Self.alice, Self.bob, Self.carol, Self.dave][index % 4], to: group, on: system)) }
        try await Task.sleep(for: .seconds(1))
        #expect(endpoint.of(group).count == 1, "nothing gets through while it is down")
        endpoint.down.withLock { $0 = false }
        try await eventually(timeout: .seconds(10), "every message delivered") { endpoint.of(group).count >= 31 }
        // Every member sends at once: one commit's sends resume in any order.
        let burst = try await withThrowingTaskGroup(of: [Message].self) { tasks in
            for sender in [Self.alice, Self.bob, Self.carol, Self.dave] {
                tasks.addTask {
                    var mine: [Message] = []
                    for index in 0..<25 { mine.append(try await send("burst \(index)", from: sender, to: group, on: system)) }
                    return mine
                }
            }
            return try await tasks.reduce(into: []) { $0 += $1 }
        }
        sent += burst.sorted { $0.seq < $1.seq }
        try await eventually(timeout: .seconds(10), "the burst delivered") { endpoint.of(group).count >= 131 }
        try await Task.sleep(for: .milliseconds(300))
        #expect(endpoint.of(group).compactMap(\.seq) == sent.map(\.seq), "each once, in order")
    }

    @Test func whatTheOwnerOwedWhenItDiedIsDeliveredByTheNextOneInOrderWithTheSameIDs() async throws {
        let endpoint = RecordingWebhookEndpoint()
        let store = InMemoryChatStore()
        // Republishing what was active in the last second does not reach what the endpoint was owed before.
        let cluster = try await startCluster(endpoint, store: store, workers: ["node-a", "node-b", "node-c"], recoveryWindow: .seconds(1))
        defer { Task { await cluster.stopAll() } }
        let system = cluster["node-g"]
        let group = ConversationID.make()
        _ = try await ConversationActor.resolve(group, using: system).create(CreateConversation(creatorId: Self.alice, memberIds: [Self.bob, Self.carol], name: "team"))
        var sent: [Message] = []
        // Delivered as they come, then owed while the endpoint is down.
        for index in 0..<10 { sent.append(try await send("up \(index)", from: Self.bob, to: group, on: system)) }
        try await eventually(timeout: .seconds(10), "the first ten delivered") { endpoint.of(group).count >= 11 }
        endpoint.down.withLock { $0 = true }
        for index in 0..<10 { sent.append(try await send("down \(index)", from: Self.carol, to: group, on: system)) }
        try await eventually(timeout: .seconds(10), "the cursor stored as owed") {
            try await store.conversationsOwingWebhooks(limit: 100).contains(group)
        }
        // Idle for longer than the recovery window: only the stored cursor can bring it back.
        try await Task.sleep(for: .milliseconds(1100))

        let owner = try #require(system.owner(of: ConversationActor.id(group)))
        endpoint.dead.withLock { _ = $0.insert(owner) }
        let victim = cluster[owner]
        cluster.remove(owner)
        await victim.stop()
        endpoint.down.withLock { $0 = false }
        // Nothing more is sent: the node that takes the conversation over finds it owed.
        try await eventually(timeout: .seconds(20), "the owed messages delivered after the failover") {
            endpoint.once(group).compactMap(\.seq).count >= 20
        }
        sent.append(try await send("after", from: Self.alice, to: group, on: system))
        try await eventually(timeout: .seconds(10), "the message after delivered") { endpoint.once(group).compactMap(\.seq).count >= 21 }
        try await Task.sleep(for: .milliseconds(300))

        let once = endpoint.once(group)
        #expect(once.map(\.type) == [.conversationCreated] + Array(repeating: .messageCreated, count: 21))
        #expect(once.compactMap(\.seq) == sent.map(\.seq), "every message, in order")
        let all = endpoint.of(group)
        #expect(all.filter { $0.node == owner }.count >= 11, "the first owner delivered the first ones")
        #expect(all.contains { $0.node != owner && $0.seq != nil }, "the next owner delivered the rest")
        // A repeat is the same fact under the same ID: the first owner's last deliveries, told again.
        let byID = Dictionary(grouping: all, by: \.id)
        #expect(byID.values.allSatisfy { Set($0.map(\.seq)).count == 1 && Set($0.map(\.type)).count == 1 })
        #expect(all.count - once.count <= 10, "at most what the first owner had not stored: \(all.count - once.count) repeats")
        #expect(try await store.conversationsOwingWebhooks(limit: 100).contains(group) == false, "settled in the store")
    }
}
