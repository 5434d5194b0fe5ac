import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

/// Profile and group photos through the users' and conversations' actors on two workers: what
/// may be a photo, who may download it while it is one and after, who hears of a change, and
/// that webhooks do.
@Suite(.serialized) struct PhotoTests {
    static let (ann, bob, cat, dan): (UserID, UserID, UserID, UserID) = ("u_ann", "u_bob", "u_cat", "u_dan")

    /// Ann, Bob, Cat and Dan; a gateway `node-g` whose inbox records the `user` and
    /// `conversation` events it is handed, and where Ann, Bob and Dan stream.
    func started() async throws -> (RecordingWebhookEndpoint, InMemoryChatStore, LoopbackCluster, RecordedDeliveries, GatewayInbox) {
        let endpoint = RecordingWebhookEndpoint()
        let store = InMemoryChatStore()
        let cluster = try await startSafetyCluster(
            users: [Self.ann, Self.bob, Self.cat, Self.dan], store: store, endpoint: endpoint, types: [.userUpdated, .conversationUpdated])
        try await cluster.start("node-g", roles: .gateway)
        try await cluster.waitForUp(["node-a", "node-b", "node-g"])
        let received = RecordedDeliveries()
        let inbox = GatewayInbox.open(on: cluster["node-g"]) { received.record($0) }
        let system = cluster["node-g"]
        for user in [Self.ann, Self.bob, Self.cat, Self.dan] { _ = try await PresenceShard.resolve(for: user, using: system).presence(of: [user]) }
        // A presence shard presumes everyone streams for one lease after it starts.
        try await Task.sleep(for: PresenceShard.sessionLease)
        for user in [Self.ann, Self.bob, Self.dan] {
            _ = try await PresenceShard.resolve(for: user, using: system).openSession(.init(userId: user, sessionID: "s-\(user)"), gateway: "node-g")
        }
        return (endpoint, store, cluster, received, inbox)
    }

    func upload(_ type: String = "image/jpeg", by user: UserID, in store: InMemoryChatStore) async throws -> Media {
        let media = Media(id: .make(), contentType: type, size: 100, sha256: String(repeating: "e1", count: 32), width: 8, height: 8, createdAt: Date().millisecondPrecision)
        try await store.recordMedia(StoredMedia(media: media, uploaderId: user))
        return media
    }

