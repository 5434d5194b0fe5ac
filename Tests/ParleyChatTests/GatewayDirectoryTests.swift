import ParleySimulation
import Foundation
@testable import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

@Suite struct DirectoryCacheStateTests {
    static let ann: UserID = "u_ann", ben: UserID = "u_ben"

    /// An answer (also "no stream") serves for one lease counted from the question.
    @Test func anAnswerServesForOneLeaseFromTheQuestion() {
        var time = ManualTime()
        var cache = DirectoryCacheState(lease: .seconds(3))
        #expect(cache.lookup([Self.ann, Self.ben], now: time.now).missing == [Self.ann, Self.ben])
        let askedAt = time.now
        cache.remember([Self.ann: ["gateway-1"]], for: [Self.ann, Self.ben], askedAt: askedAt, now: time.advance(by: .milliseconds(500)))
        let hit = cache.lookup([Self.ann, Self.ben], now: time.advance(by: .milliseconds(2_499)))
        #expect(hit.known == [Self.ann: ["gateway-1"], Self.ben: []] && hit.missing.isEmpty)
        #expect(cache.lookup([Self.ann, Self.ben], now: time.advance(by: .milliseconds(1))).missing == [Self.ann, Self.ben], "3 s after the question")
    }

    /// Forgetting takes effect at once, and an answer to a question asked before it is not
    /// remembered (it may predate the stream that made the shard ask to forget).
    @Test func aForgottenUserIsAskedAgainAndAnOlderAnswerIsRefused() {
        var time = ManualTime()
        var cache = DirectoryCacheState(lease: .seconds(3))
        cache.remember([:], for: [Self.ann, Self.ben], askedAt: time.now, now: time.now)
        let inFlight = time.advance(by: .milliseconds(100))
        cache.forget([Self.ann], now: time.advance(by: .milliseconds(100)))
        #expect(cache.lookup([Self.ann, Self.ben], now: time.now).missing == [Self.ann])
        cache.remember([:], for: [Self.ann], askedAt: inFlight, now: time.advance(by: .milliseconds(100)))
        #expect(cache.lookup([Self.ann], now: time.now).missing == [Self.ann], "the answer asked for before the forgetting")
        cache.remember([Self.ann: ["gateway-2"]], for: [Self.ann], askedAt: time.now, now: time.now)
        #expect(cache.lookup([Self.ann], now: time.now).known == [Self.ann: ["gateway-2"]], "a question asked after it")
    }

    /// After a rejoin, or on learning of a gateway already up, every answer goes, and so does an
    /// answer to a question asked before.
    @Test func forgettingEverythingDropsEveryAnswerAndRefusesOlderOnes() {
        var time = ManualTime()
        var cache = DirectoryCacheState(lease: .seconds(3))
        cache.remember([Self.ann: ["gateway-1"]], for: [Self.ann, Self.ben], askedAt: time.now, now: time.now)
        let inFlight = time.advance(by: .milliseconds(100))
        cache.forgetAll(now: time.advance(by: .milliseconds(100)))
        #expect(cache.lookup([Self.ann, Self.ben], now: time.now).missing == [Self.ann, Self.ben])
        cache.remember([:], for: [Self.ben], askedAt: inFlight, now: time.now)
        #expect(cache.lookup([Self.ben], now: time.now).missing == [Self.ben], "the answer asked for before")
        cache.remember([Self.ben: ["gateway-2"]], for: [Self.ben], askedAt: time.advance(by: .milliseconds(1)), now: time.now)
        #expect(cache.lookup([Self.ben], now: time.now).known == [Self.ben: ["gateway-2"]], "a question asked after it")
    }
}

@Suite struct DirectoryInvalidationTests {
    static let ann: UserID = "u_ann", ben: UserID = "u_ben"

