import Foundation
import ParleyModel

/// Replies, mentions and pins as the SQL stores keep them: a reply's row holds the seq it replies
/// to (`reply_to`) and its quote as it is now (`reply_quote`, JSON, rewritten when the original
/// changes); a message's row its mentions (`mentions`, a JSON array) and `mentions` one row per
/// member mentioned, to list a user's mentions across conversations; a conversation's row its
/// pinned seqs (`pinned`, a JSON array, the most recently pinned first).
public enum ThreadRows {
    /// The migration that adds them, the same in SQLite and PostgreSQL but for the message
    /// table's name (`messagesTable`).
    public static func migration(messagesTable: String) -> [String] { [
        "ALTER TABLE \(messagesTable) ADD COLUMN reply_to BIGINT",
        "ALTER TABLE \(messagesTable) ADD COLUMN reply_quote TEXT",
        "ALTER TABLE \(messagesTable) ADD COLUMN mentions TEXT",
        // A message's replies, and the rows whose quote an edit rewrites: only replies are in it.
        "CREATE INDEX \(messagesTable)_replies ON \(messagesTable)(conversation_id, reply_to, seq) WHERE reply_to IS NOT NULL",
        "ALTER TABLE conversations ADD COLUMN pinned TEXT",
        """
        CREATE TABLE mentions (
            user_id TEXT NOT NULL,
            sent_at BIGINT NOT NULL,
            conversation_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            client_message_id TEXT NOT NULL,
            PRIMARY KEY (user_id, sent_at, seq, conversation_id)
        )
        """,
    ] }

    /// What a tombstone's row holds of a message's text and what it carried: nothing. The
    /// assignments of an `UPDATE` that makes one, beside `erased_at` (and `deleted_by`).
    public static let tombstoneAssignments =
        "text = '', attachments = NULL, reactions = NULL, edited_at = NULL, reply_to = NULL, reply_quote = NULL, mentions = NULL, metadata = NULL"

    public static func encode<Value: Encodable>(_ value: Value?) -> String? {
        guard let value, let data = try? JSONEncoder().encode(value) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// The `mentions` column: nil for none.
    public static func mentionsColumn(_ mentions: [UserID]?) -> String? {
        guard let mentions, !mentions.isEmpty else { return nil }
        return encode(mentions.map(\.rawValue))
    }

    /// The `pinned` column: nil for none.
    public static func pinnedColumn(_ pinned: [Int64]) -> String? {
        pinned.isEmpty ? nil : encode(pinned)
    }

    public static func pinned(_ column: String?) throws -> [Int64] {
        guard let column, !column.isEmpty else { return [] }
        return try decode([Int64].self, column, "a conversation's pinned messages")
    }

    /// What a message's row says of what it replies to and whom it mentions, applied to the
    /// message read from it.
    public static func apply(replyQuote: String?, mentions: String?, to message: inout Message) throws {
        if let replyQuote, !replyQuote.isEmpty {
            message.replyTo = try decode(MessageQuote.self, replyQuote, "a reply's quote")
        }
        if let mentions, !mentions.isEmpty {
            message.mentions = try decode([String].self, mentions, "a message's mentions").map(UserID.init(rawValue:))
        }
    }

    private static func decode<Value: Decodable>(_ type: Value.Type, _ column: String, _ what: String) throws -> Value {
        do {
            return try JSONDecoder().decode(type, from: Data(column.utf8))
        } catch {
            throw ChatStoreError(.unavailable, "\(what) is not readable: \(error)")
        }
    }

    /// The `before` of ``ChatStore/mentions(of:before:limit:)``'s next page, as `GET /v1/mentions`
    /// serves it: `sentAt milliseconds.seq.conversationId` (an ID may hold dots, a number not).
    public static func mentionCursor(after message: Message) -> String {
        "\(message.sentAt.millisecondsSince1970).\(message.seq).\(message.conversationId.rawValue)"
    }

    public static func mentionPosition(_ cursor: String) -> MentionPosition? {
        let parts = cursor.split(separator: ".", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, let sentAt = Int64(parts[0]), let seq = Int64(parts[1]), !parts[2].isEmpty else { return nil }
        return MentionPosition(sentAt: sentAt, seq: seq, conversationId: ConversationID(rawValue: String(parts[2])))
    }
}

/// Where a page of a user's mentions starts: before this message (newest first).
public struct MentionPosition: Hashable, Sendable {
    /// Milliseconds since 1970.
    public var sentAt: Int64
    public var seq: Int64
    public var conversationId: ConversationID

    public init(sentAt: Int64, seq: Int64, conversationId: ConversationID) {
        self.sentAt = sentAt
        self.seq = seq
        self.conversationId = conversationId
    }
}
