import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

/// A push provider that records what it is asked to send, and answers as told per device token.
final class RecordingPushProvider: PushProvider {
    struct Sent: Sendable, Hashable {
        var content: PushContent
        var token: String
    }

    let sent = Mutex<[Sent]>([])
    /// Outcomes to answer for a token, first to last; `.sent` once they run out.
    let scripted = Mutex<[String: [PushOutcome]]>([:])

    func send(_ content: PushContent, to devices: [Device]) async -> [PushOutcome] {
        devices.map { device in
            sent.withLock { $0.append(Sent(content: content, token: device.token)) }
            return scripted.withLock { scripted in scripted[device.token]?.isEmpty == false ? scripted[device.token]!.removeFirst() : .sent }
        }
    }

    func to(_ token: String) -> [PushContent] { sent.withLock { $0.filter { $0.token == token }.map(\.content) } }
}

@Suite(.serialized) struct PushTests {
    static let (alice, bob, carol, dave): (UserID, UserID, UserID, UserID) = ("u_alice", "u_bob", "u_carol", "u_dave")
    static let bobsPhone = String(repeating: "b0", count: 32), carolsPhone = String(repeating: "c0", count: 32)
    static let davesPhone = String(repeating: "d0", count: 32), bobsTablet = "fcm-token-of-bob"