    /// The shard records who holds an answer until its lease ends, names them when a user's
    /// streams move until they have forgotten (a stream that opens while they are still being told
    /// waits for them too), and after a move to a new owner names every node for one lease.
    @Test func holdersAreNamedUntilTheirLeaseEnds() {
        var time = ManualTime()
        var state = PresenceState(lease: .seconds(6), directoryLease: .seconds(3))
        _ = state.gateways(of: [Self.ann, Self.ben], heldBy: "worker-1", now: time.now, liveGateways: [])
        _ = state.gateways(of: [Self.ann], heldBy: "worker-2", now: time.advance(by: .seconds(2)), liveGateways: [])
        let invalidation = state.directoryInvalidation(for: [Self.ann], now: time.advance(by: .milliseconds(1_500)))
        #expect(invalidation.holders == ["worker-2": .init(users: [Self.ann], leaseEnd: time.at(.seconds(5)))], "worker-1's lease ran out at 3 s")
        #expect(invalidation.everyNodeUntil == nil)
        #expect(state.directoryInvalidation(for: [Self.ann], now: time.now) == invalidation, "still being told")
        state.forgotten([Self.ann], by: "worker-2", leaseEnd: time.at(.seconds(5)))
        #expect(state.directoryInvalidation(for: [Self.ann], now: time.now).isEmpty, "told; the next question records it again")
        #expect(state.directoryInvalidation(for: [Self.ben], now: time.now).isEmpty, "ben's holder's lease ran out too")

        var moved = PresenceState(lease: .seconds(6), directoryLease: .seconds(3), startedAt: time.now)
        #expect(moved.directoryInvalidation(for: [Self.ann], now: time.advance(by: .seconds(1))).everyNodeUntil == time.at(.milliseconds(6_500)))
        #expect(moved.directoryInvalidation(for: [Self.ann], now: time.advance(by: .seconds(2))).isEmpty, "one lease after the move")
    }
}

@Suite(.serialized) struct GatewayDirectoryClusterTests {
    /// A shard that cannot answer (its node just died, before the ring moved) says nothing about
    /// its users: the directory names every gateway not known down for them — each drops what is
    /// not for its streams — rather than "no stream", which would hand their events to nobody.
    @Test func aShardThatCannotAnswerLeavesItsUsersOnEveryGateway() async throws {
        let users = (0..<8).map { UserID(rawValue: "u_\($0)") }
        let cluster = try await startChatCluster(users: users, workers: ["node-a", "node-b"], gateways: ["node-g1", "node-g2"])
        defer { Task { await cluster.stopAll() } }
        let onB = try #require(users.first { cluster["node-a"].owner(of: PresenceShard.id(for: $0)) == "node-b" })
        let onA = try #require(users.first { cluster["node-a"].owner(of: PresenceShard.id(for: $0)) == "node-a" })
        // Past the shards' first lease, in which they name every gateway anyway.
        for user in [onA, onB] { _ = try await PresenceShard.resolve(for: user, using: cluster["node-a"]).presence(of: [user]) }
        try await Task.sleep(for: PresenceShard.sessionLease)
        #expect(await GatewayDirectory(system: cluster["node-a"]).gateways(of: [onA, onB]) == [onA: [], onB: []], "no streams")
        await cluster["node-b"].stop()
        let answer = await GatewayDirectory(system: cluster["node-a"]).gateways(of: [onA, onB])
        // The gateways node-a does not know down: both, unless a starved heartbeat had one declared
        // down. (Had onB's shard moved already, a new shard would name them all as well.)
        let live = cluster["node-a"].members.filter { $0.roles.contains(.gateway) && !$0.status.isTerminal }.map(\.id.name)
        #expect(answer[onA] == [], "its shard answered")
        #expect(!live.isEmpty && Set(answer[onB] ?? []) == Set(live), "its shard could not: every gateway not known down (\(live)), got \(answer[onB] ?? [])")
    }

