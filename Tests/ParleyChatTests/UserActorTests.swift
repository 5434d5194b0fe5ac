import Foundation
import ParleyChat
@_spi(Testing) import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

@Suite(.serialized) struct UserActorTests {
    /// Users' actors on the worker `node-a` (over an in-memory store), and these gateway nodes.
    static func startUserCluster(gateways: [String], pushes: PushSettings? = nil) async throws -> LoopbackCluster {
        let services = ChatServices(store: InMemoryChatStore(), pushes: pushes, clock: ContinuousClock())
        let cluster = try LoopbackCluster { system, _ in
            guard system.settings.roles.contains(.worker) else { return }
            UserActor.register(on: system, services: services)
        }
        try await cluster.start("node-a")
        for gateway in gateways { try await cluster.start(gateway, roles: .gateway) }
        try await cluster.waitForUp(Set(["node-a"] + gateways))
        return cluster
    }

    /// `DELETE /v1/sessions/current` on any gateway: every gateway of the cluster is told to stop
    /// accepting the token before the revocation returns (they remember valid tokens for a lease),
    /// and the user's actor refuses it from then on; the user's other tokens keep working.
    @Test func aRevocationReachesEveryGatewayBeforeItReturns() async throws {
        let cluster = try await Self.startUserCluster(gateways: ["node-g1", "node-g2"])
        defer { Task { await cluster.stopAll() } }
        let told = Mutex<[String: [String]]>([:])
        let inboxes = ["node-g1", "node-g2"].map { gateway in
            GatewayInbox.open(on: cluster[gateway], revocations: { revocation in
                guard case .tokens(let ids) = revocation else { return }
                told.withLock { $0[gateway, default: []] += ids }
            }) { _ in }
        }
        defer { _ = inboxes }

        let ann = UserID.make()
        _ = try await UserActor.resolve(ann, using: cluster["node-a"]).create(NewUser(handle: "ann", displayName: "Ann", passwordHash: "h"))
        #expect(try await UserActor.resolve(ann, using: cluster["node-g1"]).authenticate(tokenId: "token-1").id == ann)
        try await UserActor.resolve(ann, using: cluster["node-g2"]).revoke(tokenId: "token-1", expiresAt: Date().addingTimeInterval(3600))
        #expect(told.withLock { $0 } == ["node-g1": ["token-1"], "node-g2": ["token-1"]])
        await #expect(throws: ClusterCallError.self) {
            try await UserActor.resolve(ann, using: cluster["node-g1"]).authenticate(tokenId: "token-1")
        }
        #expect(try await UserActor.resolve(ann, using: cluster["node-g1"]).authenticate(tokenId: "token-2").id == ann)
        #expect(cluster["node-a"].directCalls(to: UserActor.authenticateTarget) == 3, "token checks run directly, refusals too")
    }

    /// `PUT /v1/users/me/password`: every token of the user but the one that changed it stops
    /// working before the change returns — those with sessions, and those issued before sessions
    /// were recorded — and every gateway is told to forget them all; a login checked against the
    /// old password and a second change from it are refused.
    @Test func aPasswordChangeRevokesEveryOtherTokenOnEveryGateway() async throws {
        let cluster = try await Self.startUserCluster(gateways: ["node-g1", "node-g2"])
        defer { Task { await cluster.stopAll() } }
        let told = Mutex<[String: [GatewayInbox.Revocation]]>([:])
        let inboxes = ["node-g1", "node-g2"].map { gateway in
            GatewayInbox.open(on: cluster[gateway], revocations: { revocation in told.withLock { $0[gateway, default: []].append(revocation) } }) { _ in }
        }
        defer { _ = inboxes }
        let ann = UserID.make()
        let bob = UserID.make()
        let user = try UserActor.resolve(ann, using: cluster["node-g1"])
        _ = try await UserActor.resolve(ann, using: cluster["node-a"]).create(NewUser(handle: "ann", displayName: "Ann", passwordHash: "h1"))
        _ = try await UserActor.resolve(bob, using: cluster["node-a"]).create(NewUser(handle: "bob", displayName: "Bob", passwordHash: "hb"))
        let expires = Date().addingTimeInterval(3600)
        try await user.openSession(tokenId: "laptop", expiresAt: expires, userAgent: "Parley/1 (Mac)\u{7}", verifiedHash: "h1")
        try await user.openSession(tokenId: "phone", expiresAt: expires, userAgent: nil, verifiedHash: "h1")
        try await UserActor.resolve(bob, using: cluster["node-a"]).openSession(tokenId: "bobs", expiresAt: expires, userAgent: nil, verifiedHash: "hb")
        for token in ["laptop", "phone", "from-before-sessions"] { #expect(try await user.authenticate(tokenId: token).id == ann, "\(token)") }

        let listed = try await user.sessions(current: "laptop")
        #expect(Set(listed.map(\.id)) == ["laptop", "phone"], "only recorded sessions are listed: \(listed)")
        #expect(listed.first { $0.id == "laptop" }.map { $0.current && $0.userAgent == "Parley/1 (Mac)" } == true, "\(listed)")
        #expect(listed.first { $0.id == "phone" }?.current == false)
        await #expect(throws: ClusterCallError.self, "another user's session") { try await user.revokeSession("bobs") }
        await #expect(throws: ClusterCallError.self, "no such session") { try await user.revokeSession("nobody") }
        #expect(try await UserActor.resolve(bob, using: cluster["node-g2"]).authenticate(tokenId: "bobs").id == bob)

        try await user.changePassword(from: "h1", to: "h2", keeping: "laptop")
        #expect(told.withLock { $0 } == ["node-g1": [.user(ann, except: "laptop")], "node-g2": [.user(ann, except: "laptop")]])
        for token in ["phone", "from-before-sessions", "never-seen"] {
            await #expect(throws: ClusterCallError.self, "\(token) still works") { try await user.authenticate(tokenId: token) }
        }
        #expect(try await user.authenticate(tokenId: "laptop").id == ann)
        #expect(try await user.sessions(current: "laptop").map(\.id) == ["laptop"])
        do {
            try await user.changePassword(from: "h1", to: "h3", keeping: "laptop")
            Issue.record("a second change from the old hash went through")
        } catch let error as ClusterCallError {
            #expect(error.code.rawValue == "conflict", "\(error)")
        }
        do {
            try await user.openSession(tokenId: "late-login", expiresAt: expires, userAgent: nil, verifiedHash: "h1")
            Issue.record("a login checked against the old password got a session")
        } catch let error as ClusterCallError {
            #expect(error.code.rawValue == "unauthorized", "\(error)")
        }
        try await user.openSession(tokenId: "new-login", expiresAt: expires, userAgent: nil, verifiedHash: "h2")
        #expect(try await user.authenticate(tokenId: "new-login").id == ann)

        // A new owner of the user (after a ring change) starts with an empty memory and knows from
        // the store that the password changed.
        let fresh = try await UserActor.resolve(ann, using: cluster["node-a"])
        cluster["node-a"].passivate(fresh)
        await #expect(throws: ClusterCallError.self) { try await user.authenticate(tokenId: "also-from-before-sessions") }
        #expect(try await user.authenticate(tokenId: "new-login").id == ann)
    }

    /// An operator's suspension: every gateway is told to forget all the user's tokens before it
    /// returns, the actor refuses them and any new login; lifted, the tokens work again.
    @Test func aSuspensionRefusesEveryTokenAndLoginUntilLifted() async throws {
        let cluster = try await Self.startUserCluster(gateways: ["node-g1"])
        defer { Task { await cluster.stopAll() } }
        let told = Mutex<[GatewayInbox.Revocation]>([])
        let inbox = GatewayInbox.open(on: cluster["node-g1"], revocations: { revocation in told.withLock { $0.append(revocation) } }) { _ in }
        defer { _ = inbox }
        let ann = UserID.make()
        let user = try UserActor.resolve(ann, using: cluster["node-g1"])
        _ = try await UserActor.resolve(ann, using: cluster["node-a"]).create(NewUser(handle: "ann", displayName: "Ann", passwordHash: "h"))
        try await user.openSession(tokenId: "phone", expiresAt: Date().addingTimeInterval(3600), userAgent: nil, verifiedHash: "h")
        #expect(try await user.authenticate(tokenId: "phone").id == ann)

        try await user.setSuspended(true)
        #expect(told.withLock { $0 } == [.user(ann, except: nil)])
        for token in ["phone", "from-before-sessions"] {
            let refused = await #expect(throws: ClusterCallError.self) { try await user.authenticate(tokenId: token) }
            #expect(refused?.message == "this account is suspended")
        }
        let login = await #expect(throws: ClusterCallError.self) {
            try await user.openSession(tokenId: "new", expiresAt: Date().addingTimeInterval(3600), userAgent: nil, verifiedHash: "h")
        }
        #expect(login?.code.rawValue == "forbidden")
        // Kept in the store: a new owner of the user refuses too.
        cluster["node-a"].passivate(try UserActor.resolve(ann, using: cluster["node-a"]))
        await #expect(throws: ClusterCallError.self) { try await user.authenticate(tokenId: "phone") }

        try await user.setSuspended(false)
        #expect(try await user.authenticate(tokenId: "phone").id == ann)
        await #expect(throws: ClusterCallError.self, "an unknown user") { try await UserActor.resolve(.make(), using: cluster["node-a"]).setSuspended(true) }
    }

    @Test func aBotHasNoPasswordToChange() async throws {
        let cluster = try await Self.startUserCluster(gateways: ["node-g1"])
        defer { Task { await cluster.stopAll() } }
        let bot = UserID.make()
        let user = try UserActor.resolve(bot, using: cluster["node-g1"])
        _ = try await UserActor.resolve(bot, using: cluster["node-a"]).create(NewUser(handle: "bot", displayName: "Bot", passwordHash: NewUser.noPassword, bot: true))
        for attempt in [{ _ = try await user.passwordHash() }, { try await user.changePassword(from: NewUser.noPassword, to: "h", keeping: "t") }] {
            do {
                try await attempt()
                Issue.record("a bot's password was read or changed")
            } catch let error as ClusterCallError {
                #expect(error.code.rawValue == "forbidden", "\(error)")
            }
        }
    }

    /// A gateway that cannot be told of a revocation (here: it has no inbox) may still accept the
    /// token from memory until its lease runs out, so the revocation returns only after that.
    @Test func aRevocationWaitsOutTheLeaseOfAGatewayThatCannotBeTold() async throws {
        let cluster = try await Self.startUserCluster(gateways: ["node-g1"])
        defer { Task { await cluster.stopAll() } }
        let ann = UserID.make()
        _ = try await UserActor.resolve(ann, using: cluster["node-a"]).create(NewUser(handle: "ann", displayName: "Ann", passwordHash: "h"))
        _ = try await UserActor.resolve(ann, using: cluster["node-a"]).authenticate(tokenId: "token-1")
        let clock = ContinuousClock()
        let started = clock.now
        try await UserActor.resolve(ann, using: cluster["node-a"]).revoke(tokenId: "token-1", expiresAt: Date().addingTimeInterval(3600))
        #expect(started.duration(to: clock.now) >= UserActor.authenticationLease, "returned before node-g1's lease could have run out")
        await #expect(throws: ClusterCallError.self) {
            try await UserActor.resolve(ann, using: cluster["node-a"]).authenticate(tokenId: "token-1")
        }
    }

    /// The team's APNs key signs for every app of the team: a device may name only a topic the
    /// node was given, and a token another user had moves to the one registering it now.
    @Test func aDeviceNamesOnlyTheServersAppsAndMovesWithItsToken() async throws {
        let cluster = try await Self.startUserCluster(gateways: ["node-g1"], pushes: PushSettings(providers: [:], apnsTopics: ["app.parley.chat"]))
        defer { Task { await cluster.stopAll() } }
        let ann = UserID.make(), bob = UserID.make()
        for (user, handle) in [(ann, "ann"), (bob, "bob")] {
            _ = try await UserActor.resolve(user, using: cluster["node-a"]).create(NewUser(handle: handle, displayName: handle, passwordHash: "h"))
        }
        let token = String(repeating: "cd", count: 32)
        let ours = try await UserActor.resolve(ann, using: cluster["node-g1"]).registerDevice(
            NewDevice(platform: .apns, token: token, topic: "app.parley.chat"), tokenId: "login-1")
        #expect(ours.created && ours.device.topic == "app.parley.chat")
        do {
            _ = try await UserActor.resolve(ann, using: cluster["node-g1"]).registerDevice(
                NewDevice(platform: .apns, token: String(repeating: "ef", count: 32), topic: "com.example.other-app"), tokenId: "login-1")
            Issue.record("a device with another app's topic was stored")
        } catch let error as ClusterCallError {
            #expect(error.code.rawValue == "invalid_request" && error.message.contains("app.parley.chat"), "\(error)")
        }
        let moved = try await UserActor.resolve(bob, using: cluster["node-g1"]).registerDevice(NewDevice(platform: .apns, token: token), tokenId: "login-2")
        #expect(moved.created)
        #expect(try await UserActor.resolve(ann, using: cluster["node-g1"]).devices().isEmpty, "the phone left ann")
    }

    /// Devices through the user's actor, from another node: checked before they are stored, kept
    /// once per token, and removed with the logout of the login that registered them.
    @Test func aDeviceBelongsToTheLoginThatRegisteredIt() async throws {
        let cluster = try await Self.startUserCluster(gateways: ["node-g1"])
        defer { Task { await cluster.stopAll() } }
        // The gateway's inbox hears the logout's revocation (else the logout waits out the lease).
        let inbox = GatewayInbox.open(on: cluster["node-g1"], revocations: { _ in }) { _ in }
        defer { _ = inbox }
        let ann = UserID.make()
        let user = try UserActor.resolve(ann, using: cluster["node-g1"])
        _ = try await UserActor.resolve(ann, using: cluster["node-a"]).create(NewUser(handle: "ann", displayName: "Ann", passwordHash: "h"))

        let phone = try await user.registerDevice(NewDevice(platform: .apns, token: String(repeating: "ab", count: 32)), tokenId: "login-1")
        #expect(phone.created && phone.device.environment == .production, "APNs devices are production unless told: \(phone)")
        let again = try await user.registerDevice(NewDevice(platform: .apns, token: String(repeating: "ab", count: 32)), tokenId: "login-1")
        #expect(!again.created && again.device.id == phone.device.id)
        let tablet = try await user.registerDevice(NewDevice(platform: .fcm, token: "fcm-token"), tokenId: "login-2")
        #expect(tablet.device.environment == nil)
        do {
            _ = try await user.registerDevice(NewDevice(platform: .apns, token: "zz"), tokenId: "login-1")
            Issue.record("a token that is not hex was stored")
        } catch let error as ClusterCallError {
            #expect(error.code.rawValue == "invalid_request", "\(error)")
        }
        #expect(try await user.devices().map(\.id) == [phone.device.id, tablet.device.id])

        try await user.revoke(tokenId: "login-1", expiresAt: Date().addingTimeInterval(3600))
        #expect(try await user.devices().map(\.id) == [tablet.device.id], "the logout of login-1 left its device")
        try await user.removeDevice(tablet.device.id)
        #expect(try await user.devices().isEmpty)
        await #expect(throws: ClusterCallError.self, "a device removed twice") { try await user.removeDevice(tablet.device.id) }
    }

    @Test func usersRegisterOnceAndListTheirConversationsWithUnreadCounts() async throws {
        let store = InMemoryChatStore()
        let services = ChatServices(store: store, clock: ContinuousClock())
        let cluster = try LoopbackCluster { system, _ in
            UserActor.register(on: system, services: services)
            ConversationActor.register(on: system, services: services)
        }
        for node in ["node-a", "node-b"] { try await cluster.start(node) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])

        let ann = UserID.make(), ben = UserID.make()
        let created = try await UserActor.resolve(ann, using: cluster["node-a"]).create(NewUser(handle: "ann", displayName: "Ann", passwordHash: "h"))
        #expect(created.id == ann && created.handle == "ann")
        _ = try await UserActor.resolve(ben, using: cluster["node-b"]).create(NewUser(handle: "ben", displayName: "Ben", passwordHash: "h"))
        for (request, code) in [
            (NewUser(handle: "ann", displayName: "Other Ann", passwordHash: "h"), "conflict"),
            (NewUser(handle: "No Caps", displayName: "x", passwordHash: "h"), "invalid_request"),
            (NewUser(handle: "ok", displayName: "x", passwordHash: "h"), "invalid_request"),
        ] {
            do {
                _ = try await UserActor.resolve(.make(), using: cluster["node-b"]).create(request)
                Issue.record("\(request) must be refused")
            } catch let error as ClusterCallError {
                #expect(error.code.rawValue == code, "\(request): \(error)")
            }
        }
        #expect(try await UserActor.resolve(ann, using: cluster["node-b"]).updateProfile(displayName: "Ann B.", avatarURL: nil).displayName == "Ann B.")

        // Two conversations; the one with the newest message comes first.
        let direct = ConversationActor.directID(ann, ben)
        _ = try await ConversationActor.resolve(direct, using: cluster["node-a"]).create(CreateConversation(creatorId: ann, memberIds: [ben]))
        let group = ConversationID.make()
        _ = try await ConversationActor.resolve(group, using: cluster["node-b"]).create(CreateConversation(creatorId: ben, memberIds: [ann], name: "g"))
        for text in ["one", "two", "three"] {
            _ = try await ConversationActor.resolve(group, using: cluster["node-a"]).send(SendMessage(senderId: ben, clientMessageId: UUID().uuidString, text: text))
        }
        try await Task.sleep(for: .milliseconds(5))
        _ = try await ConversationActor.resolve(direct, using: cluster["node-b"]).send(SendMessage(senderId: ben, clientMessageId: UUID().uuidString, text: "hi"))
        _ = try await ConversationActor.resolve(group, using: cluster["node-b"]).markReceipts(for: ann, deliveredSeq: nil, readSeq: 1)

        let page = try await UserActor.resolve(ann, using: cluster["node-a"]).conversations(after: nil, limit: 1)
        #expect(page.conversations.map(\.conversation.id) == [direct])
        #expect(page.conversations.first?.unreadCount == 1 && page.conversations.first?.lastMessage?.text == "hi")
        let rest = try await UserActor.resolve(ann, using: cluster["node-b"]).conversations(after: page.next, limit: 10)
        #expect(rest.conversations.map(\.conversation.id) == [group])
        #expect(rest.conversations.first?.unreadCount == 2, "read 1 of 3")
        #expect(rest.next == nil)
        let bens = try await UserActor.resolve(ben, using: cluster["node-a"]).conversations(after: nil, limit: 10)
        #expect(bens.conversations.allSatisfy { $0.unreadCount == 0 }, "a sender has read what it sent")
    }
}