    @Test func offlineMembersGetOneNoticePerBurstAndMutedOrStreamingMembersNone() async throws {
        let apns = RecordingPushProvider(), fcm = RecordingPushProvider()
        var policy = PushPlanner.Policy()
        policy.window = .seconds(1)
        policy.retry.first = .milliseconds(200)
        let store = InMemoryChatStore()
        let cluster = try await startChatCluster(
            users: [Self.alice, Self.bob, Self.carol, Self.dave], workers: ["node-a", "node-b"], gateways: ["node-g"], store: store,
            pushes: PushSettings(providers: [.apns: apns, .fcm: fcm], preview: .full, policy: policy))
        defer { Task { await cluster.stopAll() } }
        let inbox = GatewayInbox.open(on: cluster["node-g"]) { _ in }
        defer { _ = inbox }
        let system = cluster["node-g"]
        for user in [Self.alice, Self.bob, Self.carol, Self.dave] {
            _ = try await PresenceShard.resolve(for: user, using: system).presence(of: [user])
        }
        // Past the shards' first session lease: a shard that just started names every live gateway.
        try await Task.sleep(for: PresenceShard.sessionLease)

        let group = ConversationID.make()
        let conversation = try ConversationActor.resolve(group, using: system)
        _ = try await conversation.create(CreateConversation(creatorId: Self.alice, memberIds: [Self.bob, Self.carol, Self.dave], name: "trio"))
        _ = try await conversation.setMuted(true, by: Self.carol)
        _ = try await PresenceShard.resolve(for: Self.dave, using: system).openSession(.init(userId: Self.dave, sessionID: "s-dave"), gateway: "node-g")
        for (user, platform, token) in [(Self.bob, PushPlatform.apns, Self.bobsPhone), (Self.bob, .fcm, Self.bobsTablet),
                                        (Self.carol, .apns, Self.carolsPhone), (Self.dave, .apns, Self.davesPhone)] {
            _ = try await UserActor.resolve(user, using: system).registerDevice(NewDevice(platform: platform, token: token), tokenId: "login-\(user)")
        }
        func send(_ text: String, from sender: UserID = Self.alice, to id: ConversationID = group) async throws -> Message {
            try await ConversationActor.resolve(id, using: system).send(SendMessage(senderId: sender, clientMessageId: UUID().uuidString, text: text)).message
        }

        _ = try await send("hello")
        try await eventually(timeout: .seconds(5), "bob's phone and tablet are told of the first message") {
            apns.to(Self.bobsPhone).count == 1 && fcm.to(Self.bobsTablet).count == 1
        }
        let first = try #require(apns.to(Self.bobsPhone).first)
        #expect(first == PushContent(title: "trio", subtitle: nil, body: "u_alice: hello", badge: 1, conversationId: group, seq: 1))
        #expect(fcm.to(Self.bobsTablet).first == first)

        // A burst: one notice after the window, for all three.
        for text in ["one", "two", "three"] { _ = try await send(text) }
        try await eventually(timeout: .seconds(5), "bob is told of the burst") { apns.to(Self.bobsPhone).count == 2 }
        try await Task.sleep(for: .seconds(1.5))
        #expect(apns.to(Self.bobsPhone) == [
            first, PushContent(title: "trio", subtitle: "3 new messages", body: "u_alice: three", badge: 4, conversationId: group, seq: 4),
        ])
        #expect(apns.to(Self.carolsPhone).isEmpty, "carol muted the conversation")
        #expect(apns.to(Self.davesPhone).isEmpty, "dave's stream is open")

        // What bob read is not owed; his badge counts what he has not read, in every conversation.
        _ = try await conversation.markReceipts(for: Self.bob, deliveredSeq: nil, readSeq: 4)
        let direct = ConversationActor.directID(Self.alice, Self.bob)
        _ = try await ConversationActor.resolve(direct, using: system).create(CreateConversation(creatorId: Self.alice, memberIds: [Self.bob], name: nil))
        _ = try await send("just us", to: direct)
        try await eventually(timeout: .seconds(5), "bob is told of the direct message") { apns.to(Self.bobsPhone).count == 3 }
        #expect(apns.to(Self.bobsPhone).last == PushContent(title: "u_alice", subtitle: nil, body: "just us", badge: 1, conversationId: direct, seq: 1))

        // The provider no longer knows bob's tablet: it is removed. It asks the phone's notice to
        // wait: the notice goes again.
        fcm.scripted.withLock { $0[Self.bobsTablet] = [.unregistered("Unregistered")] }
        apns.scripted.withLock { $0[Self.bobsPhone] = [.retry(after: .milliseconds(300), reason: "429 TooManyRequests")] }
        let asked = try await send("are you there?")
        // Owed while the provider makes it wait, in the store too (a new owner would owe it).
        try await eventually(timeout: .seconds(5), "the store says what is owed") {
            try await store.conversationsOwingPushes(limit: 10).map(\.from) == [asked.seq]
        }
        try await eventually(timeout: .seconds(5), "the phone's notice goes again") { apns.to(Self.bobsPhone).count == 5 }
        try await eventually(timeout: .seconds(5), "nothing is owed once it went") { try await store.conversationsOwingPushes(limit: 10).isEmpty }
        let retried = apns.to(Self.bobsPhone).suffix(2)
        #expect(retried.first == retried.last && retried.last?.seq == 5 && retried.last?.badge == 2, "\(retried)")
        #expect(try await store.devices(of: Self.bob).map(\.device.token) == [Self.bobsPhone], "the tablet the provider no longer knows was removed")
        try await Task.sleep(for: .seconds(1.5))
        #expect(apns.to(Self.bobsPhone).count == 5 && fcm.to(Self.bobsTablet).count == 4, "nothing more was sent")
        #expect(apns.to(Self.carolsPhone).isEmpty && apns.to(Self.davesPhone).isEmpty)

        // Dave closes his app right after a message reached his stream: the owner's directory,
        // which had just looked him up, forgets his stream at once, and the next message is owed.
        _ = try await send("still streaming, dave?")
        _ = try await PresenceShard.resolve(for: Self.dave, using: system).closeSession(.init(userId: Self.dave, sessionID: "s-dave"))
        let bye = try await send("bye")
        // (Whether the message before reached his stream depends on which came first, its delivery
        // or the close: if not, he is told of it too.)
        try await eventually(timeout: .seconds(5), "dave is told once his stream closed") { apns.to(Self.davesPhone).last?.seq == bye.seq }
    }

    @Test func aMemberOfAShardThatHasJustStartedIsToldOnceTheShardCanTell() async throws {
        let apns = RecordingPushProvider()
        let cluster = try await startChatCluster(
            users: [Self.alice, Self.bob, Self.dave], workers: ["node-a", "node-b"], gateways: ["node-g"],
            pushes: PushSettings(providers: [.apns: apns]))
        defer { Task { await cluster.stopAll() } }
        let inbox = GatewayInbox.open(on: cluster["node-g"]) { _ in }
        defer { _ = inbox }
        let system = cluster["node-g"]
        let group = ConversationID.make()
        _ = try await ConversationActor.resolve(group, using: system)
            .create(CreateConversation(creatorId: Self.alice, memberIds: [Self.bob, Self.dave], name: "early"))
        for (user, token) in [(Self.bob, Self.bobsPhone), (Self.dave, Self.davesPhone)] {
            _ = try await UserActor.resolve(user, using: system).registerDevice(NewDevice(platform: .apns, token: token), tokenId: "login")
        }
        _ = try await PresenceShard.resolve(for: Self.dave, using: system).openSession(.init(userId: Self.dave, sessionID: "s-dave"), gateway: "node-g")
        // Within its first session lease a shard names every gateway for users it knows no stream of.
        let sent = try await ConversationActor.resolve(group, using: system)
            .send(SendMessage(senderId: Self.alice, clientMessageId: UUID().uuidString, text: "before the shards can tell")).message
        try await eventually(timeout: PresenceShard.sessionLease + GatewayDirectory.lease + .seconds(5), "bob is told once his shard can tell") {
            !apns.to(Self.bobsPhone).isEmpty
        }
        #expect(apns.to(Self.bobsPhone).map(\.seq) == [sent.seq])
        #expect(apns.to(Self.davesPhone).isEmpty, "dave streams")
    }
}