    /// A node remembers that ann has no stream (it delivered a message to ben only); then ann's
    /// stream opens on another gateway: the next message must reach it live, at once — the shard
    /// made the node forget before the stream counted as open.
    @Test func aStreamOpenedAfterAnAnswerWasRememberedGetsTheNextMessage() async throws {
        let ann: UserID = "u_ann", ben: UserID = "u_ben"
        let cluster = try await startChatCluster(users: [ann, ben], workers: ["node-a", "node-b"], gateways: ["node-g1", "node-g2"])
        defer { Task { await cluster.stopAll() } }
        let received = ["node-g1": RecordedDeliveries(), "node-g2": RecordedDeliveries()]
        let inboxes = received.map { gateway, recorded in GatewayInbox.open(on: cluster[gateway]) { recorded.record($0) } }
        defer { _ = inboxes }

        let conversation = ConversationActor.directID(ann, ben)
        let actor = try ConversationActor.resolve(conversation, using: cluster["node-a"])
        _ = try await actor.create(CreateConversation(creatorId: ann, memberIds: [ben]))
        // Past the shards' first leases (a new owner tells every node, and names every gateway until
        // the gateways' renewals have had their chance), so only holders are told, and ann's
        // shard says she has no stream.
        for user in [ann, ben] { _ = try await PresenceShard.resolve(for: user, using: cluster["node-b"]).presence(of: [user]) }
        try await Task.sleep(for: max(GatewayDirectory.lease, PresenceShard.sessionLease))
        _ = try await PresenceShard.resolve(for: ben, using: cluster["node-b"]).openSession(.init(userId: ben, sessionID: "ben-1"), gateway: "node-g1")
        func send(_ text: String) async throws -> Int64 {
            try await actor.send(SendMessage(senderId: ben, clientMessageId: UUID().uuidString, text: text)).message.seq
        }
        let first = try await send("ann is offline")
        try await eventually(timeout: .seconds(10), "node-g1 gets the first message") { received["node-g1"]?.messages.map(\.seq) == [first] }

        _ = try await PresenceShard.resolve(for: ann, using: cluster["node-b"]).openSession(.init(userId: ann, sessionID: "ann-1"), gateway: "node-g2")
        let second = try await send("ann is here")
        try await eventually(timeout: .seconds(10), "node-g2 gets the second message for ann") {
            received["node-g2"]?.deliveries.withLock { deliveries in
                deliveries.contains { if case .message(let message) = $0.event { message.seq == second && $0.recipients == [ann] } else { false } }
            } == true
        }
        #expect(received["node-g2"]?.messages.map(\.seq) == [second], "the first was sent before ann's stream opened")
    }
}

/// One worker and one gateway over a store the test also writes to, as another owner would: ann
/// streams on the gateway, in her direct conversation with ben, created through `actor`.
struct OneOwnerCluster {
    static let ann: UserID = "u_ann", ben: UserID = "u_ben"
    let store = InMemoryChatStore()
    let cluster: LoopbackCluster
    let received = RecordedDeliveries()
    let inbox: GatewayInbox
    let conversation = ConversationActor.directID(ann, ben)
    let actor: ConversationActor

    init() async throws {
        cluster = try await startChatCluster(users: [Self.ann, Self.ben], workers: ["node-a"], gateways: ["node-g1"], store: store)
        inbox = GatewayInbox.open(on: cluster["node-g1"]) { [received] in received.record($0) }
        actor = try ConversationActor.resolve(conversation, using: cluster["node-a"])
        _ = try await actor.create(CreateConversation(creatorId: Self.ann, memberIds: [Self.ben]))
        _ = try await PresenceShard.resolve(for: Self.ann, using: cluster["node-a"]).openSession(.init(userId: Self.ann, sessionID: "ann-1"), gateway: "node-g1")
    }
}

