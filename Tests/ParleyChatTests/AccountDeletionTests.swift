import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

@Suite(.serialized) struct AccountDeletionTests {
    static let (ann, bob, cat): (UserID, UserID, UserID) = ("u_ann", "u_bob", "u_cat")

    /// Two workers over a new store, delivering deletions' webhooks to a new endpoint.
    func started() async throws -> (RecordingWebhookEndpoint, InMemoryChatStore, LoopbackCluster) {
        let endpoint = RecordingWebhookEndpoint()
        let store = InMemoryChatStore()
        let cluster = try await startSafetyCluster(
            users: [Self.ann, Self.bob, Self.cat], store: store, endpoint: endpoint, types: [.userDeleted, .messageErased, .memberRemoved])
        return (endpoint, store, cluster)
    }

    /// A group Ann owns with Bob and Cat, and Ann's direct conversation with Bob; each member
    /// writes in each.
    func conversations(using system: ClusterSystem) async throws -> (group: ConversationID, direct: ConversationID) {
        let group = ConversationID.make()
        _ = try await ConversationActor.resolve(group, using: system).create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob, Self.cat], name: "three"))
        let direct = ConversationActor.directID(Self.ann, Self.bob)
        _ = try await ConversationActor.resolve(direct, using: system).create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob]))
        for (conversation, senders) in [(group, [Self.ann, Self.bob, Self.ann, Self.cat, Self.ann]), (direct, [Self.bob, Self.ann, Self.ann])] {
            for (index, sender) in senders.enumerated() {
                _ = try await ConversationActor.resolve(conversation, using: system)
                    .send(SendMessage(senderId: sender, clientMessageId: UUID().uuidString, text: "\(sender.rawValue) \(index)"))
            }
        }
        return (group, direct)
    }

    /// Deleted, Ann's tokens stop working, her profile reads as a deleted account, she leaves
    /// every conversation (a direct one too; her group passes to Bob), what she wrote stays for
    /// the others, and webhooks get `user.deleted` once, after each member_removed.
    @Test func aDeletionLeavesEveryConversationAndKeepsTheMessages() async throws {
        let (endpoint, store, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let system = cluster["node-a"]
        let (group, direct) = try await conversations(using: system)
        let before = try await store.messages(in: group, after: 0, limit: 10)

        let ann = try UserActor.resolve(Self.ann, using: system)
        let deletion = try await ann.deleteAccount(erase: false)
        #expect(deletion.userId == Self.ann && !deletion.erase && deletion.finishedAt != nil)
        #expect(await refusal { _ = try await ann.authenticate(tokenId: "any") }?.contains("this account is deleted") == true)
        let profile = try await UserActor.resolve(Self.ann, using: cluster["node-b"]).user()
        #expect(profile.deleted == true && profile.displayName.isEmpty && profile.avatarURL == nil && profile.handle == User.deletedHandle)

        let groupNow = try await ConversationActor.resolve(group, using: system).snapshot(for: Self.bob)
        #expect(groupNow.members.map(\.userId) == [Self.bob, Self.cat] && groupNow.ownerId == Self.bob, "Bob owns the group now")
        let directNow = try await ConversationActor.resolve(direct, using: system).snapshot(for: Self.bob)
        #expect(directNow.members.map(\.userId) == [Self.bob], "she left the direct conversation too")
        #expect(try await store.messages(in: group, after: 0, limit: 10) == before, "what she wrote stays, attributed to her")
        #expect(try await store.conversations(of: Self.ann, after: nil, limit: 10).isEmpty)
        let bobSends = try await ConversationActor.resolve(direct, using: system)
            .send(SendMessage(senderId: Self.bob, clientMessageId: UUID().uuidString, text: "still here"))
        #expect(bobSends.created, "Bob can still write in what was their direct conversation")
        #expect(await refusal {
            _ = try await ConversationActor.resolve(.make(), using: system).create(CreateConversation(creatorId: Self.cat, memberIds: [Self.ann], name: "again"))
        }?.hasPrefix("invalid_request") == true, "nobody adds a deleted account")

        try await eventually(timeout: .seconds(5), "user.deleted reaches the endpoint") {
            endpoint.received.withLock { $0.contains { $0.type == .userDeleted } }
        }
        try await eventually(timeout: .seconds(5), "the desk marks it delivered") { try await store.deletionsOwingWebhooks(limit: 10).isEmpty }
        let received = endpoint.received.withLock { $0 }
        #expect(received.filter { $0.type == .userDeleted }.count == 1)
        #expect(Set(received.filter { $0.type == .memberRemoved }.compactMap(\.conversation)) == [group, direct])
        #expect(received.allSatisfy { $0.type != .messageErased }, "nothing erased without erase=true")

        // Asked again (a client's retry, the desk's sweep): nothing more happens.
        #expect(try await ann.deleteAccount(erase: false) == deletion)
        try await Task.sleep(for: .milliseconds(300))
        #expect(endpoint.received.withLock { $0.filter { $0.type == .userDeleted }.count } == 1)
    }

    /// With erase, every message Ann sent is a tombstone in history (seq, sender and time kept),
    /// the others' messages stay, her attached upload is released, and webhooks get
    /// `message.erased` for each of hers.
    @Test func anErasureLeavesTombstonesAndReleasesTheUploads() async throws {
        let (endpoint, store, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let system = cluster["node-a"]
        let (group, direct) = try await conversations(using: system)
        let photo = Media(id: .make(), contentType: "image/png", size: 10, sha256: String(repeating: "aa", count: 32), createdAt: Date())
        let ann = try UserActor.resolve(Self.ann, using: system)
        _ = try await ann.recordUpload(photo)
        let attached = try await ann.attach([API.NewAttachment(mediaId: photo.id)], to: group)
        _ = try await ConversationActor.resolve(group, using: system)
            .send(SendMessage(senderId: Self.ann, clientMessageId: UUID().uuidString, text: "look", attachments: attached))
        let before = try await store.messages(in: group, after: 0, limit: 10) + store.messages(in: direct, after: 0, limit: 10)

        _ = try await ann.deleteAccount(erase: true)
        let after = try await store.messages(in: group, after: 0, limit: 10) + store.messages(in: direct, after: 0, limit: 10)
        #expect(after.count == before.count)
        for (old, new) in zip(before, after) {
            if old.senderId == Self.ann {
                #expect(new == old.tombstone, "seq \(old.seq) of \(old.conversationId) is a tombstone")
            } else {
                #expect(new == old, "seq \(old.seq) of \(old.conversationId), not hers, stays")
            }
        }
        #expect(try await store.conversationsReferencing(photo.id).isEmpty, "her upload is attached nowhere now")
        let hers = Set(before.filter { $0.senderId == Self.ann }.map { "\($0.conversationId.rawValue) \($0.seq)" })
        try await eventually(timeout: .seconds(5), "message.erased for each of hers") {
            Set(endpoint.received.withLock { $0.filter { $0.type == .messageErased }.map { "\($0.conversation?.rawValue ?? "") \($0.seq ?? 0)" } }) == hers
        }
    }

    /// A deletion cut short after its first step (the node died) is finished by the safety desk.
    @Test func theDeskFinishesADeletionLeftHalfDone() async throws {
        let (endpoint, store, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let system = cluster["node-b"]
        let (group, _) = try await conversations(using: system)
        _ = try await store.beginDeletion(of: Self.ann, erase: true, at: Date())
        try await SafetyDesk.resolve(using: system).resume()
        try await eventually(timeout: .seconds(5), "the deletion is finished") { try await store.unfinishedDeletions(limit: 10).isEmpty }
        #expect(try await store.conversations(of: Self.ann, after: nil, limit: 10).isEmpty)
        #expect(try await store.messages(in: group, after: 0, limit: 10).filter { $0.senderId == Self.ann }.allSatisfy { $0.erased == true })
        try await eventually(timeout: .seconds(5), "user.deleted reaches the endpoint") {
            endpoint.received.withLock { $0.contains { $0.type == .userDeleted } }
        }
    }

    /// An operator's erasure goes through the conversation's order: the message is a tombstone,
    /// its upload released unless another message not erased carries it; again, nothing changes.
    @Test func anOperatorErasesOneMessage() async throws {
        let (endpoint, store, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let system = cluster["node-a"]
        let (group, _) = try await conversations(using: system)
        let bob = try UserActor.resolve(Self.bob, using: system)
        let (shared, single) = (
            Media(id: .make(), contentType: "image/png", size: 10, sha256: String(repeating: "bb", count: 32), createdAt: Date()),
            Media(id: .make(), contentType: "image/png", size: 10, sha256: String(repeating: "cc", count: 32), createdAt: Date())
        )
        var seqs: [Int64] = []
        for upload in [shared, single] { _ = try await bob.recordUpload(upload) }
        for media in [[shared, single], [shared]] {
            let attached = try await bob.attach(media.map { API.NewAttachment(mediaId: $0.id) }, to: group)
            seqs.append(try await ConversationActor.resolve(group, using: system)
                .send(SendMessage(senderId: Self.bob, clientMessageId: UUID().uuidString, text: "files", attachments: attached)).message.seq)
        }
        let conversation = try ConversationActor.resolve(group, using: system)
        let tombstone = try await conversation.moderatorErase(seq: seqs[0])
        #expect(tombstone.erased == true && tombstone.text.isEmpty && tombstone.attachments == nil && tombstone.senderId == Self.bob)
        #expect(try await store.conversationsReferencing(single.id).isEmpty, "the upload only it carried is released")
        #expect(try await store.conversationsReferencing(shared.id) == [group], "the one another message carries stays")
        #expect(try await conversation.moderatorErase(seq: seqs[0]) == tombstone, "erasing again changes nothing")
        #expect(await refusal { _ = try await conversation.moderatorErase(seq: 99) }?.hasPrefix("not_found") == true)
        try await eventually(timeout: .seconds(5), "message.erased reaches the endpoint once") {
            endpoint.received.withLock { $0.filter { $0.type == .messageErased }.count } == 1
        }
    }
}