    @Test func aProfilePhotoIsEveryonesToSeeWhileItIsOneAndItsChangeReachesContactsAndWebhooks() async throws {
        let (endpoint, store, cluster, received, inbox) = try await started()
        defer { Task { await cluster.stopAll() } }
        defer { _ = inbox }
        let system = cluster["node-a"]
        let group = try ConversationActor.resolve(ConversationID.make(), using: system)
        _ = try await group.create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob, Self.cat], name: "three"))
        let ann = try UserActor.resolve(Self.ann, using: system)
        let (photo, second) = (try await upload(by: Self.ann, in: store), try await upload(by: Self.ann, in: store))
        let document = try await upload("application/pdf", by: Self.ann, in: store)
        let bobs = try await upload(by: Self.bob, in: store)

        #expect(await refusal { _ = try await ann.setAvatar(document.id) } == "invalid_request: mediaId: \(document.id) is not an image upload of yours")
        #expect(await refusal { _ = try await ann.setAvatar(bobs.id) } == "invalid_request: mediaId: \(bobs.id) is not an image upload of yours")
        #expect(await refusal { _ = try await ann.setAvatar("m_nothing") } == "invalid_request: mediaId: m_nothing is not an image upload of yours")
        let dan = try UserActor.resolve(Self.dan, using: cluster["node-b"])
        #expect(await refusal { _ = try await dan.downloadable(photo.id) } == "not_found: media not found", "an upload is its uploader's until it is a photo")

        _ = try await ann.updateProfile(displayName: nil, avatarURL: "https://example.com/ann.png")
        let pictured = try await ann.setAvatar(photo.id)
        #expect(pictured.avatar == photo && pictured.avatarURL == nil, "the avatar replaces the URL: \(pictured)")
        #expect(try await ann.setAvatar(photo.id) == pictured, "setting it again changes nothing")
        #expect(try await dan.downloadable(photo.id) == photo, "a stranger may download a profile photo")
        #expect(try await UserActor.resolve(Self.cat, using: system).downloadable(photo.id) == photo)

        try await eventually(timeout: .seconds(5), "Ann's streams and her contacts' hear of it; Dan, who shares nothing with her, does not") {
            received.deliveries.withLock { deliveries in
                let told = deliveries.filter { $0.event == .user(pictured) }.flatMap(\.recipients)
                return Set(told) == [Self.ann, Self.bob]
            }
        }
        _ = try await ann.setAvatar(second.id)
        #expect(await refusal { _ = try await dan.downloadable(photo.id) } == "not_found: media not found", "a photo replaced is its uploader's again")
        #expect(try await dan.downloadable(second.id) == second)
        let removed = try await ann.setAvatar(nil)
        #expect(removed.avatar == nil && removed.avatarURL == nil)
        #expect(await refusal { _ = try await dan.downloadable(second.id) } == "not_found: media not found")
        #expect(try await ann.downloadable(second.id).id == second.id, "its uploader still may, until the sweeper's next pass")

        // Four changes: the URL, the photo, the second photo, none. Changes made while one is being
        // delivered are told together, as the profile is then: the last told is the profile as it ended.
        try await eventually(timeout: .seconds(10), "every change told to webhooks") { try await store.untoldProfiles(limit: 10).isEmpty }
        let told = try endpoint.received.withLock { $0.filter { $0.type == .userUpdated } }.map {
            try API.makeDecoder().decode(UserUpdated.self, from: Data($0.body))
        }
        #expect(!told.isEmpty && Set(endpoint.received.withLock { $0.filter { $0.type == .userUpdated }.map(\.id) }).count == told.count, "each by its own ID")
        let last = try #require(told.last)
        #expect(last.type == "user.updated" && last.data.user.id == Self.ann && last.data.user.avatar == nil && last.data.user.avatarURL == nil, "\(last.data.user)")
    }

    @Test func aGroupsOwnerSetsItsPhotoWhichItsMembersAloneMayDownload() async throws {
        let (endpoint, store, cluster, received, inbox) = try await started()
        defer { Task { await cluster.stopAll() } }
        defer { _ = inbox }
        let system = cluster["node-b"]
        let id = ConversationID.make()
        let group = try ConversationActor.resolve(id, using: system)
        _ = try await group.create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob, Self.cat], name: "three"))
        let photo = try await upload(by: Self.ann, in: store)
        let bobs = try await upload(by: Self.bob, in: store)

        #expect(await refusal { _ = try await group.setPhoto(bobs.id, by: Self.bob) } == "forbidden: only the group's owner may change its photo")
        #expect(await refusal { _ = try await group.setPhoto(photo.id, by: Self.dan) } == "not_found: conversation not found")
        #expect(await refusal { _ = try await group.setPhoto(bobs.id, by: Self.ann) } == "invalid_request: mediaId: \(bobs.id) is not an image upload of yours")
        let direct = try ConversationActor.resolve(ConversationActor.directID(Self.ann, Self.bob), using: system)
        _ = try await direct.create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob]))
        #expect(await refusal { _ = try await direct.setPhoto(photo.id, by: Self.ann) } == "forbidden: a direct conversation has no photo")

        let record = try await group.setPhoto(photo.id, by: Self.ann)
        #expect(record.photo == photo)
        #expect(try await group.snapshot(for: Self.cat).photo == photo)
        #expect(try await UserActor.resolve(Self.cat, using: system).downloadable(photo.id) == photo, "a member may download it")
        let dan = try UserActor.resolve(Self.dan, using: system)
        #expect(await refusal { _ = try await dan.downloadable(photo.id) } == "not_found: media not found", "a stranger may not")
        try await eventually(timeout: .seconds(5), "the streaming members hear of it in the conversation's order") {
            received.deliveries.withLock { deliveries in
                deliveries.contains { delivery in
                    guard case .conversation(let change) = delivery.event else { return false }
                    return change.change == .updated && change.conversation.photo == photo && Set(delivery.recipients) == [Self.ann, Self.bob]
                }
            }
        }
        _ = try await group.setPhoto(nil, by: Self.ann)
        #expect(await refusal { _ = try await UserActor.resolve(Self.cat, using: system).downloadable(photo.id) } == "not_found: media not found",
                "removed, it is its uploader's again")
        try await eventually(timeout: .seconds(5), "webhooks get conversation.updated for the photo and its removal") {
            endpoint.of(id).filter { $0.type == .conversationUpdated }.count == 2
        }
    }

    private struct UserUpdated: Decodable {
        struct Data: Decodable { var user: User }
        var type: String
        var data: Data
    }
}
