import Distributed
import Foundation
@_spi(Testing) import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyStoreSQLite
import ParleyTestKit
import Synchronization
import Testing

@testable import ParleyChat

/// Conversations on a three-node loopback TLS cluster. Every node opens the same SQLite file on
/// its own, as separate processes of a local cluster do.
@Suite(.serialized) struct ConversationClusterTests {
    static let members: [UserID] = (0..<50).map { UserID(rawValue: "u_\($0)") }

    final class Stores: Sendable {
        let byNode = Mutex<[String: SQLiteChatStore]>([:])
    }

    struct Fixture {
        let cluster: LoopbackCluster
        let stores: Stores
        let path: String

        func store(_ node: String) -> SQLiteChatStore { stores.byNode.withLock { $0[node]! } }

        /// Stops the nodes and removes the database file.
        func tearDown() async {
            await cluster.stopAll()
            // The nodes' actors may still hold their stores: their background work ends here,
            // before the file goes.
            for store in stores.byNode.withLock({ $0.values }) { store.stopBackgroundWork() }
            stores.byNode.withLock { $0 = [:] }
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
    }

    static func fixture(nodes: [String] = ["node-a", "node-b", "node-c"]) async throws -> Fixture {
        let path = Scratch.path("parley-chat", suffix: ".sqlite")
        let bootstrap = try SQLiteChatStore(path: path)
        try await bootstrap.migrate()
        try await registerUsers(Self.members + ["u_a", "u_b", "u_c", "u_x", "u_y", "u_z"], in: bootstrap)
        let stores = Stores()
        let cluster = try LoopbackCluster { system, cluster in
            guard let store = try? SQLiteChatStore(path: path) else { return }
            stores.byNode.withLock { $0[system.settings.name] = store }
            let services = ChatServices(store: store, clock: ContinuousClock())
            let directory = GatewayDirectory(system: system)
            let courier = GatewayCourier(system: system)
            system.register(kind: ConversationActor.kind) { id, system in
                cluster.recordActivation(id, on: system)
                return try await ConversationActor.activate(id, system: system, services: services, directory: directory, courier: courier)
            }
            ConversationActor.registerDirectTargets(on: system)
        }
        for node in nodes { try await cluster.start(node, callTimeout: .seconds(5)) }
        try await cluster.waitForUp(Set(nodes))
        return Fixture(cluster: cluster, stores: stores, path: path)
    }

    static func createGroup(in store: any ChatStore, members: [UserID] = Self.members) async throws -> ConversationID {
        let id = ConversationID.make()
        try await store.createConversation(ConversationRecord(
            id: id, kind: .group, name: "load", ownerId: members[0], createdAt: Date(),
            members: members.enumerated().map { ConversationMember(userId: $1, role: $0 == 0 ? .owner : .member) }))
        return id
    }

