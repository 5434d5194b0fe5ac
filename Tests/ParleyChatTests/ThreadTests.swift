import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

/// Replies, mentions and pins through a conversation's owner, on two workers: what a send may
/// name, what a reply quotes as its original changes, who may pin, and that webhooks hear of pins.
@Suite(.serialized) struct ThreadTests {
    static let (ann, bob, cat): (UserID, UserID, UserID) = ("u_ann", "u_bob", "u_cat")

    func started() async throws -> (RecordingWebhookEndpoint, InMemoryChatStore, LoopbackCluster) {
        let endpoint = RecordingWebhookEndpoint()
        let store = InMemoryChatStore()
        let cluster = try await startSafetyCluster(
            users: [Self.ann, Self.bob, Self.cat], store: store, endpoint: endpoint, types: [.messagePinned, .messageUnpinned, .messageCreated])
        return (endpoint, store, cluster)
    }

    /// A group Ann owns with Bob and Cat, with a message from Ann (seq 1).
    func group(using system: ClusterSystem) async throws -> ConversationActor {
        let actor = try ConversationActor.resolve(ConversationID.make(), using: system)
        _ = try await actor.create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob, Self.cat], name: "three"))
        _ = try await actor.send(SendMessage(senderId: Self.ann, clientMessageId: UUID().uuidString, text: "the plan"))
        return actor
    }

    func send(_ text: String, by sender: UserID, replyTo: Int64? = nil, mentions: [UserID] = [], to actor: ConversationActor) async throws -> Message {
        try await actor.send(SendMessage(senderId: sender, clientMessageId: UUID().uuidString, text: text, replyTo: replyTo, mentions: mentions)).message
    }

    @Test func aReplyQuotesItsOriginalAsItIsNowAndIsListedUnderIt() async throws {
        let (_, _, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let actor = try await group(using: cluster["node-a"])
        let reply = try await send("sounds good", by: Self.bob, replyTo: 1, to: actor)
        #expect(reply.replyTo == MessageQuote(seq: 1, senderId: Self.ann, text: "the plan", attachments: false))
        #expect(await refusal { _ = try await send("to nothing", by: Self.bob, replyTo: 9, to: actor) }?.hasPrefix("invalid_request: replyTo") == true)
        #expect(await refusal { _ = try await send("to nothing", by: Self.bob, replyTo: 0, to: actor) }?.hasPrefix("invalid_request: replyTo") == true)
        _ = try await actor.edit(seq: 1, text: "the new plan", clientChangeId: UUID().uuidString, by: Self.ann)
        #expect(try await actor.history(for: Self.cat, after: 1, before: nil, limit: 1).first?.replyTo?.text == "the new plan", "an edit requotes")
        #expect(try await actor.replies(to: 1, after: 0, limit: 10, for: Self.cat).map(\.seq) == [reply.seq])
        _ = try await actor.delete(seq: 1, by: Self.ann)
        let quote = try await actor.history(for: Self.cat, after: 1, before: nil, limit: 1).first?.replyTo
        #expect(quote?.deleted == true && quote?.text == "", "a deletion empties the quote")
        #expect(await refusal { _ = try await send("to a tombstone", by: Self.cat, replyTo: 1, to: actor) }?.hasPrefix("invalid_request: replyTo: message 1 was deleted") == true)
    }

    @Test func mentionsNameMembersOnceEachAndTheMentionedFindThem() async throws {
        let (_, store, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let actor = try await group(using: cluster["node-b"])
        let message = try await send("@cat @bob look", by: Self.ann, mentions: [Self.cat, Self.bob, Self.cat], to: actor)
        #expect(message.mentions == [Self.cat, Self.bob], "once each, in the sender's order")
        #expect(await refusal { _ = try await send("hi", by: Self.ann, mentions: ["u_stranger"], to: actor) } == "invalid_request: mentions: not members of this conversation: u_stranger")
        #expect(await refusal { _ = try await send("me", by: Self.ann, mentions: [Self.ann], to: actor) }?.hasPrefix("invalid_request: mentions: a sender") == true)
        #expect(await refusal {
            _ = try await send("many", by: Self.ann, mentions: (0...SendMessage.mentionsMax).map { UserID(rawValue: "u_\($0)") }, to: actor)
        }?.hasPrefix("invalid_request: mentions: at most 50") == true)
        #expect(try await store.mentions(of: Self.cat, before: nil, limit: 10) == [message])
        _ = try await actor.react(seq: message.seq, emoji: "👍", adding: true, by: Self.cat)
        let later = try await send("@cat again", by: Self.bob, mentions: [Self.cat], to: actor)
        let cat = try UserActor.resolve(Self.cat, using: cluster["node-a"])
        let first = try await cat.mentions(before: nil, limit: 1)
        #expect(first.mentions.map(\.seq) == [later.seq] && first.next != nil, "newest first, a page at a time")
        let second = try await cat.mentions(before: first.next, limit: 1)
        #expect(second.mentions.map(\.seq) == [message.seq])
        #expect(second.mentions.first?.reactions == [Reaction(emoji: "👍", count: 1, me: true)], "her own reaction is hers")
        #expect(try await cat.mentions(before: second.next, limit: 1).mentions.isEmpty)
        #expect(await refusal { _ = try await cat.mentions(before: "not a cursor", limit: 1) }?.hasPrefix("invalid_request") == true)
    }

    @Test func theGroupsOwnerPinsUpToTheLimitAndWebhooksHearOfEachPin() async throws {
        let (endpoint, store, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let actor = try await group(using: cluster["node-a"])
        let id = ConversationID(rawValue: actor.id.key)
        #expect(await refusal { _ = try await actor.pin(seq: 1, pinning: true, by: Self.bob) }?.hasPrefix("forbidden: only the group's owner") == true)
        #expect(try await actor.pin(seq: 1, pinning: true, by: Self.ann) == [1])
        _ = try await send("another", by: Self.bob, to: actor)
        #expect(try await actor.pin(seq: 2, pinning: true, by: Self.ann) == [2, 1])
        #expect(try await actor.pin(seq: 1, pinning: true, by: Self.ann) == [2, 1], "pinned again: no change")
        #expect(try await actor.pin(seq: 2, pinning: false, by: Self.ann) == [1])
        #expect(try await store.messageChanges(in: id, after: 0, limit: 10).map(\.kind) == [.pinned, .pinned, .unpinned])
        for number in 3...ConversationRecord.pinnedMax + 1 { _ = try await send("m\(number)", by: Self.cat, to: actor) }
        for seq in Int64(2)...Int64(ConversationRecord.pinnedMax) { _ = try await actor.pin(seq: seq, pinning: true, by: Self.ann) }
        #expect(try await actor.snapshot(for: Self.bob).pinned.count == ConversationRecord.pinnedMax)
        #expect(await refusal { _ = try await actor.pin(seq: Int64(ConversationRecord.pinnedMax + 1), pinning: true, by: Self.ann) }?.hasPrefix("conflict") == true)
        #expect(try await actor.pin(seq: 2, pinning: false, by: Self.ann).first == Int64(ConversationRecord.pinnedMax), "unpinned; the most recent first")
        _ = try await actor.delete(seq: 3, by: Self.ann)
        #expect(try await actor.snapshot(for: Self.bob).pinned.contains(3) == false, "a deletion unpins")
        #expect(try await store.conversation(id)?.pinned == (try await actor.snapshot(for: Self.cat).pinned), "the owner and the store agree")
        #expect(await refusal { _ = try await actor.pin(seq: 3, pinning: true, by: Self.ann) }?.hasPrefix("conflict: the message was deleted") == true)
        try await eventually(timeout: .seconds(5), "webhooks hear of every pin and the unpin, in order") {
            endpoint.received.withLock { received in
                received.filter { $0.type == .messagePinned }.count >= ConversationRecord.pinnedMax && received.contains { $0.type == .messageUnpinned }
            }
        }
    }

    @Test func eitherMemberOfADirectConversationPins() async throws {
        let (_, _, cluster) = try await started()
        defer { Task { await cluster.stopAll() } }
        let actor = try ConversationActor.resolve(ConversationActor.directID(Self.ann, Self.bob), using: cluster["node-b"])
        _ = try await actor.create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob]))
        _ = try await send("hi", by: Self.ann, to: actor)
        #expect(try await actor.pin(seq: 1, pinning: true, by: Self.bob) == [1])
        #expect(try await actor.pin(seq: 1, pinning: false, by: Self.ann) == [])
    }
}