@Suite(.serialized) struct RetriedSendFanOutTests {
    /// An owner committed a message and died (or was cut off) before fanning it out; the sender's
    /// retry reaches the new owner, which finds the message already stored. Nothing else would push
    /// it to the members' streams until the conversation's next message — so the retry publishes it.
    @Test func aRetryThatFindsItsMessageStoredPublishesItToTheStreams() async throws {
        let owner = try await OneOwnerCluster()
        defer { Task { await owner.cluster.stopAll() } }
        defer { _ = owner.inbox }
        // The owner that committed it (a new epoch, which fences the actor off) and never fanned it out.
        let clientMessageId = UUID().uuidString.lowercased()
        let original = try await commitAsAnotherOwner(owner.store, owner.conversation, sender: OneOwnerCluster.ben, clientMessageId: clientMessageId)

        // The sender's retry: the fenced actor deactivates, the call goes to its new activation.
        let retried = try await owner.actor.send(SendMessage(senderId: OneOwnerCluster.ben, clientMessageId: clientMessageId, text: "hi"))
        #expect(retried.message == original && !retried.created)
        try await eventually(timeout: .seconds(10), "ann's gateway gets the message the retry found") {
            owner.received.messages.map(\.seq) == [original.seq]
        }
    }
}

@Suite(.serialized) struct TakenOverConversationTests {
    /// An owner committed a message and died before fanning it out, and nobody writes to the
    /// conversation again: no retry, no next message would bring it to the streams. The node that
    /// takes the conversation over when the ring loses the owner publishes its recent messages again.
    @Test func theNodeThatTakesOverADepartedOwnersConversationPublishesItsRecentMessages() async throws {
        let ann: UserID = "u_ann", ben: UserID = "u_ben"
        let store = InMemoryChatStore()
        let cluster = try await startChatCluster(users: [ann, ben], workers: ["node-a", "node-b"], gateways: ["node-g1"], store: store)
        defer { Task { await cluster.stopAll() } }
        let received = RecordedDeliveries()
        let inbox = GatewayInbox.open(on: cluster["node-g1"]) { received.record($0) }
        defer { _ = inbox }

        let conversation = ConversationActor.directID(ann, ben)
        let owner = try #require(cluster["node-g1"].owner(of: ConversationActor.id(conversation)))
        let survivor = owner == "node-a" ? "node-b" : "node-a"
        _ = try await ConversationActor.resolve(conversation, using: cluster[survivor]).create(CreateConversation(creatorId: ann, memberIds: [ben]))
        _ = try await PresenceShard.resolve(for: ann, using: cluster[survivor]).openSession(.init(userId: ann, sessionID: "ann-1"), gateway: "node-g1")
        // What the owner committed and acknowledged, then died before handing to the gateways.
        let message = try await commitAsAnotherOwner(store, conversation, sender: ben, clientMessageId: UUID().uuidString.lowercased())
        let victim = cluster[owner]
        cluster.remove(owner)
        await victim.stop()

        try await eventually(timeout: .seconds(15), "ann's gateway gets the message its departed owner never published") {
            received.messages.map(\.seq) == [message.seq]
        }
        // Once: a later ring change (none here) is the only other thing that publishes it again.
        try await Task.sleep(for: .milliseconds(500))
        #expect(received.messages.map(\.seq) == [message.seq])
    }
}

