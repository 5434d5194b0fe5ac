import Distributed
import Foundation
import Logging
import ParleyCluster
import ParleyModel
import ParleyStore

/// Changes to committed messages: edits, deletions for everyone, reactions, pins (API.md,
/// "Changing messages"). Each is numbered in the conversation's order of changes, committed under this
/// owner's epoch, and then handed to the streams (after the message it follows) and webhooks.
extension ConversationActor {
    /// `PATCH /v1/conversations/{id}/messages/{seq}`: the sender replaces the text of their
    /// message, within the edit window. The same `clientChangeId` again changes nothing and
    /// answers the message as it is.
    public distributed func edit(seq: Int64, text: String, clientChangeId: String, by user: UserID) async throws -> Message {
        let current = try state
        _ = try current.requireMember(user)
        guard ClientMessageID.isValid(clientChangeId) else { throw ChatError(.invalidRequest, "clientChangeId must be a UUID") }
        let key = clientChangeId.lowercased()
        return try await oneChangeAtATime {
            if let earlier = try await services.withStore({ try await $0.messageChange(in: current.id, clientChangeId: key) }) {
                guard earlier.seq == seq, earlier.userId == user else {
                    throw ChatError(.conflict, "clientChangeId \(key) was used for another change; make a new one for each edit")
                }
                return try await storedMessage(seq)
            }
            let message = try await storedMessage(seq)
            guard message.senderId == user else { throw ChatError(.forbidden, "only the sender edits a message") }
            guard !message.isTombstone else { throw ChatError(.conflict, "the message was deleted") }
            let window = services.limits.editWindow
            guard actorSystem.clock.wallNow.timeIntervalSince(message.sentAt) <= window / .seconds(1) else {
                throw ChatError(.forbidden, "a message can be edited for \(DurationText.format(window)) after it is sent")
            }
            try SendMessage.validate(
                clientMessageId: key, text: text, captions: (message.attachments ?? []).map(\.caption), limits: services.limits)
            if let refusal = blockRefusal(of: user, in: current.record) { throw refusal }
            let committed = try await commit(.edited, of: seq, by: user, text: text, clientChangeId: key)
            return committed?.message ?? message
        }
    }

    /// `DELETE /v1/conversations/{id}/messages/{seq}`: the message becomes its tombstone for
    /// everyone. Its sender may delete it, and so may a group's owner. Its uploads no other
    /// message carries are released. Deleting it again answers the tombstone.
    public distributed func delete(seq: Int64, by user: UserID) async throws -> Message {
        let current = try state
        _ = try current.requireMember(user)
        return try await oneChangeAtATime {
            let message = try await storedMessage(seq)
            guard message.senderId == user || (current.record.kind == .group && current.record.ownerId == user) else {
                throw ChatError(.forbidden, "only the sender, or the group's owner, deletes a message")
            }
            guard !message.isTombstone, let committed = try await commit(.deleted, of: seq, by: user) else { return message }
            fanOut?.pushes?.deleted(committed.message)
            let released = try await releaseUploads(of: [message])
            logger.debug("a message was deleted", metadata: ["message.seq": "\(seq)", "media.released": "\(released)"])
            return committed.message
        }
    }

    /// `PUT` / `DELETE …/messages/{seq}/reactions/{emoji}`: `user` holds `emoji` on message
    /// `seq`, or no longer does. Returns the message's reactions after, as `user` sees them.
    public distributed func react(seq: Int64, emoji: String, adding: Bool, by user: UserID) async throws -> [Reaction] {
        let current = try state
        _ = try current.requireMember(user)
        guard Reaction.isEmoji(emoji) else {
            throw ChatError(.invalidRequest, "emoji must be one emoji (one grapheme cluster of at most \(Reaction.emojiBytesMax) UTF-8 bytes)")
        }
        if let refusal = blockRefusal(of: user, in: current.record) { throw refusal }
        return try await oneChangeAtATime {
            var message = try await storedMessage(seq)
            guard !message.isTombstone else { throw ChatError(.conflict, "the message was deleted") }
            let held = message.reactions ?? []
            if adding, !held.contains(where: { $0.emoji == emoji }), held.count >= services.limits.reactionsPerMessageMax {
                throw ChatError(.conflict, "the message has \(held.count) different reactions, the most it may hold; add one of those")
            }
            if let committed = try await commit(adding ? .reactionAdded : .reactionRemoved, of: seq, by: user, emoji: emoji) {
                message = committed.message
            }
            return try await reactions(of: message, as: user)
        }
    }

