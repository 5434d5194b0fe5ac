import Foundation

/// One message of a conversation, as API.md serves it.
public struct Message: Hashable, Sendable, Codable {
    /// `conversationId:seq`, unique across the cluster.
    public var id: String
    public var conversationId: ConversationID
    /// Position in the conversation: 1, 2, 3, … with no gaps.
    public var seq: Int64
    public var senderId: UserID
    /// The sender's idempotency key: a UUID, lowercase.
    public var clientMessageId: String
    /// Exactly as sent: no trimming, no normalization.
    public var text: String
    /// The server's time of the commit, millisecond precision.
    public var sentAt: Date
    /// What bots added to it (a translation, a summary), by key; nil when nothing. Served with
    /// history; the event stream tells of each as a `message_annotated` event.
    public var annotations: [String: String]?
    /// The files it carries (``Attachment``), nil when none: a message may be only these.
    public var attachments: [Attachment]?
    /// True for a message erased (its sender's account deleted with `erase=true`, or an operator's
    /// removal): its seq, sender and time stay, its text is empty and it carries nothing.
    /// Absent otherwise.
    public var erased: Bool?
    /// When its text was last edited (``MessageChange/Kind/edited``); nil if never.
    public var editedAt: Date?
    /// True for a message deleted for everyone, or erased: a tombstone (``tombstone``). Absent
    /// otherwise.
    public var deleted: Bool?
    /// Who deleted it for everyone; nil for an erasure.
    public var deletedBy: UserID?
    /// Its reactions, the most held first (``Reaction/ordered(_:)``); nil when none. As the
    /// store keeps them, `me` is false: history sets it for its reader.
    public var reactions: [Reaction]?
    /// The message this one replies to, quoted as it is now (``MessageQuote``); nil for a message
    /// that replies to none.
    public var replyTo: MessageQuote?
    /// The members it mentions, in the sender's order without repeats; nil when none.
    public var mentions: [UserID]?
    /// The app's own fields, set at send and never changed (a voice note's duration); nil when none.
    public var metadata: Metadata?

    public init(
        conversationId: ConversationID, seq: Int64, senderId: UserID, clientMessageId: String, text: String, sentAt: Date, attachments: [Attachment]? = nil
    ) {
        self.id = "\(conversationId.rawValue):\(seq)"
        self.conversationId = conversationId
        self.seq = seq
        self.senderId = senderId
        self.clientMessageId = clientMessageId
        self.text = text
        self.sentAt = sentAt
        self.attachments = attachments
    }
}

extension Message {
    /// What this message is once erased: the same seq, sender and time, nothing else (no quote,
    /// no mentions).
    public var tombstone: Message {
        var tombstone = Message(conversationId: conversationId, seq: seq, senderId: senderId, clientMessageId: clientMessageId, text: "", sentAt: sentAt)
        tombstone.erased = true
        tombstone.deleted = true
        return tombstone
    }

    /// What this message is once `user` deleted it for everyone: the same tombstone as an
    /// erasure's, saying who.
    public func deletedTombstone(by user: UserID) -> Message {
        var tombstone = self.tombstone
        tombstone.erased = nil
        tombstone.deletedBy = user
        return tombstone
    }

    /// Whether it is a tombstone: erased, or deleted for everyone.
    public var isTombstone: Bool { erased == true || deleted == true }
}

/// A message erased at `at`: the tombstone it left (``Message/tombstone``).
public struct Erasure: Hashable, Sendable, Codable {
    public var message: Message
    /// When it was erased, millisecond precision.
    public var at: Date

    public init(message: Message, at: Date) {
        self.message = message.erased == true ? message : message.tombstone
        self.at = at.millisecondPrecision
    }
}

/// A bot's note on a message: `key` (`translation.es`) and its `value`, replaced by the next one
/// of the same key.
public struct Annotation: Hashable, Sendable, Codable {
    public var conversationId: ConversationID
    public var seq: Int64
    public var key: String
    public var value: String
    public var authorId: UserID
    /// When it was stored, millisecond precision.
    public var at: Date