@Suite(.serialized) struct NewOwnerTests {
    /// An owner committed messages and was gone before handing them on, and a send reaches the
    /// new owner before any recovery does: the new owner hands the recent messages on first, so
    /// no stream is written the new seq before the ones it missed (a stream that knows nothing
    /// of the conversation yet could not tell them missing).
    @Test func aNewOwnerHandsOnTheRecentMessagesBeforeItsOwn() async throws {
        let owner = try await OneOwnerCluster()
        defer { Task { await owner.cluster.stopAll() } }
        defer { _ = owner.inbox }
        // What an owner that took the conversation (a new epoch fences the actor off) committed and never handed on.
        let first = try await commitAsAnotherOwner(owner.store, owner.conversation, sender: OneOwnerCluster.ben)
        let second = try await commitAsAnotherOwner(owner.store, owner.conversation, sender: OneOwnerCluster.ben)

        // The fenced actor deactivates; the send goes to its new activation.
        let sent = try await owner.actor.send(SendMessage(senderId: OneOwnerCluster.ann, clientMessageId: UUID().uuidString.lowercased(), text: "next"))
        try await eventually(timeout: .seconds(10), "ann's gateway gets the new message") {
            owner.received.messages.contains { $0.seq == sent.message.seq }
        }
        #expect(owner.received.messages.map(\.seq) == [first.seq, second.seq, sent.message.seq])
    }
}

@Suite(.serialized) struct RestartedOwnerTests {
    /// The owner committed a message and died before handing it on, and came back — as happens
    /// when a worker is restarted before failure detection notices — under the same name: no other
    /// node saw an owner depart, and nobody writes to the conversation again. The worker, coming
    /// onto the ring, publishes the recent messages of the conversations it owns again.
    @Test func aWorkerThatComesBackPublishesTheRecentMessagesOfItsConversations() async throws {
        let ann: UserID = "u_ann", ben: UserID = "u_ben"
        let store = InMemoryChatStore()
        let cluster = try await startChatCluster(users: [ann, ben], workers: ["node-a"], gateways: ["node-g1"], store: store)
        defer { Task { await cluster.stopAll() } }
        let received = RecordedDeliveries()
        let inbox = GatewayInbox.open(on: cluster["node-g1"]) { received.record($0) }
        defer { _ = inbox }

        let conversation = ConversationActor.directID(ann, ben)
        _ = try await ConversationActor.resolve(conversation, using: cluster["node-a"]).create(CreateConversation(creatorId: ann, memberIds: [ben]))
        // What the old process committed and acknowledged, and never handed to the gateways.
        let message = try await commitAsAnotherOwner(store, conversation, sender: ben, clientMessageId: UUID().uuidString.lowercased())
        let old = cluster["node-a"]
        cluster.remove("node-a")
        await old.stop()
        try await cluster.start("node-a", seed: cluster["node-g1"].address)
        try await cluster.waitForUp(["node-a", "node-g1"])

        try await eventually(timeout: .seconds(15), "ann's gateway gets the message the old process never published") {
            received.messages.map(\.seq) == [message.seq]
        }
    }
}

@Suite struct ConversationRecoveryRuleTests {
    @Test(arguments: [
        (["a", "b", "c"], ["a", "b"], ["c"]),  // one of three died: take its conversations
        (["a", "b"], ["a"], ["b"]),  // a lone survivor of two cannot tell it from a cut: it takes over
        (["a", "b", "c"], ["a"], []),  // kept one of three: more likely this node was cut off
        (["a", "b", "c", "d"], ["a", "b"], []),  // kept half
        (["a", "b", "c", "d", "e"], ["a", "b", "c"], ["d", "e"]),  // kept a majority
        (["a", "b"], ["a", "b", "c"], []),  // a worker joined: nobody departed
    ])
    func whoseConversationsANodeTakesOver(previous: [String], ring: [String], expected: [String]) {
        #expect(ConversationRecovery.takenOver(ring: ring, previous: previous) == Set(expected))
    }
}

@Suite(.serialized) struct HeldSeqFanOutTests {
    static let ann: UserID = "u_ann", ben: UserID = "u_ben"
    static let conversation = ConversationActor.directID(ann, ben)

    static func message(_ seq: Int64) -> Message {
        Message(conversationId: conversation, seq: seq, senderId: ben, clientMessageId: "m\(seq)", text: "t\(seq)", sentAt: Date())
    }