    /// `PUT` / `DELETE …/messages/{seq}/pin`: message `seq` is pinned, most recently first, or
    /// no longer is. A group's owner pins, and either member of a direct conversation. Returns
    /// the conversation's pinned seqs after.
    public distributed func pin(seq: Int64, pinning: Bool, by user: UserID) async throws -> [Int64] {
        let current = try state
        _ = try current.requireMember(user)
        guard current.record.kind == .direct || current.record.ownerId == user else {
            throw ChatError(.forbidden, "only the group's owner pins messages")
        }
        if let refusal = blockRefusal(of: user, in: current.record) { throw refusal }
        return try await oneChangeAtATime {
            let message = try await storedMessage(seq)
            let pinned = try state.record.pinned
            if pinning, !pinned.contains(seq) {
                guard !message.isTombstone else { throw ChatError(.conflict, "the message was deleted") }
                guard pinned.count < ConversationRecord.pinnedMax else {
                    throw ChatError(.conflict, "\(pinned.count) messages are pinned, the most a conversation pins; unpin one first")
                }
            }
            _ = try await commit(pinning ? .pinned : .unpinned, of: seq, by: user)
            return try state.record.pinned
        }
    }

    /// `GET …/messages/{seq}/replies`: the replies to message `seq` after seq `after`.
    public distributed func replies(to seq: Int64, after: Int64, limit: Int, for user: UserID) async throws -> [Message] {
        let conversation = try state.id
        _ = try state.requireMember(user)
        _ = try await storedMessage(seq)
        let replies = try await services.withStore { try await $0.replies(in: conversation, to: seq, after: after, limit: limit) }
        return try await withReactions(of: replies, as: user)
    }

    /// `GET …/messages/{seq}/versions`: the texts the message has had, oldest first, the
    /// current one last; none for a tombstone.
    public distributed func versions(of seq: Int64, for user: UserID) async throws -> [MessageVersion] {
        let conversation = try state.id
        _ = try state.requireMember(user)
        let message = try await storedMessage(seq)
        guard !message.isTombstone else { return [] }
        let earlier = try await services.withStore { try await $0.messageVersions(in: conversation, seq: seq) }
        return earlier + [MessageVersion(text: message.text, at: message.editedAt ?? message.sentAt)]
    }

    /// The reactions of `messages` (as the store has them) with `me` set for `user`.
    func withReactions(of messages: [Message], as user: UserID) async throws -> [Message] {
        let conversation = try state.id
        let reacted = messages.filter { $0.reactions != nil }
        guard let first = reacted.first?.seq, let last = reacted.last?.seq else { return messages }
        let held = Set(try await services.withStore { try await $0.reactions(of: user, in: conversation, seqs: first...last) })
        return messages.map { HeldReaction.marking($0, held: held) }
    }

    private func reactions(of message: Message, as user: UserID) async throws -> [Reaction] {
        try await withReactions(of: [message], as: user).first?.reactions ?? []
    }

    /// Message `seq` as the store has it, or `not_found`. The store is asked whatever this owner's
    /// last seq: an owner another node has taken the conversation from lags behind it (until it is
    /// told), and must not refuse a message it never saw; its write is refused, retryably.
    func storedMessage(_ seq: Int64) async throws -> Message {
        let conversation = try state.id
        guard seq >= 1,
              let message = try await services.withStore({ try await $0.messages(in: conversation, after: seq - 1, limit: 1) }).first,
              message.seq == seq
        else { throw ChatError(.notFound, "no message \(seq) in this conversation") }
        return message
    }

    /// Commits the conversation's next change; nil when it changes nothing (the store's word).
    /// Once committed, streams hear of it after the message it follows, and webhooks in order.
    private func commit(
        _ kind: MessageChange.Kind, of seq: Int64, by user: UserID, text: String? = nil, emoji: String? = nil, clientChangeId: String? = nil
    ) async throws -> (change: MessageChange, message: Message)? {
        let record = try state.record
        let change = MessageChange(
            conversationId: record.id, changeSeq: record.lastChangeSeq + 1, afterSeq: record.lastSeq, seq: seq, kind: kind, userId: user,
            at: actorSystem.clock.wallNow, text: text, emoji: emoji, clientChangeId: clientChangeId)
        var committed: (change: MessageChange, message: Message)?
        try await fencedWrite { committed = try await $0.commitChange(change, epoch: epoch) }
        guard let committed else { return nil }
        try update { $0.changed(committed.change) }
        if let webhooks, let record = loaded?.record { webhooks.record(.changed(committed.change), record: record) }
        fanOut?.publish(committed.change, members: memberIDs)
        return committed
    }

    /// Runs `body` once no other change is being committed: changes take their numbers one by one.
    func oneChangeAtATime<T>(_ body: () async throws -> T) async throws -> T {
        while changing { await withCheckedContinuation { changeWaiters.append($0) } }
        changing = true
        defer {
            changing = false
            if !changeWaiters.isEmpty { changeWaiters.removeFirst().resume() }
        }
        return try await body()
    }
}