    @Test func fiftyConcurrentSendersGetSeqsOneToNInTheirOwnOrder() async throws {
        let fixture = try await Self.fixture()
        defer { Task { await fixture.tearDown() } }
        let conversation = try await Self.createGroup(in: fixture.store("node-a"))
        let nodes = ["node-a", "node-b", "node-c"]
        let perSender = 8
        let sent = try await withThrowingTaskGroup(of: (UserID, [Int64]).self) { group in
            for (index, sender) in Self.members.enumerated() {
                let system = fixture.cluster[nodes[index % nodes.count]]
                group.addTask {
                    let actor = try ConversationActor.resolve(conversation, using: system)
                    var seqs: [Int64] = []
                    for i in 0..<perSender {
                        let result = try await actor.send(SendMessage(senderId: sender, clientMessageId: UUID().uuidString, text: "\(sender) #\(i)"))
                        #expect(result.created && result.message.text == "\(sender) #\(i)")
                        seqs.append(result.message.seq)
                    }
                    return (sender, seqs)
                }
            }
            return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        let all = sent.values.flatMap { $0 }.sorted()
        #expect(all == Array(1...Int64(Self.members.count * perSender)), "seqs must be exactly 1…N")
        for (sender, seqs) in sent { #expect(seqs == seqs.sorted(), "\(sender)'s messages out of its order: \(seqs)") }
        let stored = try await fixture.store("node-b").messages(in: conversation, after: 0, limit: 1000)
        #expect(stored.map(\.seq) == all)
        for message in stored {
            let position = Int(message.text.split(separator: "#").last.flatMap { Int($0) } ?? -1)
            #expect(sent[message.senderId]?[position] == message.seq)
        }
    }

    @Test func theSameClientMessageIdThroughThreeNodesMakesOneMessage() async throws {
        let fixture = try await Self.fixture()
        defer { Task { await fixture.tearDown() } }
        let conversation = try await Self.createGroup(in: fixture.store("node-a"))
        let clientMessageId = UUID().uuidString
        let results = try await withThrowingTaskGroup(of: SendResult.self) { group in
            for node in ["node-a", "node-b", "node-c"] {
                let system = fixture.cluster[node]
                for _ in 0..<10 {
                    group.addTask {
                        try await ConversationActor.resolve(conversation, using: system)
                            .send(SendMessage(senderId: Self.members[1], clientMessageId: clientMessageId, text: "once"))
                    }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(Set(results.map(\.message)).count == 1, "every caller gets the one message")
        #expect(results.first?.message.seq == 1)
        #expect(results.filter(\.created).count == 1, "exactly one call created it")
        #expect(try await fixture.store("node-c").messages(in: conversation, after: 0, limit: 10).count == 1)
    }

    @Test func splitBrainStaleOwnersAreFencedAndSeqsStayGapless() async throws {
        let fixture = try await Self.fixture()
        defer { Task { await fixture.tearDown() } }
        let conversation = try await Self.createGroup(in: fixture.store("node-a"))
        let id = ConversationActor.id(conversation)
        // node-a and node-b each believe they own everything.
        fixture.cluster["node-a"].forceRing(["node-a"])
        fixture.cluster["node-b"].forceRing(["node-b"])
        var seqs: [Int64] = []
        for round in 0..<10 {
            for node in ["node-a", "node-b"] {
                let result = try await ConversationActor.resolve(conversation, using: fixture.cluster[node])
                    .send(SendMessage(senderId: Self.members[2], clientMessageId: UUID().uuidString, text: "\(node) \(round)"))
                seqs.append(result.message.seq)
            }
        }
        #expect(seqs == Array(1...20), "unique and gapless, in the order acknowledged")
        let activations = fixture.cluster.activations.withLock { $0[id] ?? [] }
        #expect(activations.filter { $0 == "node-a" }.count >= 5 && activations.filter { $0 == "node-b" }.count >= 5,
            "each owner was fenced off by the other and re-activated: \(activations)")
        let stored = try await fixture.store("node-c").messages(in: conversation, after: 0, limit: 100)
        #expect(stored.map(\.seq) == Array(1...20))
    }

    @Test func nonMembersSeeNotFoundAndInvalidSendsAreRefused() async throws {
        let fixture = try await Self.fixture(nodes: ["node-a", "node-b"])
        defer { Task { await fixture.tearDown() } }
        let conversation = try await Self.createGroup(in: fixture.store("node-a"), members: ["u_a", "u_b", "u_c"])
        let actor = try ConversationActor.resolve(conversation, using: fixture.cluster["node-b"])
        for (request, code) in [
            (SendMessage(senderId: "u_mallory", clientMessageId: UUID().uuidString, text: "hi"), "not_found"),
            (SendMessage(senderId: "u_a", clientMessageId: "not-a-uuid", text: "hi"), "invalid_request"),
            (SendMessage(senderId: "u_a", clientMessageId: UUID().uuidString, text: " \n\t "), "invalid_request"),
            (SendMessage(senderId: "u_a", clientMessageId: UUID().uuidString, text: String(repeating: "é", count: 4001)), "invalid_request"),
        ] {
            do {
                _ = try await actor.send(request)
                Issue.record("\(request) must be refused")
            } catch let error as ClusterCallError {
                #expect(error.code.rawValue == code, "\(request): \(error)")
            }
        }
        do {
            _ = try await ConversationActor.resolve(.make(), using: fixture.cluster["node-a"]).snapshot(for: "u_a")
            Issue.record("an unknown conversation must be not_found")
        } catch let error as ClusterCallError {
            #expect(error.code.rawValue == "not_found")
        }
        // A note on a message of a conversation with none yet (or on seq 0 or below) is not_found,
        // not a crash of its owner (an empty range `1...0` traps).
        for seq: Int64 in [1, 0, -5] {
            do {
                _ = try await actor.annotate(seq: seq, key: "translation", value: "hola", by: "u_a")
                Issue.record("a note on seq \(seq) of an empty conversation must be refused")
            } catch let error as ClusterCallError {
                #expect(error.code.rawValue == "not_found", "seq \(seq): \(error)")
            }
        }
        // Receipts through the actor: forward only, never past lastSeq.
        _ = try await actor.send(SendMessage(senderId: "u_a", clientMessageId: UUID().uuidString, text: "one"))
        _ = try await actor.send(SendMessage(senderId: "u_a", clientMessageId: UUID().uuidString, text: "two"))
        #expect(try await actor.markReceipts(for: "u_b", deliveredSeq: 2, readSeq: 1) == ConversationMember(userId: "u_b", role: .member, deliveredSeq: 2, readSeq: 1))
        #expect(try await actor.markReceipts(for: "u_b", deliveredSeq: 1, readSeq: 0) == ConversationMember(userId: "u_b", role: .member, deliveredSeq: 2, readSeq: 1))
        do {
            _ = try await actor.markReceipts(for: "u_b", deliveredSeq: nil, readSeq: 3)
            Issue.record("a receipt past lastSeq must be refused")
        } catch let error as ClusterCallError {
            #expect(error.code.rawValue == "invalid_request")
        }
        let snapshot = try await actor.snapshot(for: "u_c")
        #expect(snapshot.lastSeq == 2)
        #expect(snapshot.lastSeq - (snapshot.member("u_b")?.readSeq ?? 0) == 1, "u_b's unread count")
        #expect(snapshot.lastSeq - (snapshot.member("u_c")?.readSeq ?? 0) == 2, "u_c's unread count")
    }

    @Test func conversationsAreCreatedThroughTheirActorOnceEvenForDirectPairs() async throws {
        let fixture = try await Self.fixture(nodes: ["node-a", "node-b"])
        defer { Task { await fixture.tearDown() } }
        let group = ConversationID.make()
        let created = try await ConversationActor.resolve(group, using: fixture.cluster["node-a"])
            .create(CreateConversation(creatorId: "u_a", memberIds: ["u_b", "u_c", "u_a"], name: "trip"))
        #expect(created.created && created.conversation.kind == .group && created.conversation.name == "trip")
        #expect(created.conversation.members.map(\.userId) == ["u_a", "u_b", "u_c"])
        #expect(created.conversation.member("u_a")?.role == .owner)
        let again = try await ConversationActor.resolve(group, using: fixture.cluster["node-b"])
            .create(CreateConversation(creatorId: "u_b", memberIds: ["u_a"], name: "trip"))
        #expect(!again.created && again.conversation.id == group)

        // Both users create "the" direct conversation at once: one conversation, one creation.
        let direct = ConversationActor.directID("u_x", "u_y")
        #expect(direct == ConversationActor.directID("u_y", "u_x"))
        let results = try await withThrowingTaskGroup(of: CreateResult.self) { tasks in
            for (creator, other, node) in [("u_x", "u_y", "node-a"), ("u_y", "u_x", "node-b")] as [(UserID, UserID, String)] {
                let system = fixture.cluster[node]
                tasks.addTask { try await ConversationActor.resolve(direct, using: system).create(CreateConversation(creatorId: creator, memberIds: [other])) }
            }
            return try await tasks.reduce(into: []) { $0.append($1) }
        }
        #expect(results.filter(\.created).count == 1)
        #expect(Set(results.map(\.conversation.id)) == [direct])
        #expect(results.allSatisfy { $0.conversation.kind == .direct && $0.conversation.members.count == 2 })
        let activationsBefore = fixture.cluster.activations.withLock { $0[ConversationActor.id(direct)]?.count ?? 0 }

        do {
            _ = try await ConversationActor.resolve(.make(), using: fixture.cluster["node-a"]).create(CreateConversation(creatorId: "u_x", memberIds: ["u_z"]))
            Issue.record("a direct conversation under another ID must be refused")
        } catch let error as ClusterCallError {
            #expect(error.code.rawValue == "invalid_request")
        }
        let sent = try await ConversationActor.resolve(direct, using: fixture.cluster["node-b"])
            .send(SendMessage(senderId: "u_x", clientMessageId: UUID().uuidString, text: "hello"))
        #expect(sent.message.seq == 1)
        let activationsAfter = fixture.cluster.activations.withLock { $0[ConversationActor.id(direct)]?.count ?? 0 }
        #expect(activationsAfter == activationsBefore, "the concurrent creates left the actor with its newest epoch: no fencing of itself")
    }

    /// The owner of a busy conversation stops abruptly. Senders retry like a gateway does (same
    /// clientMessageId, until acknowledged): nothing acknowledged is lost, nothing is stored twice,
    /// seqs stay gapless, and each sender's messages keep their order.
    @Test func whenTheOwnerDiesMidBurstRetriedSendsLoseAndDuplicateNothing() async throws {
        let fixture = try await Self.fixture()
        defer { Task { await fixture.tearDown() } }
        // A conversation owned by node-c, the node that will die.
        var candidate = ConversationID.make()
        while fixture.cluster["node-a"].owner(of: ConversationActor.id(candidate)) != "node-c" { candidate = .make() }
        let conversation = candidate
        _ = try await ConversationActor.resolve(conversation, using: fixture.cluster["node-a"])
            .create(CreateConversation(creatorId: Self.members[0], memberIds: Array(Self.members.prefix(10)), name: "failover"))

        let senders = Array(Self.members.prefix(10))
        let perSender = 30
        let burst = Task {
            try await withThrowingTaskGroup(of: (UserID, [Message], Int).self) { group in
                for (index, sender) in senders.enumerated() {
                    let system = fixture.cluster[index % 2 == 0 ? "node-a" : "node-b"]
                    group.addTask {
                        var acknowledged: [Message] = []
                        var retries = 0
                        for i in 0..<perSender {
                            let request = SendMessage(senderId: sender, clientMessageId: UUID().uuidString, text: "\(sender) \(i)")
                            let deadline = ContinuousClock.now.advanced(by: .seconds(20))
                            while true {
                                do {
                                    acknowledged.append(try await ConversationActor.resolve(conversation, using: system).send(request).message)
                                    break
                                } catch where ContinuousClock.now < deadline {
                                    retries += 1
                                    try await Task.sleep(for: .milliseconds(20))  // the gateway's retry, same clientMessageId
                                }
                            }
                        }
                        return (sender, acknowledged, retries)
                    }
                }
                return try await group.reduce(into: ([UserID: [Message]](), 0)) { $0.0[$1.0] = $1.1; $0.1 += $1.2 }
            }
        }
        try await eventually(timeout: .seconds(10), "the burst is under way") {
            (try await fixture.store("node-a").conversation(conversation)?.lastSeq ?? 0) >= 40
        }
        let victim = fixture.cluster["node-c"]
        fixture.cluster.remove("node-c")
        await victim.stop()

        let (acknowledged, retries) = try await burst.value
        #expect(retries > 0, "the kill must have hit sends in flight (else this test proves nothing)")
        let stored = try await fixture.store("node-a").messages(in: conversation, after: 0, limit: 1000)
        #expect(stored.map(\.seq) == Array(1...Int64(stored.count)), "gapless")
        #expect(Set(stored.map(\.clientMessageId)).count == stored.count, "no clientMessageId stored twice")
        #expect(stored.count == senders.count * perSender, "every send stored exactly once")
        let storedByID = Dictionary(uniqueKeysWithValues: stored.map { ($0.clientMessageId, $0) })
        for (sender, messages) in acknowledged {
            #expect(messages.count == perSender)
            #expect(messages.allSatisfy { storedByID[$0.clientMessageId] == $0 }, "\(sender): an acknowledged message differs from the stored one")
            #expect(messages.map(\.seq) == messages.map(\.seq).sorted(), "\(sender)'s messages out of order")
        }
        #expect(fixture.cluster["node-a"].owner(of: ConversationActor.id(conversation)) != "node-c")
    }
}