/// An attachment is recorded for a conversation only once its sender is found to be a member:
/// a reference from elsewhere would keep the upload from the sweeper for good and cost every
/// later download a read.
@Suite struct AttachTests {
    @Test func attachingToAConversationOneIsNotInRecordsNothing() async throws {
        let ann = UserID.make(), ben = UserID.make(), cat = UserID.make()
        let store = InMemoryChatStore()
        // Push settings with no provider: users' actors run too.
        let cluster = try await startChatCluster(users: [ann, ben, cat], workers: ["node-a"], gateways: ["node-g"], store: store, pushes: PushSettings(providers: [:]))
        defer { Task { await cluster.stopAll() } }
        let system = cluster["node-g"]
        let photo = Media(id: .make(), contentType: "image/png", size: 10, sha256: String(repeating: "a", count: 64), createdAt: Date().millisecondPrecision)
        _ = try await UserActor.resolve(ann, using: system).recordUpload(photo)
        let theirs = ConversationID.make(), ours = ConversationID.make()
        _ = try await ConversationActor.resolve(theirs, using: system).create(CreateConversation(creatorId: ben, memberIds: [cat], name: "b and c"))
        _ = try await ConversationActor.resolve(ours, using: system).create(CreateConversation(creatorId: ann, memberIds: [ben], name: "a and b"))

        for conversation in [theirs, ConversationID.make()] {
            do {
                _ = try await UserActor.resolve(ann, using: system).attach([API.NewAttachment(mediaId: photo.id)], to: conversation)
                Issue.record("an attachment was recorded for a conversation ann is not in")
            } catch let error as ClusterCallError {
                #expect(error.code.rawValue == "not_found", "\(error)")
            }
        }
        #expect(try await store.conversationsReferencing(photo.id) == [], "no row for a conversation ann is not in")
        let attached = try await UserActor.resolve(ann, using: system).attach([API.NewAttachment(mediaId: photo.id)], to: ours)
        #expect(attached.map(\.media.id) == [photo.id])
        #expect(try await store.conversationsReferencing(photo.id) == [ours])
    }
}

