import Foundation
import ParleyModel

/// Changes to messages as the SQL stores keep them: the state they leave in the message's row
/// (`edited_at`, `deleted_by`, `reactions`), the log of changes each conversation numbers
/// (`message_changes`), who holds which reaction (`reactions`) and the texts an edit replaced
/// (`message_versions`).
public enum ChangeRows {
    /// The migration that adds them, the same in SQLite and PostgreSQL but for the message
    /// table's name (`messagesTable`).
    public static func migration(messagesTable: String) -> [String] { [
        "ALTER TABLE conversations ADD COLUMN last_change_seq BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE \(messagesTable) ADD COLUMN edited_at BIGINT",
        "ALTER TABLE \(messagesTable) ADD COLUMN deleted_by TEXT",
        // `[{"emoji", "count"}]`, the most held first: history reads it with the message.
        "ALTER TABLE \(messagesTable) ADD COLUMN reactions TEXT",
        // A badge counts what is unread and not a tombstone: the few tombstones past a member's
        // read seq are found without reading the messages.
        "CREATE INDEX \(messagesTable)_tombstones ON \(messagesTable)(conversation_id, seq) WHERE erased_at IS NOT NULL",
        """
        CREATE TABLE message_changes (
            conversation_id TEXT NOT NULL,
            change_seq BIGINT NOT NULL,
            after_seq BIGINT NOT NULL,
            seq BIGINT NOT NULL,
            kind TEXT NOT NULL,
            user_id TEXT NOT NULL,
            at BIGINT NOT NULL,
            text TEXT,
            emoji TEXT,
            reaction_count INTEGER,
            client_change_id TEXT,
            PRIMARY KEY (conversation_id, change_seq)
        )
        """,
        "CREATE UNIQUE INDEX message_changes_by_client_change_id ON message_changes(conversation_id, client_change_id) WHERE client_change_id IS NOT NULL",
        "CREATE INDEX message_changes_by_time ON message_changes(conversation_id, at)",
        "CREATE INDEX message_changes_recent ON message_changes(at)",
        """
        CREATE TABLE reactions (
            conversation_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            emoji TEXT NOT NULL,
            user_id TEXT NOT NULL,
            at BIGINT NOT NULL,
            PRIMARY KEY (conversation_id, seq, emoji, user_id)
        )
        """,
        "CREATE INDEX reactions_by_user ON reactions(user_id, conversation_id, seq)",
        """
        CREATE TABLE message_versions (
            conversation_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            version INTEGER NOT NULL,
            text TEXT NOT NULL,
            at BIGINT NOT NULL,
            PRIMARY KEY (conversation_id, seq, version)
        )
        """,
    ] }

    /// The columns ``change(conversation:changeSeq:afterSeq:seq:kind:user:at:text:emoji:count:clientChangeId:)``
    /// reads, in its order; each after `table.` when a query joins another table.
    public static func changeColumns(of table: String? = nil) -> String {
        ["conversation_id", "change_seq", "after_seq", "seq", "kind", "user_id", "at", "text", "emoji", "reaction_count", "client_change_id"]
            .map { column in (table.map { "\($0)." } ?? "") + column }.joined(separator: ", ")
    }

    /// A `message_changes` row as its change; nil for a kind this version does not know (a
    /// newer node's, during an upgrade), which readers skip.
    public static func change(
        conversation: String, changeSeq: Int64, afterSeq: Int64, seq: Int64, kind: String, user: String, at: Int64,
        text: String?, emoji: String?, count: Int64?, clientChangeId: String?
    ) -> MessageChange? {
        guard let kind = MessageChange.Kind(rawValue: kind) else { return nil }
        return MessageChange(
            conversationId: ConversationID(rawValue: conversation), changeSeq: changeSeq, afterSeq: afterSeq, seq: seq, kind: kind,
            userId: UserID(rawValue: user), at: Date(millisecondsSince1970: at), text: text, emoji: emoji, count: count.map { Int($0) },
            clientChangeId: clientChangeId)
    }

    /// What a message's row says of its changes, applied to the message read from it.
    public static func apply(editedAt: Int64?, deletedBy: String?, reactions: String?, to message: inout Message) throws {
        if let editedAt { message.editedAt = Date(millisecondsSince1970: editedAt) }
        if let deletedBy {
            // Deleted for everyone: the erasure's tombstone, saying who.
            message.erased = nil
            message.deleted = true
            message.deletedBy = UserID(rawValue: deletedBy)
        } else if message.erased == true {
            message.deleted = true
        }
        message.reactions = try decodeReactions(reactions)
    }

    private struct StoredReaction: Codable {
        var emoji: String
        var count: Int
    }

    /// The `reactions` column of `reactions`.
    public static func encodeReactions(_ reactions: [Reaction]?) -> String? {
        guard let reactions = Reaction.ordered(reactions ?? []),
              let data = try? JSONEncoder().encode(reactions.map { StoredReaction(emoji: $0.emoji, count: $0.count) })
        else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    public static func decodeReactions(_ column: String?) throws -> [Reaction]? {
        guard let column, !column.isEmpty else { return nil }
        do {
            return Reaction.ordered(try JSONDecoder().decode([StoredReaction].self, from: Data(column.utf8)).map { Reaction(emoji: $0.emoji, count: $0.count) })
        } catch {
            throw ChatStoreError(.unavailable, "a message's reactions are not readable: \(error)")
        }
    }
}