    public init(conversationId: ConversationID, seq: Int64, key: String, value: String, authorId: UserID, at: Date) {
        self.conversationId = conversationId
        self.seq = seq
        self.key = key
        self.value = value
        self.authorId = authorId
        self.at = at.millisecondPrecision
    }

    /// 1–64 characters of `a-z 0-9 . _ -`, starting with a letter or digit.
    public static func isValidKey(_ key: String) -> Bool {
        guard let first = key.utf8.first, (1...64).contains(key.utf8.count) else { return false }
        func allowed(_ byte: UInt8) -> Bool { (0x61...0x7A).contains(byte) || (0x30...0x39).contains(byte) }
        return allowed(first) && key.utf8.allSatisfy { allowed($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }
    }
}

extension Date {
    /// This instant truncated to whole milliseconds, as every store keeps it.
    public var millisecondPrecision: Date {
        Date(timeIntervalSince1970: (timeIntervalSince1970 * 1000).rounded(.down) / 1000)
    }

    /// Whole milliseconds since 1970, saturating: a date too far from 1970 for an `Int64` of
    /// milliseconds (only a client's input can be) reads as the nearest one that fits, never a trap.
    public var millisecondsSince1970: Int64 {
        let product = (timeIntervalSince1970 * 1000).rounded(.down)
        guard product > -9.2e18, product < 9.2e18 else { return product.isNaN ? 0 : product < 0 ? -9_200_000_000_000_000_000 : 9_200_000_000_000_000_000 }
        let estimate = Int64(product)
        // The product can fall just below a whole millisecond the date is exactly at (seen for
        // 0.7 % of the milliseconds up to year 9999, none of 2023–2030's): read such a date as it.
        return Date(millisecondsSince1970: estimate + 1) <= self ? estimate + 1 : estimate
    }

    public init(millisecondsSince1970: Int64) {
        self.init(timeIntervalSince1970: Double(millisecondsSince1970) / 1000)
    }
}

/// What a reply shows of the message it replies to: its sender, its text's first characters
/// and whether it carries files. Taken when the reply is sent and kept current: an edit of the
/// original changes the text, its deletion empties it (``applying(_:)``).
public struct MessageQuote: Hashable, Sendable, Codable {
    public var seq: Int64
    public var senderId: UserID
    /// The first ``textCharactersMax`` characters of the original's text.
    public var text: String
    public var attachments: Bool
    /// True once the original was deleted or erased; absent otherwise.
    public var deleted: Bool?

    /// Characters (grapheme clusters, as a person counts them) a quote keeps.
    public static let textCharactersMax = 100

    public init(seq: Int64, senderId: UserID, text: String, attachments: Bool, deleted: Bool? = nil) {
        self.seq = seq
        self.senderId = senderId
        self.text = text
        self.attachments = attachments
        self.deleted = deleted
    }

    /// The quote of `message` as it is.
    public init(of message: Message) {
        // A tombstone's text is empty and it carries nothing (``Message/tombstone``).
        self.init(
            seq: message.seq, senderId: message.senderId, text: String(message.text.prefix(Self.textCharactersMax)),
            attachments: !(message.attachments ?? []).isEmpty, deleted: message.isTombstone ? true : nil)
    }

    /// The quote once `change` to the quoted message is applied (`change.seq == seq`).
    public func applying(_ change: MessageChange) -> MessageQuote {
        var quote = self
        switch change.kind {
        case .edited where deleted != true:
            quote.text = String((change.text ?? text).prefix(Self.textCharactersMax))
        case .deleted:
            quote = erased
        default:
            break
        }
        return quote
    }

    /// The quote of a message that was erased.
    public var erased: MessageQuote {
        MessageQuote(seq: seq, senderId: senderId, text: "", attachments: false, deleted: true)
    }
}
