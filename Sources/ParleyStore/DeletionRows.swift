import Foundation
import ParleyModel

/// Account deletions as the SQL stores keep them (columns of the user's row), and erased
/// messages (a column of the message, and a row each in `erasures` for resuming streams).
public enum DeletionRows {
    /// The migration that adds them, the same in SQLite and PostgreSQL but for the message
    /// table's column (`messagesTable`: each store's name for it).
    public static func migration(messagesTable: String) -> [String] { [
        "ALTER TABLE \(messagesTable) ADD COLUMN erased_at BIGINT",
        """
        CREATE TABLE erasures (
            conversation_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            sender_id TEXT NOT NULL,
            client_message_id TEXT NOT NULL,
            sent_at BIGINT NOT NULL,
            erased_at BIGINT NOT NULL,
            PRIMARY KEY (conversation_id, seq)
        )
        """,
        "CREATE INDEX erasures_by_time ON erasures(conversation_id, erased_at)",
        "CREATE INDEX erasures_recent ON erasures(erased_at)",
        // A new owner reads who left lately (``ChatStore/recentChanges(in:since:)``).
        "CREATE INDEX removals_by_conversation ON removals(conversation_id, removed_at)",
        "ALTER TABLE users ADD COLUMN deleted_at BIGINT",
        "ALTER TABLE users ADD COLUMN deletion_erase BOOLEAN NOT NULL DEFAULT FALSE",
        "ALTER TABLE users ADD COLUMN deletion_finished_at BIGINT",
        "ALTER TABLE users ADD COLUMN deletion_webhooks_owed BOOLEAN NOT NULL DEFAULT FALSE",
        "CREATE INDEX users_deletions_unfinished ON users(deleted_at) WHERE deleted_at IS NOT NULL AND deletion_finished_at IS NULL",
        "CREATE INDEX users_deletions_owing_webhooks ON users(deletion_finished_at) WHERE deletion_webhooks_owed",
    ] }

    /// An `erasures` row as the erasure it records.
    public static func erasure(conversation: String, seq: Int64, sender: String, clientMessageId: String, sentAt: Int64, erasedAt: Int64) -> Erasure {
        Erasure(
            message: Message(
                conversationId: ConversationID(rawValue: conversation), seq: seq, senderId: UserID(rawValue: sender), clientMessageId: clientMessageId,
                text: "", sentAt: Date(millisecondsSince1970: sentAt)),
            at: Date(millisecondsSince1970: erasedAt))
    }

    /// The handle a deleted account keeps once its own is taken back: no registration can ask
    /// for it (`~` is not a handle's character), and it is unique.
    public static func reclaimedHandle(of user: UserID) -> String {
        "~" + user.rawValue
    }

    /// The deletion a user's row describes, nil if none was asked for.
    public static func deletion(of user: String, deletedAt: Int64?, erase: Bool, finishedAt: Int64?) -> AccountDeletion? {
        deletedAt.map {
            AccountDeletion(
                userId: UserID(rawValue: user), requestedAt: Date(millisecondsSince1970: $0), erase: erase,
                finishedAt: finishedAt.map(Date.init(millisecondsSince1970:)))
        }
    }
}