    /// A fan-out on node-a delivering to node-g1's inbox (or through `courier`), where ann
    /// streams; the store holds seqs 1…`stored`.
    static func start(
        stored: Int64, holdMax: Duration, courier: GatewayCourier? = nil
    ) async throws -> (LoopbackCluster, ConversationFanOut, RecordedDeliveries, GatewayInbox) {
        let cluster = try await startChatCluster(users: [ann, ben], workers: ["node-a"], gateways: ["node-g1"])
        let received = RecordedDeliveries()
        let inbox = GatewayInbox.open(on: cluster["node-g1"]) { received.record($0) }
        _ = try await PresenceShard.resolve(for: ann, using: cluster["node-a"]).openSession(.init(userId: ann, sessionID: "ann-1"), gateway: "node-g1")
        let system = cluster["node-a"]
        let fanOut = ConversationFanOut(
            directory: GatewayDirectory(system: system), courier: courier ?? GatewayCourier(system: system), lastSeq: 0, members: [ann, ben], timings: DeliveryTimings(holdMax: holdMax),
            clock: system.clock, logger: system.logger
        ) { after, limit in
            (1...max(1, stored)).filter { $0 > after && $0 <= stored }.prefix(limit).map(Self.message)
        }
        return (cluster, fanOut, received, inbox)
    }

    final class FailingFirstCalls: Sendable {
        let calls = Mutex(0)
        let failing: Int
        let received = RecordedDeliveries()
        init(failing: Int) { self.failing = failing }

        var courier: GatewayCourier {
            GatewayCourier { [self] _, deliveries in
                guard calls.withLock({ $0 += 1; return $0 }) > failing else { throw CancellationError() }
                received.record(deliveries)
            }
        }
    }

    /// Calls to the gateway that fail (it is restarting, a link is down a moment) are made again
    /// after the retry delay, from the first event the gateway lacks, with what came meanwhile:
    /// every event arrives, once, in seq order.
    @Test func aFailedDeliveryGoesAgainWithWhatCameMeanwhile() async throws {
        let gateway = FailingFirstCalls(failing: 2)
        let (cluster, fanOut, _, inbox) = try await Self.start(stored: 0, holdMax: .seconds(60), courier: gateway.courier)
        defer { Task { await cluster.stopAll() } }
        defer { _ = inbox }
        fanOut.committed(Self.message(1), members: [Self.ann, Self.ben])
        try await eventually(timeout: .seconds(10), "the first call failed") { gateway.calls.withLock { $0 } >= 1 }
        fanOut.committed(Self.message(2), members: [Self.ann, Self.ben])
        fanOut.publish(.typing(TypingEvent(conversationId: Self.conversation, userId: Self.ben, typing: true)), members: [Self.ann, Self.ben], except: Self.ben)
        fanOut.committed(Self.message(3), members: [Self.ann, Self.ben])
        try await eventually(timeout: .seconds(10), "seqs 1…3 arrive") { gateway.received.messages.count >= 3 }
        try await Task.sleep(for: .milliseconds(300))
        #expect(gateway.received.messages.map(\.seq) == [1, 2, 3])
        let typing = gateway.received.deliveries.withLock { $0.filter { if case .typing = $0.event { true } else { false } } }
        #expect(typing.map(\.recipients) == [[Self.ann]], "typing is not for the typist")
        #expect(gateway.calls.withLock { $0 } >= 3)
    }

    /// The last message of a conversation committed, but its append failed without an answer and
    /// no retry came: no later seq shows it missing. After `holdMax` the store is read past the
    /// last released seq, and it goes out.
    @Test func aMessageWhoseAppendFailedWithoutAnAnswerIsReadFromTheStore() async throws {
        let (cluster, fanOut, received, inbox) = try await Self.start(stored: 2, holdMax: .milliseconds(300))
        defer { Task { await cluster.stopAll() } }
        defer { _ = inbox }
        fanOut.committed(Self.message(1), members: [Self.ann, Self.ben])
        try await eventually(timeout: .seconds(10), "seq 1 goes out") { received.messages.count >= 1 }
        fanOut.appendUncertain()
        fanOut.appendUncertain()
        try await eventually(timeout: .seconds(10), "seq 2, committed without an answer, goes out") { received.messages.count >= 2 }
        try await Task.sleep(for: .milliseconds(500))
        #expect(received.messages.map(\.seq) == [1, 2], "once, in order")
    }