/// An ID that names nothing costs no actor: asking about random conversations and users leaves
/// the worker holding what it held, while a conversation created under a fresh ID is found.
@Suite struct UnknownIDTests {
    @Test func unknownIDsHoldNoActors() async throws {
        let ann = UserID.make(), ben = UserID.make()
        let cluster = try await startChatCluster(users: [ann, ben], workers: ["node-a"], gateways: ["node-g"], pushes: PushSettings(providers: [:]))
        defer { Task { await cluster.stopAll() } }
        let system = cluster["node-g"], worker = cluster["node-a"]
        let before = worker.activeActorIDs.count
        for _ in 0..<200 {
            await #expect(throws: ClusterCallError.self) { try await ConversationActor.resolve(ConversationID.make(), using: system).snapshot(for: ann) }
            await #expect(throws: ClusterCallError.self) { try await UserActor.resolve(UserID.make(), using: system).user() }
        }
        #expect(worker.activeActorIDs.count == before, "\(worker.activeActorIDs.count - before) actors left by 400 unknown IDs")

        // A fresh ID asked about while it is being created: the creation holds.
        let fresh = ConversationID.make()
        async let created = ConversationActor.resolve(fresh, using: system).create(CreateConversation(creatorId: ann, memberIds: [ben], name: "new"))
        _ = try? await ConversationActor.resolve(fresh, using: system).snapshot(for: ann)
        #expect(try await created.created)
        #expect(try await ConversationActor.resolve(fresh, using: system).snapshot(for: ben).id == fresh)
    }
}
