import Foundation
import GRDB
import ParleyModel
import ParleyStore

/// How a conversation's messages are found in `message_log`, which holds every conversation's
/// messages in commit order, each linked to its conversation's previous message.
///
/// `message_blocks` has one entry per 64 messages of a conversation: block b (seqs 64b+1 … 64b+64)
/// points at its last message, and the commit that appends that message writes the entry in the
/// same transaction. So an append writes no page of its own conversation's but once in 64 (into
/// 1,000 conversations, an index entry per message dirtied a page per append; built behind the
/// commits by a pass every 500 ms instead, the passes were the open-loop tail), and nothing runs
/// behind the commits. A read starts at the block holding the newest seq it wants (or, above the
/// last full block, at the conversation's last message) and follows the links down: at most 63
/// messages more than it returns. A missing entry (none is, but a read does not depend on it)
/// only makes the walk start higher.
enum MessageBlocks {
    static let size: Int64 = 64

    /// The block entry a message with `seq` completes, if it is the last of its block.
    static func completedBlock(bySeq seq: Int64) -> Int64? {
        seq % size == 0 ? seq / size - 1 : nil
    }

    /// The conversation's messages with seqs in `lowest…highest`, newest first; `highest` no
    /// higher than its last seq, `lastMessage` the id of its last message.
    static func messages(
        in conversation: String, from highest: Int64, downTo lowest: Int64, lastMessage: Int64?, db: Database
    ) throws -> [Message] {
        guard highest >= lowest, highest >= 1 else { return [] }
        let block = try db.cachedStatement(sql: """
            SELECT message FROM message_blocks WHERE conversation_id = ? AND block >= ? ORDER BY block LIMIT 1
            """)
        block.bind(conversation, at: 1)
        block.bind((highest - 1) / size, at: 2)
        var next = try block.runForOneRow(in: db) { row in SQLiteColumn.int64(row, 0) } ?? lastMessage
        let byID = try db.cachedStatement(sql: """
            SELECT seq, previous, sender_id, client_message_id, text, sent_at, attachments, erased_at, edited_at, deleted_by, reactions, reply_quote, mentions,
                metadata
            FROM message_log WHERE id = ?
            """)
        let conversationID = ConversationID(rawValue: conversation)
        var messages: [Message] = []
        messages.reserveCapacity(Int(min(highest - lowest + 1, 1_000)))
        while let id = next {
            byID.bind(id, at: 1)
            let found = try byID.runForOneRow(in: db) {
                row -> (seq: Int64, previous: Int64?, message: Message?, attachments: String?, changed: ChangedColumns?, metadata: String?) in
                let seq = SQLiteColumn.int64(row, 0)
                // Above the range only the link is needed.
                guard seq <= highest else { return (seq, SQLiteColumn.optionalInt64(row, 1), nil, nil, nil, nil) }
                var message = Message(
                    conversationId: conversationID, seq: seq, senderId: UserID(rawValue: SQLiteColumn.string(row, 2)),
                    clientMessageId: SQLiteColumn.string(row, 3), text: SQLiteColumn.string(row, 4),
                    sentAt: Date(millisecondsSince1970: SQLiteColumn.int64(row, 5)))
                if SQLiteColumn.optionalInt64(row, 7) != nil { message.erased = true }
                let edited = SQLiteColumn.optionalInt64(row, 8), deletedBy = SQLiteColumn.optionalString(row, 9), reactions = SQLiteColumn.optionalString(row, 10)
                let quote = SQLiteColumn.optionalString(row, 11), mentions = SQLiteColumn.optionalString(row, 12)
                let changed = edited != nil || deletedBy != nil || reactions != nil || message.erased == true || quote != nil || mentions != nil
                    ? ChangedColumns(editedAt: edited, deletedBy: deletedBy, reactions: reactions, replyQuote: quote, mentions: mentions) : nil
                return (seq, SQLiteColumn.optionalInt64(row, 1), message, SQLiteColumn.optionalString(row, 6), changed, SQLiteColumn.optionalString(row, 13))
            }
            guard let found, found.seq >= lowest else { break }
            if var message = found.message {
                if let changed = found.changed {
                    try ChangeRows.apply(editedAt: changed.editedAt, deletedBy: changed.deletedBy, reactions: changed.reactions, to: &message)
                    try ThreadRows.apply(replyQuote: changed.replyQuote, mentions: changed.mentions, to: &message)
                }
                message.attachments = try MediaRows.attachments(found.attachments)
                message.metadata = try MetadataRows.metadata(found.metadata)
                messages.append(message)
            }
            next = found.previous
        }
        return messages
    }

    /// What a row says of its message's changes, quote and mentions, when it says anything (most
    /// say nothing).
    struct ChangedColumns {
        var editedAt: Int64?
        var deletedBy: String?
        var reactions: String?
        var replyQuote: String?
        var mentions: String?
    }
}