    /// What a store read finds goes out by an answer asked after the read: the one the fan-out
    /// held from before named only the gateway the member streamed on then, and a stream opened
    /// on another gateway before the message committed (so not in its replay) would never get it.
    @Test func whatAStoreReadFindsGoesByAnAnswerAskedAfterTheRead() async throws {
        let cluster = try await startChatCluster(users: [Self.ann, Self.ben], workers: ["node-a"], gateways: ["node-g1", "node-g2"])
        defer { Task { await cluster.stopAll() } }
        let first = RecordedDeliveries(), second = RecordedDeliveries()
        let inboxes = [
            GatewayInbox.open(on: cluster["node-g1"]) { first.record($0) }, GatewayInbox.open(on: cluster["node-g2"]) { second.record($0) },
        ]
        defer { _ = inboxes }
        // Past the shards' first session lease: a shard that just started names every live gateway.
        let shard = try PresenceShard.resolve(for: Self.ann, using: cluster["node-a"])
        _ = try await shard.presence(of: [Self.ann])
        _ = try await PresenceShard.resolve(for: Self.ben, using: cluster["node-a"]).presence(of: [Self.ben])
        try await Task.sleep(for: PresenceShard.sessionLease)
        _ = try await shard.openSession(.init(userId: Self.ann, sessionID: "ann-1"), gateway: "node-g1")
        let system = cluster["node-a"]
        let stored = Mutex<Int64>(1)
        let fanOut = ConversationFanOut(
            directory: GatewayDirectory(system: system), courier: GatewayCourier(system: system), lastSeq: 0, members: [Self.ann, Self.ben],
            timings: DeliveryTimings(holdMax: .milliseconds(300)), clock: system.clock, logger: system.logger
        ) { after, limit in
            let last = stored.withLock { $0 }
            return (1...last).filter { $0 > after }.prefix(limit).map(Self.message)
        }
        fanOut.committed(Self.message(1), members: [Self.ann, Self.ben])
        try await eventually(timeout: .seconds(10), "seq 1 reaches ann's gateway") { first.messages.map(\.seq) == [1] }
        #expect(second.messages.isEmpty)

        // ann's stream opens on node-g2; then seq 2 commits, and its append's answer is lost.
        _ = try await shard.openSession(.init(userId: Self.ann, sessionID: "ann-2"), gateway: "node-g2")
        stored.withLock { $0 = 2 }
        fanOut.appendUncertain()
        try await eventually(timeout: .seconds(10), "seq 2 reaches the stream that opened before it committed") {
            second.messages.map(\.seq) == [2]
        }
        // The two gateways are delivered to concurrently: the first may hear of it a moment later.
        try await eventually(timeout: .seconds(10), "and the stream still open on the first gateway") { first.messages.map(\.seq) == [1, 2] }
    }

    /// The same, as the first thing a new owner does: no event has named the members yet, and
    /// what the store read finds goes to those of the conversation as it was activated (cluster
    /// simulation seed 3190).
    @Test func aNewOwnersFirstAppendWithoutAnAnswerIsReadFromTheStore() async throws {
        let (cluster, fanOut, received, inbox) = try await Self.start(stored: 1, holdMax: .milliseconds(300))
        defer { Task { await cluster.stopAll() } }
        defer { _ = inbox }
        fanOut.appendUncertain()
        try await eventually(timeout: .seconds(10), "seq 1, committed without an answer, goes out") { received.messages.count >= 1 }
        #expect(received.messages.map(\.seq) == [1])
    }

