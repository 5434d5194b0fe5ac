import PostgresNIO

/// A group commit as one round trip: ``Commit`` calls `parley_commit` (migration 5; since
/// migration 14 with the messages' attachments as one more array, since migration 21 with their
/// quotes and mentions as three more, since migration 24 with their apps' fields and since 25 with
/// what the search index keeps of them as one more each),
/// which takes the batch's conversation locks and then decides and writes every append in one
/// statement.
enum CommitStatements {
    /// What `parley_commit` answers for each append (the `outcome` column).
    enum Outcome: Int32 {
        case appended = 0
        case duplicate = 1
        case staleEpoch = 2
        case unknownConversation = 3
    }

    /// Migration 5: the commit on the server. Five round trips per batch (begin, lock the heads,
    /// look up earlier `clientMessageId`s, write, commit) became one, and its statements are
    /// planned once per connection: a generic plan, with sequential scans and hash joins ruled
    /// out so that a plan made while the tables are small (a fresh database) still looks every
    /// row up by its index once they are large. (The connection's `force_custom_plan` replanned
    /// every batch.) Measured, open loop at 10,000 appends/s, fresh PostgreSQL for each run,
    /// three alternating pairs: into 1,000 conversations p50 6.8–7.8 → 2.4–2.6 ms, p99 22–110 →
    /// 7–11 ms; into one p50 3.2–3.7 → 1.4–1.7 ms.
    ///
    /// Step 1 locks the batch's conversations in id order (no deadlocks between nodes); step 2 is
    /// a new statement, so under READ COMMITTED it sees every commit made before the locks were
    /// granted, as the five-step commit did. It decides each append in batch order, exactly as
    /// ``ChatStore/commit(_:)`` specifies: no conversation → 3; an epoch that is not the head's →
    /// 2 with the current epoch; a `clientMessageId` stored before, or earlier in the batch → 1
    /// with that message; otherwise 0, with the conversation's next seq. It writes the new
    /// messages, each conversation's new head (seq and activity of its last new message) and each
    /// sender's own watermarks (and, with `threads`, each new message's mentions, a row per member
    /// mentioned). One row per append comes back, in batch order (`ord`, from 1).
    ///
    /// Each migration that adds a version leaves the one before beside it: a release from before
    /// it still commits through that one after the migration is undone.
    enum Version: Int {
        /// Migration 14: attachments.
        case attachments = 1
        /// Migration 21: quotes and mentions (`threads`).
        case threads
        /// Migration 24: apps' fields.
        case metadata
        /// Migration 25: what the search index keeps of each message (``SearchText``).
        case search
    }

