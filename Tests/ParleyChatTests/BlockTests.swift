import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

/// Blocking: what crosses a block and what does not, told to the conversations before the block
/// answers.
@Suite(.serialized) struct BlockTests {
    static let (ann, bob, cat): (UserID, UserID, UserID) = ("u_ann", "u_bob", "u_cat")
    static let annsPhone = String(repeating: "a0", count: 32)

    /// Ann blocks Bob. In their direct conversation neither can send (a retried send from before
    /// gets its message), and typing is hidden; a new direct conversation with Ann is refused to
    /// Bob. In a group of the three the order stays shared, but Ann gets no push of Bob's messages
    /// and does not see him typing; Cat sees and is told of everything. Unblocked, all is as before.
    @Test func aBlockStopsDirectMessagesTypingAndPushesButNotTheGroupsOrder() async throws {
        let apns = RecordingPushProvider()
        var policy = PushPlanner.Policy()
        policy.window = .milliseconds(100)
        let store = InMemoryChatStore()
        let cluster = try await startChatCluster(
            users: [Self.ann, Self.bob, Self.cat, "u_dan"], workers: ["node-a", "node-b"], gateways: ["node-g"], store: store,
            pushes: PushSettings(providers: [.apns: apns], preview: .full, policy: policy))
        defer { Task { await cluster.stopAll() } }
        let typing = Mutex<[(UserID, [UserID])]>([])
        let inbox = GatewayInbox.open(on: cluster["node-g"]) { deliveries in
            for delivery in deliveries {
                if case .typing(let event) = delivery.event, event.typing { typing.withLock { $0.append((event.userId, delivery.recipients.sorted())) } }
            }
        }
        defer { _ = inbox }
        let system = cluster["node-g"]
        for user in [Self.ann, Self.bob, Self.cat] {
            _ = try await PresenceShard.resolve(for: user, using: system).presence(of: [user])
        }
        try await Task.sleep(for: PresenceShard.sessionLease)
        // Bob and Cat stream; Ann does not: she is owed pushes.
        for user in [Self.bob, Self.cat] {
            _ = try await PresenceShard.resolve(for: user, using: system).openSession(.init(userId: user, sessionID: "s-\(user)"), gateway: "node-g")
        }
        _ = try await UserActor.resolve(Self.ann, using: system).registerDevice(NewDevice(platform: .apns, token: Self.annsPhone), tokenId: "login-ann")

        let direct = ConversationActor.directID(Self.ann, Self.bob)
        _ = try await ConversationActor.resolve(direct, using: system).create(CreateConversation(creatorId: Self.bob, memberIds: [Self.ann], name: nil))
        let group = ConversationID.make()
        _ = try await ConversationActor.resolve(group, using: system).create(CreateConversation(creatorId: Self.cat, memberIds: [Self.ann, Self.bob], name: "three"))
        func send(_ text: String, from sender: UserID, to id: ConversationID, cmid: String = UUID().uuidString) async throws -> Message {
            try await ConversationActor.resolve(id, using: system).send(SendMessage(senderId: sender, clientMessageId: cmid, text: text)).message
        }
        let before = UUID().uuidString
        _ = try await send("hi ann", from: Self.bob, to: direct, cmid: before)
        _ = try await send("hi all", from: Self.bob, to: group)
        try await eventually(timeout: .seconds(5), "ann is told of both before the block") { apns.to(Self.annsPhone).count == 2 }

        try await UserActor.resolve(Self.ann, using: system).block(Self.bob)
        try await UserActor.resolve(Self.ann, using: system).block(Self.bob)  // again: nothing changes
        #expect(try await UserActor.resolve(Self.ann, using: system).blocked().map(\.userId) == [Self.bob])
        #expect(try await UserActor.resolve(Self.bob, using: system).blocked().isEmpty, "the blocked user's own list")

        #expect(await refusal { _ = try await send("are you there?", from: Self.bob, to: direct) } == "forbidden: this user does not accept your messages")
        #expect(await refusal { _ = try await send("go away", from: Self.ann, to: direct) } == "forbidden: you blocked this user; unblock them to write to them")
        let retried = try await send("hi ann", from: Self.bob, to: direct, cmid: before)
        #expect(retried.seq == 1 && retried.text == "hi ann", "a retried send from before the block gets its message")
        // A new direct conversation across the block is refused (Dan's with Bob is not).
        try await UserActor.resolve("u_dan", using: system).block(Self.bob)
        let danDirect = ConversationActor.directID("u_dan", Self.bob)
        #expect(await refusal {
            _ = try await ConversationActor.resolve(danDirect, using: system).create(CreateConversation(creatorId: Self.bob, memberIds: ["u_dan"], name: nil))
        } == "forbidden: this user does not accept your messages")

        // The group: Bob's message is in the shared order; Cat is pushed, Ann is not.
        let catsPhone = String(repeating: "c0", count: 32)
        _ = try await PresenceShard.resolve(for: Self.cat, using: system).closeSession(.init(userId: Self.cat, sessionID: "s-\(Self.cat)"))
        _ = try await UserActor.resolve(Self.cat, using: system).registerDevice(NewDevice(platform: .apns, token: catsPhone), tokenId: "login-cat")
        let inGroup = try await send("still here", from: Self.bob, to: group)
        #expect(inGroup.seq == 2)
        try await eventually(timeout: .seconds(5), "cat is pushed bob's group message") { apns.to(catsPhone).last?.seq == inGroup.seq }
        try await Task.sleep(for: .milliseconds(500))  // five push windows
        #expect(apns.to(Self.annsPhone).count == 2, "ann was pushed a blocked user's message: \(apns.to(Self.annsPhone))")
        let fromCat = try await send("and me", from: Self.cat, to: group)
        try await eventually(timeout: .seconds(5), "ann is pushed cat's message") { apns.to(Self.annsPhone).count == 3 }
        let last = apns.to(Self.annsPhone).last
        #expect(last?.seq == fromCat.seq && last?.body == "u_cat: and me" && last?.subtitle == nil, "counted only cat's: \(String(describing: last))")

        // Typing: Bob's is hidden from Ann in the group, and nobody's crosses the direct block.
        // (All three stream now, so the deliveries name everyone typing reaches.)
        for user in [Self.ann, Self.cat] {
            _ = try await PresenceShard.resolve(for: user, using: system).openSession(.init(userId: user, sessionID: "s2-\(user)"), gateway: "node-g")
        }
        typing.withLock { $0.removeAll() }
        _ = try await ConversationActor.resolve(group, using: system).setTyping(for: Self.bob, true)
        _ = try await ConversationActor.resolve(group, using: system).setTyping(for: Self.ann, true)
        _ = try await ConversationActor.resolve(direct, using: system).setTyping(for: Self.ann, true)
        _ = try await ConversationActor.resolve(direct, using: system).setTyping(for: Self.bob, true)
        try await Task.sleep(for: .milliseconds(300))
        let seen = typing.withLock { $0.map { "\($0.0)→\($0.1.map(\.rawValue).joined(separator: ","))" } }
        #expect(seen.sorted() == ["u_ann→u_bob,u_cat", "u_bob→u_cat"], "\(seen)")

        // Unblocked: the direct conversation works again, and pushes reach Ann once she is away.
        _ = try await PresenceShard.resolve(for: Self.ann, using: system).closeSession(.init(userId: Self.ann, sessionID: "s2-\(Self.ann)"))
        try await UserActor.resolve(Self.ann, using: system).unblock(Self.bob)
        try await UserActor.resolve(Self.ann, using: system).unblock(Self.bob)
        let after = try await send("sorry", from: Self.bob, to: direct)
        #expect(after.seq == 2)
        try await eventually(timeout: .seconds(5), "ann is pushed again") { apns.to(Self.annsPhone).last?.body == "sorry" }
    }

    /// Presence is hidden both ways across a block: neither is the other's contact.
    @Test func neitherSideOfABlockIsTheOthersContact() async throws {
        let cluster = try await startChatCluster(
            users: [Self.ann, Self.bob, Self.cat], workers: ["node-a"], gateways: [], pushes: PushSettings(providers: [:]))
        defer { Task { await cluster.stopAll() } }
        let system = cluster["node-a"]
        let group = ConversationID.make()
        _ = try await ConversationActor.resolve(group, using: system).create(CreateConversation(creatorId: Self.cat, memberIds: [Self.ann, Self.bob], name: "three"))
        #expect(try await UserActor.resolve(Self.ann, using: system).contacts() == [Self.bob, Self.cat])
        try await UserActor.resolve(Self.ann, using: system).block(Self.bob)
        #expect(try await UserActor.resolve(Self.ann, using: system).contacts() == [Self.cat])
        #expect(try await UserActor.resolve(Self.bob, using: system).contacts() == [Self.cat])
        let refused = await #expect(throws: ClusterCallError.self) { try await UserActor.resolve(Self.ann, using: system).block(Self.ann) }
        #expect(refused?.code.rawValue == "invalid_request")
        let unknown = await #expect(throws: ClusterCallError.self) { try await UserActor.resolve(Self.ann, using: system).block("u_nobody") }
        #expect(unknown?.code.rawValue == "not_found")
    }
}
