import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Testing

/// Apps' own fields through the users' and conversations' actors on two workers: who may write
/// each level, who reads it, what is refused, and that webhooks carry them.
@Suite(.serialized) struct AppFieldsTests {
    static let (ann, bob, cat): (UserID, UserID, UserID) = ("u_ann", "u_bob", "u_cat")

    func started() async throws -> (RecordingWebhookEndpoint, LoopbackCluster) {
        let endpoint = RecordingWebhookEndpoint()
        let cluster = try await startSafetyCluster(
            users: [Self.ann, Self.bob, Self.cat], store: InMemoryChatStore(), endpoint: endpoint, types: [.conversationUpdated, .messageCreated])
        return (endpoint, cluster)
    }

    @Test func aUsersPublicFieldsAreEveryonesAndTheirPrivateOnesTheirsAlone() async throws {
        let (_, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let ann = try UserActor.resolve(Self.ann, using: cluster["node-a"])
        let bio = Metadata(["bio": .string("learning Japanese"), "tier": .string("pro")])
        let usage = Metadata(["aiUsageToday": .integer(12), "learning": .string("ja")])
        let changed = try await ann.updateProfile(displayName: nil, avatarURL: nil, metadata: bio, privateMetadata: usage)
        #expect(changed.metadata == bio && changed.privateMetadata == usage, "the user's own answer has both")
        #expect(try await ann.me().privateMetadata == usage)
        let seen = try await UserActor.resolve(Self.ann, using: cluster["node-b"]).user()
        #expect(seen.metadata == bio && seen.privateMetadata == nil, "the profile others are given has the public fields only: \(seen)")
        let big = Metadata(["x": .string(String(repeating: "y", count: Metadata.bytesMax))])
        #expect(await refusal { _ = try await ann.updateProfile(displayName: nil, avatarURL: nil, privateMetadata: big) }?
            .hasPrefix("invalid_request: privateMetadata: at most 4096 bytes") == true)
        #expect(try await ann.me().privateMetadata == usage, "a refused change changes nothing")
        let cleared = try await ann.updateProfile(displayName: nil, avatarURL: nil, metadata: Metadata([:]))
        #expect(cleared.metadata == nil && cleared.privateMetadata == usage, "an empty object removes the public fields, the private stay")
    }

    @Test func theOwnerWritesAConversationsFieldsAndEachMemberTheirOwn() async throws {
        let (endpoint, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let id = ConversationID.make()
        let group = try ConversationActor.resolve(id, using: cluster["node-b"])
        _ = try await group.create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob, Self.cat], name: "three"))
        let theme = Metadata(["theme": .string("dark")])
        #expect(await refusal { _ = try await group.change(name: nil, metadata: theme, by: Self.bob) } == "forbidden: only the group's owner may change its metadata")
        #expect(await refusal { _ = try await group.change(name: nil, metadata: nil, by: Self.ann) }?.hasPrefix("invalid_request") == true)
        let record = try await group.change(name: nil, metadata: theme, by: Self.ann)
        #expect(record.metadata == theme && record.name == "three")
        let renamed = try await group.change(name: "four", metadata: nil, by: Self.bob)
        #expect(renamed.name == "four" && renamed.metadata == theme, "any member renames; the fields stay")

        let japanese = Metadata(["translateTo": .string("ja")])
        let mine = try await group.setMemberMetadata(japanese, by: Self.bob)
        #expect(mine.member(Self.bob)?.metadata == japanese)
        #expect(await refusal { _ = try await group.setMemberMetadata(japanese, by: "u_stranger") } == "not_found: conversation not found")
        let asCat = API.Conversation(mine, for: Self.cat)
        #expect(asCat.members.allSatisfy { $0.metadata == nil } && asCat.metadata == theme, "another member sees the conversation's fields, not Bob's own")
        #expect(API.Conversation(mine, for: Self.bob).members.first { $0.userId == Self.bob }?.metadata == japanese, "Bob sees his")
        #expect(API.Conversation(mine, for: Self.cat, bot: true).members.first { $0.userId == Self.bob }?.metadata == japanese, "a bot sees everyone's")

        let direct = try ConversationActor.resolve(ConversationActor.directID(Self.ann, Self.bob), using: cluster["node-a"])
        _ = try await direct.create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob]))
        #expect(try await direct.change(name: nil, metadata: theme, by: Self.bob).metadata == theme, "either member of a direct chat writes its fields")

        try await eventually(timeout: .seconds(5), "webhooks hear of the fields, the rename and Bob's own, each as conversation.updated") {
            let told = endpoint.of(id).filter { $0.type == .conversationUpdated }
            guard told.count == 3, let last = told.last else { return false }
            let body = try JSONSerialization.jsonObject(with: Data(last.body)) as? [String: Any]
            let members = ((body?["data"] as? [String: Any])?["conversation"] as? [String: Any])?["members"] as? [[String: Any]]
            return (members?.first { $0["userId"] as? String == Self.bob.rawValue }?["metadata"] as? [String: String]) == ["translateTo": "ja"]
        }
    }

    @Test func aMessageKeepsTheFieldsItWasSentWith() async throws {
        let (endpoint, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let id = ConversationID.make()
        let group = try ConversationActor.resolve(id, using: cluster["node-a"])
        _ = try await group.create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob], name: "two"))
        let voice = Metadata(["durationMs": .integer(3250), "kind": .string("voice")])
        let sent = try await group.send(SendMessage(senderId: Self.ann, clientMessageId: UUID().uuidString, text: "🎤", metadata: voice)).message
        #expect(sent.metadata == voice)
        #expect(try await group.history(for: Self.bob, after: 0, before: nil, limit: 10).first?.metadata == voice)
        let deep = Metadata(["a": .array([.array([.array([.array([.array([.array([.array([.array([.integer(1)])])])])])])])])])
        #expect(await refusal {
            _ = try await group.send(SendMessage(senderId: Self.ann, clientMessageId: UUID().uuidString, text: "x", metadata: deep))
        }?.hasPrefix("invalid_request: metadata.a") == true)
        try await eventually(timeout: .seconds(5), "message.created carries them") {
            guard let told = endpoint.of(id).first(where: { $0.type == .messageCreated }) else { return false }
            let body = try JSONSerialization.jsonObject(with: Data(told.body)) as? [String: Any]
            let message = (body?["data"] as? [String: Any])?["message"] as? [String: Any]
            return (message?["metadata"] as? [String: Any])?["durationMs"] as? Int == 3250
        }
    }
}
