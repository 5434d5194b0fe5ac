import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

/// Edits, deletions for everyone and reactions through a conversation's owner, on two workers:
/// who may make each, what each leaves in the store, and that webhooks hear of each in order.
@Suite(.serialized) struct MessageChangeTests {
    static let (ann, bob, cat): (UserID, UserID, UserID) = ("u_ann", "u_bob", "u_cat")

    func started() async throws -> (RecordingWebhookEndpoint, InMemoryChatStore, LoopbackCluster) {
        let endpoint = RecordingWebhookEndpoint()
        let store = InMemoryChatStore()
        let cluster = try await startSafetyCluster(
            users: [Self.ann, Self.bob, Self.cat], store: store, endpoint: endpoint,
            types: [.messageEdited, .messageDeleted, .reactionAdded, .reactionRemoved])
        return (endpoint, store, cluster)
    }

    /// A group Ann owns with Bob and Cat, with a message from each, in that order (seqs 1, 2, 3).
    func group(using system: ClusterSystem) async throws -> ConversationActor {
        let id = ConversationID.make()
        let actor = try ConversationActor.resolve(id, using: system)
        _ = try await actor.create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob, Self.cat], name: "three"))
        for sender in [Self.ann, Self.bob, Self.cat] {
            _ = try await actor.send(SendMessage(senderId: sender, clientMessageId: UUID().uuidString, text: "from \(sender.rawValue)"))
        }
        return actor
    }

    func conversation(_ actor: ConversationActor) -> ConversationID { ConversationID(rawValue: actor.id.key) }

    @Test func onlyTheSenderEditsAndAnEditIsAppliedOncePerClientChangeID() async throws {
        let (endpoint, store, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let actor = try await group(using: cluster["node-a"])
        let key = UUID().uuidString
        let edited = try await actor.edit(seq: 1, text: "from ann, edited", clientChangeId: key, by: Self.ann)
        #expect(edited.text == "from ann, edited" && edited.editedAt != nil && edited.seq == 1)
        let again = try await actor.edit(seq: 1, text: "a retry says the same", clientChangeId: key, by: Self.ann)
        #expect(again == edited, "a retry answers the message as it is and changes nothing")
        #expect(try await store.messageChanges(in: conversation(actor), after: 0, limit: 10).count == 1)
        #expect(await refusal { _ = try await actor.edit(seq: 2, text: "not mine", clientChangeId: UUID().uuidString, by: Self.ann) }?
            .hasPrefix("forbidden: only the sender edits") == true)
        #expect(await refusal { _ = try await actor.edit(seq: 2, text: "reused key", clientChangeId: key, by: Self.bob) }?.hasPrefix("conflict") == true)
        #expect(await refusal { _ = try await actor.edit(seq: 9, text: "none", clientChangeId: UUID().uuidString, by: Self.ann) }?.hasPrefix("not_found") == true)
        #expect(await refusal { _ = try await actor.edit(seq: 1, text: "  ", clientChangeId: UUID().uuidString, by: Self.ann) }?.hasPrefix("invalid_request") == true)
        #expect(await refusal { _ = try await actor.edit(seq: 1, text: "x", clientChangeId: "not a uuid", by: Self.ann) }?.hasPrefix("invalid_request") == true)
        let versions = try await actor.versions(of: 1, for: Self.cat)
        #expect(versions.map(\.text) == ["from u_ann", "from ann, edited"])
        try await eventually(timeout: .seconds(5), "webhooks hear of the edit") { endpoint.received.withLock { $0.contains { $0.type == .messageEdited } } }
        #expect(Set(endpoint.received.withLock { $0.filter { $0.type == .messageEdited }.map(\.id) }).count == 1, "once")
    }

    @Test func theSenderOrTheGroupsOwnerDeletesAndATombstoneTakesNoMoreChanges() async throws {
        let (endpoint, store, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let actor = try await group(using: cluster["node-b"])
        #expect(await refusal { _ = try await actor.delete(seq: 3, by: Self.bob) }?.hasPrefix("forbidden") == true, "Bob neither sent it nor owns the group")
        let own = try await actor.delete(seq: 2, by: Self.bob)
        #expect(own.deleted == true && own.deletedBy == Self.bob && own.text.isEmpty)
        let owners = try await actor.delete(seq: 3, by: Self.ann)
        #expect(owners.deletedBy == Self.ann, "the group's owner deletes anyone's")
        #expect(try await actor.delete(seq: 3, by: Self.ann) == owners, "deleting again answers the tombstone")
        #expect(await refusal { _ = try await actor.edit(seq: 2, text: "too late", clientChangeId: UUID().uuidString, by: Self.bob) }?.hasPrefix("conflict") == true)
        #expect(await refusal { _ = try await actor.react(seq: 2, emoji: "👍", adding: true, by: Self.ann) }?.hasPrefix("conflict") == true)
        #expect(try await actor.versions(of: 2, for: Self.ann).isEmpty)
        let history = try await actor.history(for: Self.cat, after: 0, before: nil, limit: 10)
        #expect(history.map { $0.deleted ?? false } == [false, true, true])
        #expect(try await store.messageChanges(in: conversation(actor), after: 0, limit: 10).map(\.kind) == [.deleted, .deleted])
        try await eventually(timeout: .seconds(5), "webhooks hear of both deletions") {
            Set(endpoint.received.withLock { $0.filter { $0.type == .messageDeleted }.map(\.id) }).count == 2
        }
    }

    @Test func reactionsFromEveryoneAtOnceAllCountAndEachMemberHoldsAnEmojiOnce() async throws {
        let (_, _, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let actor = try await group(using: cluster["node-a"])
        // Every member at once, through both workers: each reaction counts once.
        let fromB = try ConversationActor.resolve(conversation(actor), using: cluster["node-b"])
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for (member, via) in [(Self.ann, actor), (Self.bob, fromB), (Self.cat, fromB), (Self.ann, fromB)] {
                tasks.addTask { _ = try await via.react(seq: 1, emoji: "👍", adding: true, by: member) }
            }
            try await tasks.waitForAll()
        }
        let seen = try await actor.react(seq: 1, emoji: "❤️", adding: true, by: Self.bob)
        #expect(seen == [Reaction(emoji: "👍", count: 3, me: true), Reaction(emoji: "❤️", count: 1, me: true)])
        let asCat = try await actor.history(for: Self.cat, after: 0, before: nil, limit: 1).first?.reactions
        #expect(asCat == [Reaction(emoji: "👍", count: 3, me: true), Reaction(emoji: "❤️", count: 1, me: false)], "`me` is the reader's")
        #expect(try await actor.react(seq: 1, emoji: "❤️", adding: false, by: Self.cat) == asCat,
                "taking back what one does not hold changes nothing")
        #expect(await refusal { _ = try await actor.react(seq: 1, emoji: "a", adding: true, by: Self.cat) }?.hasPrefix("invalid_request") == true)
        #expect(await refusal { _ = try await actor.react(seq: 1, emoji: "👍👍", adding: true, by: Self.cat) }?.hasPrefix("invalid_request") == true)
        #expect(await refusal { _ = try await actor.react(seq: 1, emoji: "👍", adding: true, by: "u_stranger") }?.hasPrefix("not_found") == true)
    }

    @Test func aMessageHoldsAtMostTwentyDifferentEmoji() async throws {
        let (_, _, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let actor = try await group(using: cluster["node-a"])
        let emoji = Array("😀😁😂🤣😃😄😅😆😉😊😋😎😍😘🥰😗😙😚🙂🤗🤩").map(String.init)
        for index in 0..<20 { _ = try await actor.react(seq: 2, emoji: emoji[index], adding: true, by: Self.ann) }
        #expect(await refusal { _ = try await actor.react(seq: 2, emoji: emoji[20], adding: true, by: Self.bob) }?.hasPrefix("conflict") == true)
        #expect(try await actor.react(seq: 2, emoji: emoji[0], adding: true, by: Self.bob).first == Reaction(emoji: emoji[0], count: 2, me: true),
                "one already held still takes more")
    }

    @Test func emojiAreOneGraphemeOfEmojiPresentation() {
        for good in ["👍", "❤️", "👩🏽‍💻", "🇫🇷", "1️⃣", "🏳️‍🌈"] { #expect(Reaction.isEmoji(good), "\(good)") }
        for bad in ["", "a", "1", "#", "👍👍", "❤", " 👍", String(repeating: "👍", count: 9), "\u{200D}", "👍\n"] { #expect(!Reaction.isEmoji(bad), "\(bad.debugDescription)") }
    }
}
