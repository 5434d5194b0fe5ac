import PostgresNIO

/// The statements of a group commit, prepared once per connection: the server parses and plans
/// them once rather than for every batch (parse and plan were over a quarter of a commit's server
/// time when they went as one-off queries).
enum CommitStatements {
    /// Locks the batch's conversations in id order and reads their heads.
    struct LockHeads: PostgresPreparedStatement {
        static let name = "parley_commit_lock_heads"
        static let sql = "SELECT id, epoch, last_seq, last_activity_at FROM conversations WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE"
        typealias Row = (String, Int64, Int64, Int64)

        var ids: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(ids)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// The messages these (conversation, clientMessageId) pairs made before.
    struct ExistingMessages: PostgresPreparedStatement {
        static let name = "parley_commit_existing"
        static let sql = """
            SELECT m.conversation_id, m.seq, m.sender_id, m.client_message_id, m.text, m.sent_at
            FROM messages m JOIN UNNEST($1::text[], $2::text[]) AS k(c, cm)
              ON m.conversation_id = k.c AND m.client_message_id = k.cm
            """
        typealias Row = (String, Int64, String, String, String, Int64)

        var conversations: [String]
        var clientMessageIds: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 2)
            bindings.append(conversations)
            bindings.append(clientMessageIds)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// The new messages, the conversations' new heads and the senders' own watermarks, in one
    /// statement (data-modifying WITH clauses always run to completion).
    struct WriteBatch: PostgresPreparedStatement {
        static let name = "parley_commit_write"
        static let sql = """
            WITH inserted AS (
                INSERT INTO messages (conversation_id, seq, sender_id, client_message_id, text, sent_at)
                SELECT * FROM UNNEST($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[], $6::int8[])
            ), heads AS (
                UPDATE conversations c SET last_seq = u.last_seq, last_activity_at = u.last_activity
                FROM UNNEST($7::text[], $8::int8[], $9::int8[]) AS u(id, last_seq, last_activity)
                WHERE c.id = u.id
            )
            UPDATE members m SET delivered_seq = GREATEST(m.delivered_seq, u.seq), read_seq = GREATEST(m.read_seq, u.seq)
            FROM UNNEST($10::text[], $11::text[], $12::int8[]) AS u(conversation_id, user_id, seq)
            WHERE m.conversation_id = u.conversation_id AND m.user_id = u.user_id
            """
        typealias Row = ()

        struct Head {
            var conversation: String
            var lastSeq: Int64
            var lastActivity: Int64
        }

        struct Watermark {
            var conversation: String
            var user: String
            var seq: Int64
        }

        var messages: [(conversation: String, seq: Int64, sender: String, clientMessageId: String, text: String, sentAt: Int64)]
        var heads: [Head]
        var watermarks: [Watermark]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 12)
            bindings.append(messages.map(\.conversation))
            bindings.append(messages.map(\.seq))
            bindings.append(messages.map(\.sender))
            bindings.append(messages.map(\.clientMessageId))
            bindings.append(messages.map(\.text))
            bindings.append(messages.map(\.sentAt))
            bindings.append(heads.map(\.conversation))
            bindings.append(heads.map(\.lastSeq))
            bindings.append(heads.map(\.lastActivity))
            bindings.append(watermarks.map(\.conversation))
            bindings.append(watermarks.map(\.user))
            bindings.append(watermarks.map(\.seq))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {}
    }
}