    static func function(_ version: Version) -> String {
        // The columns, arrays and values a version has from `since` on, each after a comma.
        func extra(_ text: String, since: Version = .threads) -> String { version.rawValue >= since.rawValue ? ", " + text : "" }
        let threads = version.rawValue >= Version.threads.rawValue
        return """
        CREATE OR REPLACE FUNCTION parley_commit(
            p_conversations TEXT[], p_epochs BIGINT[], p_senders TEXT[], p_client_ids TEXT[], p_texts TEXT[], p_sent_at BIGINT[],
            p_attachments TEXT[]\(extra("p_reply_to BIGINT[], p_reply_quotes TEXT[], p_mentions TEXT[]"))\(extra("p_metadata TEXT[]", since: .metadata))\(
                extra("p_search TEXT[]", since: .search)))
        RETURNS TABLE (o_ord BIGINT, o_outcome INT, o_seq BIGINT, o_sender TEXT, o_text TEXT, o_sent_at BIGINT, o_epoch BIGINT, o_attachments TEXT\(
            extra("o_reply_quote TEXT, o_mentions TEXT"))\(extra("o_metadata TEXT", since: .metadata)))
        LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_hashjoin = off AS $fn$
        BEGIN
            PERFORM 1 FROM conversations c WHERE c.id = ANY(p_conversations) ORDER BY c.id FOR UPDATE;
            RETURN QUERY
            WITH input AS (
                SELECT i.ord, i.conv, i.epoch, i.sender, i.cmid, i.body, i.sent, NULLIF(i.att, '') AS att\(
                    extra("NULLIF(i.rto, 0) AS rto, NULLIF(i.rq, '') AS rq, NULLIF(i.men, '') AS men"))\(extra("NULLIF(i.meta, '') AS meta", since: .metadata))\(
                    extra("i.srch", since: .search))
                FROM UNNEST(p_conversations, p_epochs, p_senders, p_client_ids, p_texts, p_sent_at, p_attachments\(
                    extra("p_reply_to, p_reply_quotes, p_mentions"))\(extra("p_metadata", since: .metadata))\(extra("p_search", since: .search)))
                    WITH ORDINALITY AS i(conv, epoch, sender, cmid, body, sent, att\(extra("rto, rq, men"))\(extra("meta", since: .metadata))\(
                        extra("srch", since: .search)), ord)
            ), decided AS (
                SELECT i.*, h.epoch AS head_epoch, h.last_seq,
                       e.seq AS e_seq, e.sender_id AS e_sender, e.text AS e_body, e.sent_at AS e_sent, e.attachments AS e_att\(
                           extra("e.reply_quote AS e_rq, e.mentions AS e_men"))\(extra("e.metadata AS e_meta", since: .metadata)),
                       min(i.ord) FILTER (WHERE h.epoch = i.epoch) OVER (PARTITION BY i.conv, i.cmid) AS first_ord
                FROM input i
                LEFT JOIN conversations h ON h.id = i.conv
                LEFT JOIN messages e ON e.conversation_id = i.conv AND e.client_message_id = i.cmid
            ), fresh AS (
                SELECT d.ord, d.conv, d.sender, d.cmid, d.body, d.sent, d.att\(extra("d.rto, d.rq, d.men"))\(extra("d.meta", since: .metadata))\(
                    extra("d.srch", since: .search)),
                       d.last_seq + row_number() OVER (PARTITION BY d.conv ORDER BY d.ord) AS seq
                FROM decided d
                WHERE d.head_epoch = d.epoch AND d.e_seq IS NULL AND d.ord = d.first_ord
            ), inserted AS (
                INSERT INTO messages (conversation_id, seq, sender_id, client_message_id, text, sent_at, attachments\(
                    extra("reply_to, reply_quote, mentions"))\(extra("metadata", since: .metadata))\(extra("search_text", since: .search)))
                SELECT f.conv, f.seq, f.sender, f.cmid, f.body, f.sent, f.att\(extra("f.rto, f.rq, f.men"))\(extra("f.meta", since: .metadata))\(
                    extra("f.srch", since: .search)) FROM fresh f
            ),\(threads ? """
             mentioned AS (
                INSERT INTO mentions (user_id, sent_at, seq, conversation_id, client_message_id)
                SELECT u.value, f.sent, f.seq, f.conv, f.cmid FROM fresh f CROSS JOIN LATERAL jsonb_array_elements_text(f.men::jsonb) AS u(value)
                WHERE f.men IS NOT NULL
                ON CONFLICT DO NOTHING
            ),
            """ : "") heads AS (
                UPDATE conversations c SET last_seq = last.seq, last_activity_at = last.sent
                FROM (SELECT DISTINCT ON (f.conv) f.conv, f.seq, f.sent FROM fresh f ORDER BY f.conv, f.seq DESC) last
                WHERE c.id = last.conv
            ), watermarks AS (
                UPDATE members m SET delivered_seq = GREATEST(m.delivered_seq, w.seq), read_seq = GREATEST(m.read_seq, w.seq)
                FROM (SELECT f.conv, f.sender, max(f.seq) AS seq FROM fresh f GROUP BY f.conv, f.sender) w
                WHERE m.conversation_id = w.conv AND m.user_id = w.sender
            )
            SELECT d.ord,
                   CASE WHEN d.head_epoch IS NULL THEN 3 WHEN d.head_epoch <> d.epoch THEN 2 WHEN own.ord IS NOT NULL THEN 0 ELSE 1 END,
                   COALESCE(own.seq, d.e_seq, earlier.seq, 0),
                   COALESCE(d.e_sender, earlier.sender, d.sender),
                   COALESCE(d.e_body, earlier.body, d.body),
                   COALESCE(d.e_sent, earlier.sent, d.sent),
                   COALESCE(d.head_epoch, 0),
                   CASE WHEN own.ord IS NOT NULL THEN d.att WHEN d.e_seq IS NOT NULL THEN d.e_att ELSE earlier.att END\(extra("""
                   CASE WHEN own.ord IS NOT NULL THEN d.rq WHEN d.e_seq IS NOT NULL THEN d.e_rq ELSE earlier.rq END,
                   CASE WHEN own.ord IS NOT NULL THEN d.men WHEN d.e_seq IS NOT NULL THEN d.e_men ELSE earlier.men END
            """))\(extra("""
                   CASE WHEN own.ord IS NOT NULL THEN d.meta WHEN d.e_seq IS NOT NULL THEN d.e_meta ELSE earlier.meta END
            """, since: .metadata))
            FROM decided d
            LEFT JOIN fresh own ON own.ord = d.ord
            LEFT JOIN fresh earlier ON earlier.ord = d.first_ord AND d.e_seq IS NULL
            ORDER BY d.ord;
        END
        $fn$
        """
    }

    /// One group commit: the appends as parallel arrays, in batch order.
    struct Commit: PostgresPreparedStatement {
        static let name = "parley_commit_call"
        static let sql = """
            SELECT o_ord, o_outcome, o_seq, o_sender, o_text, o_sent_at, o_epoch, o_attachments, o_reply_quote, o_mentions, o_metadata
            FROM parley_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
            """
        typealias Row = (Int64, Int32, Int64, String, String, Int64, Int64, String?, String?, String?, String?)

        var conversations: [String] = []
        var epochs: [Int64] = []
        var senders: [String] = []
        var clientMessageIds: [String] = []
        var texts: [String] = []
        var sentAt: [Int64] = []
        /// Each append's attachments as JSON; empty for none (an array of text holds no NULL here).
        var attachments: [String] = []
        /// The seq each append replies to; 0 for none.
        var replyTo: [Int64] = []
        /// Each append's quote and mentions as JSON; empty for none.
        var replyQuotes: [String] = []
        var mentions: [String] = []
        /// Each append's apps' fields as JSON; empty for none.
        var metadata: [String] = []
        /// What the search index keeps of each append (``SearchText/indexable(text:captions:)``).
        var search: [String] = []

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 12)
            bindings.append(conversations)
            bindings.append(epochs)
            bindings.append(senders)
            bindings.append(clientMessageIds)
            bindings.append(texts)
            bindings.append(sentAt)
            bindings.append(attachments)
            bindings.append(replyTo)
            bindings.append(replyQuotes)
            bindings.append(mentions)
            bindings.append(metadata)
            bindings.append(search)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }
}