    /// A seq whose commit's answer never reached its owner (a PostgreSQL connection that broke
    /// after `COMMIT`) would hold every later message back for good; after `holdMax` it is read
    /// from the store, and everything goes out in seq order.
    @Test func aSeqTheOwnerWasNotToldOfIsReadFromTheStoreAfterHoldMax() async throws {
        let (cluster, fanOut, received, inbox) = try await Self.start(stored: 3, holdMax: .milliseconds(300))
        defer { Task { await cluster.stopAll() } }
        defer { _ = inbox }
        fanOut.committed(Self.message(2), members: [Self.ann, Self.ben])
        fanOut.committed(Self.message(3), members: [Self.ann, Self.ben])
        try await Task.sleep(for: .milliseconds(100))
        #expect(received.messages.isEmpty, "held while seq 1 may still be on its way")
        try await eventually(timeout: .seconds(10), "seqs 1…3 go out") { received.messages.count >= 3 }
        #expect(received.messages.map(\.seq) == [1, 2, 3])
        #expect(fanOut.heldCount == 0)
    }

    /// The same lost answer, then the sender's retry finds the message stored: it is released as
    /// the commit it was, and what waited behind it goes out at once.
    @Test func aRetryThatFindsTheNextSeqStoredReleasesIt() async throws {
        let (cluster, fanOut, received, inbox) = try await Self.start(stored: 0, holdMax: .seconds(60))
        defer { Task { await cluster.stopAll() } }
        defer { _ = inbox }
        fanOut.committed(Self.message(2), members: [Self.ann, Self.ben])
        fanOut.republish(Self.message(1), members: [Self.ann, Self.ben])
        try await eventually(timeout: .seconds(10), "seqs 1 and 2 go out") { received.messages.count >= 2 }
        #expect(received.messages.map(\.seq) == [1, 2])
    }
}

/// Commits `text` to `conversation` as an owner other than the running one would — under an epoch
/// of its own, which fences the running actor off — and never hands it to the fan-out: what an
/// owner that died, was cut off or restarted leaves behind.
func commitAsAnotherOwner(
    _ store: InMemoryChatStore, _ conversation: ConversationID, sender: UserID, clientMessageId: String = UUID().uuidString.lowercased()
) async throws -> Message {
    let epoch = try await store.acquireOwnership(of: conversation)
    let committed = try await store.commit([
        AppendRequest(conversationId: conversation, epoch: epoch, senderId: sender, clientMessageId: clientMessageId, text: "hi", sentAt: Date())
    ])
    guard case .appended(let message) = committed.first else { throw NotAppended(outcomes: committed) }
    return message
}

struct NotAppended: Error { var outcomes: [AppendOutcome] }

@Suite struct MemberGatewaysTests {
    /// A fan-out keeps each member's answer to the latest question: one that comes back after a
    /// later question's (it waited on a shard on a dead node) does not replace it, so a stream
    /// that opened between the two questions keeps its gateway.
    @Test func anOlderAnswerDoesNotReplaceANewerOne() {
        var time = ManualTime()
        var held = MemberGateways()
        let early = time.now
        time.advance(by: .milliseconds(500))
        #expect(held.remember(["u_b": ["gateway-1", "gateway-0"]], askedAt: time.now) == ["gateway-1", "gateway-0"])
        #expect(held.remember(["u_b": ["gateway-0"], "u_c": ["gateway-1"]], askedAt: early) == ["gateway-1", "gateway-0"], "u_b's newer answer stays")
        #expect(held.holds("u_b", on: "gateway-1"))
        #expect(held.holds("u_c", on: "gateway-1"), "u_c had no answer before")
        time.advance(by: .seconds(1))
        held.remember(["u_b": []], askedAt: time.now)
        #expect(!held.holds("u_b", on: "gateway-1"), "a newer answer replaces it")
    }
}
