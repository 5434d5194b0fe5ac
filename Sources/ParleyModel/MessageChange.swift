import Foundation

/// A change to a committed message: an edit, a deletion for everyone, a reaction added or
/// taken back, a pin. Each is a step of its conversation's one order (API.md, "Changing messages").
///
/// Changes are numbered per conversation (``changeSeq``: 1, 2, 3, … with no gaps), by the
/// conversation's owner in the transaction that commits them, so a stream, a resume and a
/// webhook endpoint can each tell a change they have from one they lack, and put them in order.
/// ``afterSeq`` places the change among the messages: after message `afterSeq` (the last one
/// committed when it was), before the next.
public struct MessageChange: Hashable, Sendable, Codable {
    public enum Kind: String, Hashable, Sendable, Codable, CaseIterable {
        case edited
        case deleted
        case reactionAdded = "reaction_added"
        case reactionRemoved = "reaction_removed"
        case pinned
        case unpinned

        /// Its event's name on the event stream: `message_edited`, `message_deleted`,
        /// `reaction_added`, `reaction_removed`, `message_pinned`, `message_unpinned`.
        public var eventName: String {
            switch self {
            case .edited, .deleted, .pinned, .unpinned: "message_" + rawValue
            case .reactionAdded, .reactionRemoved: rawValue
            }
        }

        /// The kind whose event is named `eventName`; nil for another event.
        public init?(eventName: String) {
            guard let kind = Self.allCases.first(where: { $0.eventName == eventName }) else { return nil }
            self = kind
        }
    }

    public var conversationId: ConversationID
    public var changeSeq: Int64
    public var afterSeq: Int64
    /// The message changed.
    public var seq: Int64
    public var kind: Kind
    /// Who changed it.
    public var userId: UserID
    /// When it was committed, millisecond precision.
    public var at: Date
    /// An edit's new text.
    public var text: String?
    /// A reaction's emoji, and how many members hold it on the message after the change.
    public var emoji: String?
    public var count: Int?
    /// The edit's idempotency key (the client's UUID); kept in the store, not shown.
    public var clientChangeId: String?

    /// The client change ID stays with the store and the owner: clients and webhooks never see it.
    private enum CodingKeys: String, CodingKey {
        case conversationId, changeSeq, afterSeq, seq, kind, userId, at, text, emoji, count
    }

    public init(
        conversationId: ConversationID, changeSeq: Int64, afterSeq: Int64, seq: Int64, kind: Kind, userId: UserID, at: Date,
        text: String? = nil, emoji: String? = nil, count: Int? = nil, clientChangeId: String? = nil
    ) {
        self.conversationId = conversationId
        self.changeSeq = changeSeq
        self.afterSeq = afterSeq
        self.seq = seq
        self.kind = kind
        self.userId = userId
        self.at = at.millisecondPrecision
        self.text = text
        self.emoji = emoji
        self.count = count
        self.clientChangeId = clientChangeId
    }

    /// `message` as this change leaves it (the message as it was before), as `viewer` sees it: a
    /// reaction of the viewer's own sets `me`. A reply to the changed message gets its quote
    /// brought up to date; other messages stay as they are.
    public func applied(to message: Message, as viewer: UserID? = nil) -> Message {
        var message = message
        guard message.seq == seq else {
            if let quote = message.replyTo, quote.seq == seq { message.replyTo = quote.applying(self) }
            return message
        }
        switch kind {
        case .edited:
            guard message.deleted != true else { return message }
            message.text = text ?? message.text
            message.editedAt = at
        case .deleted:
            message = message.deletedTombstone(by: userId)
        case .reactionAdded, .reactionRemoved:
            guard let emoji, let count, message.deleted != true else { return message }
            var reactions = message.reactions ?? []
            let me = viewer == userId ? kind == .reactionAdded : reactions.first { $0.emoji == emoji }?.me ?? false
            reactions.removeAll { $0.emoji == emoji }
            if count > 0 { reactions.append(Reaction(emoji: emoji, count: count, me: me)) }
            message.reactions = Reaction.ordered(reactions)
        case .pinned, .unpinned:
            break
        }
        return message
    }

    /// A conversation's pinned seqs (``ConversationRecord/pinned``, the most recently pinned
    /// first) as this change leaves them: a deletion unpins too; a message pinned already stays
    /// where it is.
    public func applied(toPinned pinned: [Int64]) -> [Int64] {
        switch kind {
        case .pinned: pinned.contains(seq) ? pinned : [seq] + pinned
        case .unpinned, .deleted: pinned.filter { $0 != seq }
        case .edited, .reactionAdded, .reactionRemoved: pinned
        }
    }
}

/// An emoji some members hold on a message: how many, and whether the one it is shown to does.
public struct Reaction: Hashable, Sendable, Codable {
    public var emoji: String
    public var count: Int
    public var me: Bool

    public init(emoji: String, count: Int, me: Bool = false) {
        self.emoji = emoji
        self.count = count
        self.me = me
    }

    /// The most held first; ties in the emoji's byte order, so every reader sees one order.
    public static func ordered(_ reactions: [Reaction]) -> [Reaction]? {
        let sorted = reactions.filter { $0.count > 0 }.sorted {
            $0.count != $1.count ? $0.count > $1.count : Array($0.emoji.utf8).lexicographicallyPrecedes(Array($1.emoji.utf8))
        }
        return sorted.isEmpty ? nil : sorted
    }

    /// The most UTF-8 bytes an emoji may take: a family with skin tones (👩🏽‍❤️‍💋‍👨🏿) is 35
    /// bytes, but every emoji of the keyboards' pickers is at most 28.
    public static let emojiBytesMax = 32

    /// Whether `text` is one emoji: one grapheme cluster of at most ``emojiBytesMax`` bytes that
    /// is shown as an emoji — a character of emoji presentation (👍), or one made an emoji by
    /// the variation selector U+FE0F (❤️). Letters, digits and `#` are not, though `1️⃣` is.
    public static func isEmoji(_ text: String) -> Bool {
        guard text.utf8.count <= emojiBytesMax, text.count == 1, let character = text.first else { return false }
        let scalars = character.unicodeScalars
        if scalars.contains(where: { $0.properties.isEmojiPresentation }) { return true }
        return scalars.contains { $0.value == 0xFE0F } && scalars.contains { $0.properties.isEmoji }
    }
}

/// One of the texts a message has had (`GET …/messages/{seq}/versions`): what it said, and
/// since when.
public struct MessageVersion: Hashable, Sendable, Codable {
    public var text: String
    public var at: Date

    public init(text: String, at: Date) {
        self.text = text
        self.at = at.millisecondPrecision
    }
}
