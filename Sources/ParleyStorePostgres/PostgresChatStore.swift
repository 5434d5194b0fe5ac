import Foundation
import Logging
import NIOSSL
import ParleyModel
import ParleyStore
import PostgresNIO

/// The store for nodes on several machines: PostgreSQL through a postgres-nio connection pool.
///
/// A commit takes each conversation's row lock (`SELECT … FOR UPDATE`) before it checks epochs
/// and assigns seqs, so writers on different nodes serialize per conversation, and a stale owner
/// fails under the same lock that the new owner's epoch was written under. A whole batch is one
/// round trip whatever its size: the appends go as arrays to the `parley_commit` function
/// (``CommitStatements``), one statement and so one transaction. Several commits run at once on
/// their own connections (``concurrentCommits``): their log flushes are shared.
public final class PostgresChatStore: ChatStore {
    /// The connections, replaced after the server was away (``PostgresPool``).
    let pool: PostgresPool
    /// The connection pool operations use now.
    public var client: PostgresClient { pool.client }
    public let concurrentCommits: Int
    private let logger: Logger
    private let description: String

    /// Connects to `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=MODE]`: `disable` (the
    /// default: a private network or loopback), `require` (TLS, the server's certificate not
    /// checked) or `verify-full` (TLS, the certificate checked against the system's roots or
    /// `sslrootcert=PATH`, and its name against the host). The pool runs until ``shutdown()``. Up to `concurrentCommits` of its
    /// `maxConnections` take group commits at once: two since a commit is one round trip (at
    /// 10,000 appends/s into 1,000 conversations, open loop, eight runs against six with four at
    /// once: p50 1.9–2.9 against 2.9–4.8 ms, p99 5.8–17.1 against 14.1–81.2 ms; one at once was
    /// slower again).
    public init(
        url: String, maxConnections: Int = 8, concurrentCommits: Int = 2, logger: Logger = Logger(label: "parley.store.postgres")
    ) throws {
        precondition(concurrentCommits >= 1 && concurrentCommits <= maxConnections, "concurrentCommits \(concurrentCommits) must be within 1…\(maxConnections)")
        guard let components = URLComponents(string: url), components.scheme == "postgres" || components.scheme == "postgresql",
            let host = components.host, let user = components.user, !components.path.dropFirst().isEmpty
        else {
            // Never the URL itself: it may hold the password.
            throw ChatStoreError(.unavailable, "the PostgreSQL URL is not postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=disable|require|verify-full]")
        }
        let tls = try Self.tls(components.queryItems ?? [])
        var configuration = PostgresClient.Configuration(
            host: host, port: components.port ?? 5432, username: user, password: components.password,
            database: String(components.path.dropFirst()), tls: tls.map { .require($0) } ?? .disable)
        let probe: PostgresConnection.Configuration
        do {
            probe = PostgresConnection.Configuration(
                host: host, port: components.port ?? 5432, username: user, password: components.password,
                database: String(components.path.dropFirst()), tls: try tls.map { .require(try NIOSSLContext(configuration: $0)) } ?? .disable)
        } catch {
            throw ChatStoreError(.unavailable, "the PostgreSQL TLS settings do not load: \(error)")
        }
        configuration.options.maximumConnections = maxConnections
        // Prepared statements are planned for their arguments every time, never with a generic
        // plan: one made while the tables were small (seq scans) stays cached on the connection as
        // the tables grow (measured: a fresh database's first 100,000 appends at 10,000/s had a p50
        // of 43–61 ms with generic plans, against 3–12 ms). The commit is the exception: its
        // function plans once, with seq scans ruled out (``CommitStatements/function(_:)``).
        // random_page_cost 1.1 (PostgreSQL's default 4 is for spinning disks): with 4, a commit's
        // update of ~20 conversation heads joined them by hashing a sequential scan of the whole
        // table (a plan costed at 108 against 160 for 20 index lookups); every batch scanned all
        // conversations.
        configuration.options.additionalStartupParameters = [("plan_cache_mode", "force_custom_plan"), ("random_page_cost", "1.1")]
        self.pool = PostgresPool(configuration: configuration, probe: probe, logger: logger)
        self.concurrentCommits = concurrentCommits
        self.logger = logger
        self.description = "postgres://\(user)@\(host):\(components.port ?? 5432)\(components.path)"
    }

    /// The connection's TLS from the URL's `sslmode` and `sslrootcert`; nil: none.
    static func tls(_ query: [URLQueryItem]) throws -> TLSConfiguration? {
        let known: Set<String> = ["sslmode", "sslrootcert"]
        if let unknown = query.first(where: { !known.contains($0.name) }) {
            throw ChatStoreError(.unavailable, "the PostgreSQL URL's parameter '\(unknown.name)' is not one Parley reads (sslmode, sslrootcert)")
        }
        let mode = query.last(where: { $0.name == "sslmode" })?.value ?? "disable"
        let rootCertificate = query.last(where: { $0.name == "sslrootcert" })?.value
        switch mode {
        case "disable":
            return nil
        case "require":
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.certificateVerification = .none
            return configuration
        case "verify-full":
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.certificateVerification = .fullVerification
            if let rootCertificate {
                configuration.trustRoots = .file(rootCertificate)
            }
            return configuration
        default:
            throw ChatStoreError(.unavailable, "sslmode '\(mode)' must be disable, require or verify-full")
        }
    }

    /// Closes the pool.
    public func shutdown() {
        pool.shutdown()
    }

    // MARK: Schema

    public static let migrations: [(version: Int, name: String, statements: [String])] = [
        (1, "conversations, members, messages", [
            """
            CREATE TABLE conversations (
                id TEXT PRIMARY KEY,
                kind TEXT NOT NULL,
                name TEXT,
                owner_id TEXT NOT NULL,
                last_seq BIGINT NOT NULL DEFAULT 0,
                epoch BIGINT NOT NULL DEFAULT 0,
                created_at BIGINT NOT NULL,
                last_activity_at BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE members (
                conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                user_id TEXT NOT NULL,
                role TEXT NOT NULL,
                delivered_seq BIGINT NOT NULL DEFAULT 0,
                read_seq BIGINT NOT NULL DEFAULT 0,
                position BIGINT NOT NULL,
                PRIMARY KEY (conversation_id, user_id)
            )
            """,
            "CREATE INDEX members_by_user ON members(user_id)",
            """
            CREATE TABLE messages (
                conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                seq BIGINT NOT NULL,
                sender_id TEXT NOT NULL,
                client_message_id TEXT NOT NULL,
                text TEXT NOT NULL,
                sent_at BIGINT NOT NULL,
                PRIMARY KEY (conversation_id, seq),
                UNIQUE (conversation_id, client_message_id)
            )
            """,
        ]),
        (2, "users, token revocations", [
            """
            CREATE TABLE users (
                id TEXT PRIMARY KEY,
                handle TEXT NOT NULL UNIQUE COLLATE "C",
                password_hash TEXT NOT NULL,
                display_name TEXT NOT NULL,
                avatar_url TEXT,
                created_at BIGINT NOT NULL
            )
            """,
            "CREATE TABLE token_revocations (token_id TEXT PRIMARY KEY, expires_at BIGINT NOT NULL)",
            "CREATE INDEX conversations_by_activity ON conversations(last_activity_at, id)",
        ]),
        (3, "change stamps for resuming event streams", [
            "ALTER TABLE conversations ADD COLUMN last_change TEXT NOT NULL DEFAULT 'created'",
            "ALTER TABLE conversations ADD COLUMN changed_at BIGINT NOT NULL DEFAULT 0",
            "UPDATE conversations SET changed_at = created_at",
            "ALTER TABLE members ADD COLUMN receipt_at BIGINT NOT NULL DEFAULT 0",
            """
            CREATE TABLE removals (
                user_id TEXT NOT NULL,
                removed_at BIGINT NOT NULL,
                conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                PRIMARY KEY (user_id, removed_at, conversation_id)
            )
            """,
        ]),
        // Every append updates its conversation's head; with last_activity_at indexed none of those
        // updates could be HOT (each wrote a new entry into both of the table's indexes), and no
        // query uses the index (a user's conversations are found through members_by_user and
        // sorted). Free space on each page lets the new row version stay on its page.
        (4, "conversation heads updated in place", [
            "DROP INDEX conversations_by_activity",
            "ALTER TABLE conversations SET (fillfactor = 50)",
        ]),
        (5, "the group commit as one server-side call", [CommitStatements.function(.attachments)]),
        (6, "devices for push notifications", DeviceRows.migration),
        (7, "members may mute a conversation", ["ALTER TABLE members ADD COLUMN muted BOOLEAN NOT NULL DEFAULT false"]),
        (8, "push notifications owed, for the owner after a failover", [
            "ALTER TABLE conversations ADD COLUMN pushes_owed_from BIGINT",
            "CREATE INDEX conversations_owing_pushes ON conversations(id) WHERE pushes_owed_from IS NOT NULL",
        ]),
        (9, "webhook endpoints and where each conversation's events to them have got to", [
            "CREATE TABLE webhook_endpoints (name TEXT PRIMARY KEY, first_seen_at BIGINT NOT NULL)",
            """
            CREATE TABLE webhook_cursors (
                conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                endpoint TEXT NOT NULL,
                state TEXT NOT NULL,
                pending BOOLEAN NOT NULL,
                PRIMARY KEY (conversation_id, endpoint)
            )
            """,
            "CREATE INDEX webhook_cursors_pending ON webhook_cursors(conversation_id) WHERE pending",
        ]),
        (10, "users may be bots", ["ALTER TABLE users ADD COLUMN bot BOOLEAN NOT NULL DEFAULT false"]),
        (11, "bots' annotations of messages", [
            """
            CREATE TABLE annotations (
                conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                seq BIGINT NOT NULL,
                key TEXT NOT NULL,
                value TEXT NOT NULL,
                author_id TEXT NOT NULL,
                annotated_at BIGINT NOT NULL,
                PRIMARY KEY (conversation_id, seq, key)
            )
            """,
            "CREATE INDEX annotations_by_time ON annotations(conversation_id, annotated_at)",
        ]),
        (12, "uploads' descriptions", MediaRows.migration),
        (13, "uploads' bytes, in chunks", [
            "CREATE TABLE media_blobs (sha256 TEXT PRIMARY KEY, size BIGINT NOT NULL, created_at BIGINT NOT NULL)",
            "CREATE TABLE media_chunks (blob TEXT NOT NULL, part INTEGER NOT NULL, data BYTEA NOT NULL, written_at BIGINT NOT NULL, PRIMARY KEY (blob, part))",
            // Photos and videos are compressed already: stored as they are, without trying again.
            "ALTER TABLE media_chunks ALTER COLUMN data SET STORAGE EXTERNAL",
        ]),
        (14, "messages' attachments, and which conversations may download an upload", [
            "ALTER TABLE messages ADD COLUMN attachments TEXT",
            // The commit before took no attachments; its replacement takes them as one more array.
            "DROP FUNCTION IF EXISTS parley_commit(TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[])",
            CommitStatements.function(.attachments),
        ] + MediaRows.referencesMigration),
        (15, "uploads never attached, for the sweeper; thumbnails", MediaRows.sweepMigration + [
            "CREATE TABLE media_thumbnails (sha256 TEXT NOT NULL, size INTEGER NOT NULL, data BYTEA NOT NULL, PRIMARY KEY (sha256, size))",
        ]),
        (16, "sessions, and when a password changed", SessionRows.migration),
        (17, "users' blocks", BlockRows.migration),
        (18, "reports, and suspended users", ReportRows.migration),
        (19, "account deletions, and erased messages", DeletionRows.migration(messagesTable: "messages")),
        (20, "changes to messages: edits, deletions for everyone, reactions", ChangeRows.migration(messagesTable: "messages")),
        (21, "replies, mentions and pins", ThreadRows.migration(messagesTable: "messages") + [CommitStatements.function(.threads)]),
        // The names already stored get their keys when it is applied (``migrate()``).
        (22, "display names found by prefix", UserNameRows.migration(keyType: "TEXT COLLATE \"C\"")),
        (23, "profile and group photos, and profile changes told to webhooks", PhotoRows.migration),
        (24, "apps' own fields on users, conversations, members and messages",
         MetadataRows.migration(messagesTable: "messages") + [CommitStatements.function(.metadata)]),
        // The messages stored before get theirs when it is applied (``migrate()``).
        (25, "messages found by their words", [
            "ALTER TABLE messages ADD COLUMN search_text TEXT",
            "CREATE INDEX messages_search ON messages USING GIN (to_tsvector('simple', search_text))",
            CommitStatements.function(.search),
        ]),
        // A search reads the searcher's conversations' words from an index alone, in key order:
        // over a million messages, a word in four of ten of them was found with a p99 of 28 ms
        // this way and of 199 ms through a GIN index, which knows no conversation and left 25,000
        // rows to read from the table (docs/BENCHMARKS.md). A B-tree entry holds at most 2,704 bytes, so the
        // words of a long text stay out of it: those messages are found through a second index
        // of their keys alone, reading their rows.
        (26, "the words of each conversation's messages read in order", [
            "ALTER TABLE messages ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (to_tsvector('simple', search_text)) STORED",
            "DROP INDEX messages_search",
            "CREATE INDEX messages_words ON messages (conversation_id, seq) INCLUDE (sent_at, search_vector) WHERE length(search_text) <= \(coveredSearchTextMax)",
            "CREATE INDEX messages_long_words ON messages (conversation_id, seq) INCLUDE (sent_at) WHERE length(search_text) > \(coveredSearchTextMax)",
        ]),
    ]

    /// The longest indexed text (in characters) whose words the search index holds: the words of
    /// 300 characters take at most 1,800 bytes (a character of an unspaced script and the space
    /// after it are a word of their own: 12 bytes), under a B-tree entry's 2,704 with the keys.
    static let coveredSearchTextMax = 300

    /// The migration whose column ``migrate()`` fills from the messages stored.
    private static let searchMigration = 25

    /// The migration whose table ``nameUser(_:_:connection:)`` fills from the names stored.
    private static let nameKeysMigration = 22

    /// ``migrate()``, tried again while the server is away — a node started during a failover, or
    /// before its database — for up to `patience`.
    public func migrate(waitingForServer patience: Duration) async throws {
        let deadline = ContinuousClock.now.advanced(by: patience)
        var told = false
        while true {
            do {
                return try await migrate()
            } catch let error as ChatStoreError where pool.isAway && ContinuousClock.now < deadline {
                if !told {
                    logger.notice("PostgreSQL does not accept writes yet; the migrations wait for it", metadata: ["error": "\(error.message)"])
                    told = true
                }
                try await Task.sleep(for: .milliseconds(500))
            }
        }
    }

    public func migrate() async throws {
        await pool.running()
        try await transaction { connection in
            // One migrator at a time across every node that starts at once.
            try await connection.query("SELECT pg_advisory_xact_lock(7246175)", logger: logger)
            try await connection.query("CREATE TABLE IF NOT EXISTS parley_migrations (version INT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)", logger: logger)
            var applied: Set<Int> = []
            for try await version in try await connection.query("SELECT version FROM parley_migrations", logger: logger).decode(Int.self) {
                applied.insert(version)
            }
            for migration in Self.migrations where !applied.contains(migration.version) {
                for statement in migration.statements {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                // When the database applied it, by the database's clock.
                try await connection.query(
                    "INSERT INTO parley_migrations (version, name, applied_at) VALUES (\(migration.version), \(migration.name), (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT)",
                    logger: logger)
                logger.info("applied migration", metadata: ["migration.version": "\(migration.version)", "migration.name": "\(migration.name)"])
                if migration.version == Self.searchMigration {
                    try await indexStoredMessages(connection: connection)
                }
                if migration.version == Self.nameKeysMigration {
                    // The keys of every name stored, written 10,000 at a time.
                    var keys: [String] = [], users: [String] = []
                    for try await (id, name) in try await connection.query(
                        "SELECT id, display_name FROM users WHERE deleted_at IS NULL", logger: logger
                    ).decode((String, String).self) {
                        for key in User.nameKeys(name) {
                            keys.append(key)
                            users.append(id)
                        }
                    }
                    for start in stride(from: 0, to: keys.count, by: 10_000) {
                        let end = min(start + 10_000, keys.count)
                        try await connection.query(
                            """
                            INSERT INTO user_names (name_key, user_id) SELECT * FROM UNNEST(\(Array(keys[start..<end]))::TEXT[], \(Array(users[start..<end]))::TEXT[])
                            ON CONFLICT DO NOTHING
                            """, logger: logger)
                    }
                }
            }
        }
    }

    /// Every live message's `search_text`, read and written 10,000 at a time in key order (a
    /// store of millions is never held whole).
    private func indexStoredMessages(connection: PostgresConnection) async throws {
        var after: (conversation: String, seq: Int64) = ("", 0)
        while true {
            var conversations: [String] = [], seqs: [Int64] = [], texts: [String] = []
            for try await (conversation, seq, text, attachments) in try await connection.query(
                """
                SELECT conversation_id, seq, text, attachments FROM messages
                WHERE (conversation_id, seq) > (\(after.conversation), \(after.seq)) AND erased_at IS NULL
                ORDER BY conversation_id, seq LIMIT 10000
                """, logger: logger
            ).decode((String, Int64, String, String?).self) {
                conversations.append(conversation)
                seqs.append(seq)
                texts.append(SearchRows.indexable(text: text, attachments: try MediaRows.attachments(attachments)))
            }
            guard let lastConversation = conversations.last, let lastSeq = seqs.last else { return }
            try await connection.query(
                """
                UPDATE messages m SET search_text = u.t FROM UNNEST(\(conversations)::TEXT[], \(seqs)::BIGINT[], \(texts)::TEXT[]) AS u(c, s, t)
                WHERE m.conversation_id = u.c AND m.seq = u.s
                """, logger: logger)
            after = (lastConversation, lastSeq)
        }
    }

    /// `user`'s name keys become those of `displayName` (none for an empty one).
    private func nameUser(_ user: UserID, _ displayName: String, connection: PostgresConnection) async throws {
        try await connection.query("DELETE FROM user_names WHERE user_id = \(user.rawValue)", logger: logger)
        try await connection.query(
            """
            INSERT INTO user_names (name_key, user_id) SELECT k, \(user.rawValue) FROM UNNEST(\(User.nameKeys(displayName))::TEXT[]) AS k
            ON CONFLICT DO NOTHING
            """, logger: logger)
    }

    // MARK: Conversations

    public func createConversation(_ record: ConversationRecord) async throws {
        try await transaction { connection in
            let rows = try await connection.query(
                """
                INSERT INTO conversations (id, kind, name, owner_id, last_seq, epoch, created_at, last_activity_at, last_change, changed_at)
                VALUES (\(record.id.rawValue), \(record.kind.rawValue), \(record.name), \(record.ownerId.rawValue), \(record.lastSeq), 0,
                        \(record.createdAt.millisecondsSince1970), \(record.lastActivityAt.millisecondsSince1970), 'created',
                        \(record.createdAt.millisecondsSince1970))
                ON CONFLICT (id) DO NOTHING
                RETURNING id
                """, logger: logger)
            var inserted = false
            for try await _ in rows { inserted = true }
            guard inserted else { throw ChatStoreError(.conflict, "conversation \(record.id) exists") }
            try await insertMembers(record.members, into: record.id, connection: connection)
        }
    }

    public func conversation(_ id: ConversationID) async throws -> ConversationRecord? {
        try await records([id.rawValue]).first
    }

    /// The conversations with these IDs and their members, in the order given: two queries
    /// whatever the count.
    private func records(_ ids: [String]) async throws -> [ConversationRecord] {
        guard !ids.isEmpty else { return [] }
        return try await run { client in
            var heads: [String: (String, String?, String, Int64, Int64, Int64, Int64, String?, String?, String?)] = [:]
            for try await (id, kind, name, owner, lastSeq, created, activity, lastChange, pinned, photo, metadata) in try await client.query(
                """
                SELECT id, kind, name, owner_id, last_seq, created_at, last_activity_at, last_change_seq, pinned, photo, metadata
                FROM conversations WHERE id = ANY(\(ids))
                """,
                logger: logger
            ).decode((String, String, String?, String, Int64, Int64, Int64, Int64, String?, String?, String?).self) {
                heads[id] = (kind, name, owner, lastSeq, created, activity, lastChange, pinned, photo, metadata)
            }
            var members: [String: [ConversationMember]] = [:]
            var mutedBy: [String: [UserID]] = [:]
            for try await (conversation, user, role, delivered, read, muted, metadata) in try await client.query(
                """
                SELECT conversation_id, user_id, role, delivered_seq, read_seq, muted, metadata FROM members
                WHERE conversation_id = ANY(\(ids)) ORDER BY conversation_id, position
                """, logger: logger
            ).decode((String, String, String, Int64, Int64, Bool, String?).self) {
                var member = ConversationMember(userId: UserID(rawValue: user), role: MemberRole(rawValue: role) ?? .member, deliveredSeq: delivered, readSeq: read)
                member.metadata = try MetadataRows.metadata(metadata)
                members[conversation, default: []].append(member)
                if muted { mutedBy[conversation, default: []].append(UserID(rawValue: user)) }
            }
            return try ids.compactMap { id in
                guard let (kind, name, owner, lastSeq, createdAt, lastActivity, lastChange, pinned, photo, metadata) = heads[id] else { return nil }
                var record = ConversationRecord(
                    id: ConversationID(rawValue: id), kind: ConversationKind(rawValue: kind) ?? .group, name: name, ownerId: UserID(rawValue: owner),
                    lastSeq: lastSeq, createdAt: Date(millisecondsSince1970: createdAt), lastActivityAt: Date(millisecondsSince1970: lastActivity),
                    members: members[id] ?? [], mutedBy: (mutedBy[id] ?? []).sorted(), lastChangeSeq: lastChange, pinned: try ThreadRows.pinned(pinned),
                    photo: try PhotoRows.photo(photo))
                record.metadata = try MetadataRows.metadata(metadata)
                return record
            }
        }
    }

    public func acquireOwnership(of id: ConversationID) async throws -> Int64 {
        try await run { client in
            let rows = try await client.query("UPDATE conversations SET epoch = epoch + 1 WHERE id = \(id.rawValue) RETURNING epoch", logger: logger)
            for try await epoch in rows.decode(Int64.self) { return epoch }
            throw ChatStoreError(.notFound, "no conversation \(id)")
        }
    }

    // MARK: Messages

    /// No timeout and no cancellation, ever: a commit cancelled while the primary waits for its
    /// synchronous standby (Patroni's strict mode) is reported as committed and becomes visible
    /// though only the primary has it, and a failover then loses a message that was acknowledged.
    /// A commit waits for its answer; one whose connection breaks is `unavailable`, its outcome
    /// unknown, and the conversation reads the store to learn it.
    public func commit(_ appends: [AppendRequest]) async throws -> [AppendOutcome] {
        guard !appends.isEmpty else { return [] }
        var call = CommitStatements.Commit()
        for append in appends {
            call.conversations.append(append.conversationId.rawValue)
            call.epochs.append(append.epoch)
            call.senders.append(append.senderId.rawValue)
            call.clientMessageIds.append(append.clientMessageId)
            call.texts.append(append.text)
            call.sentAt.append(append.sentAt.millisecondsSince1970)
            call.attachments.append(MediaRows.column(append.attachments) ?? "")
            call.replyTo.append(append.replyTo?.seq ?? 0)
            call.replyQuotes.append(ThreadRows.encode(append.replyTo) ?? "")
            call.mentions.append(ThreadRows.mentionsColumn(append.mentions) ?? "")
            call.metadata.append(Metadata.column(append.metadata) ?? "")
            call.search.append(SearchRows.indexable(text: append.text, attachments: append.attachments))
        }
        return try await run { client in
            var outcomes: [AppendOutcome?] = Array(repeating: nil, count: appends.count)
            for try await (ord, outcome, seq, sender, text, sentAt, epoch, attachments, quote, mentions, metadata) in try await client.execute(call, logger: logger) {
                let index = Int(ord) - 1
                guard outcomes.indices.contains(index), let kind = CommitStatements.Outcome(rawValue: outcome) else {
                    throw ChatStoreError(.unavailable, "parley_commit answered row \(ord) with outcome \(outcome) for a batch of \(appends.count)")
                }
                let append = appends[index]
                switch kind {
                case .appended:
                    outcomes[index] = .appended(append.message(seq: seq, sentAt: sentAt))
                case .duplicate:
                    var original = Message(
                        conversationId: append.conversationId, seq: seq, senderId: UserID(rawValue: sender),
                        clientMessageId: append.clientMessageId, text: text, sentAt: Date(millisecondsSince1970: sentAt),
                        attachments: try MediaRows.attachments(attachments))
                    try ThreadRows.apply(replyQuote: quote, mentions: mentions, to: &original)
                    original.metadata = try MetadataRows.metadata(metadata)
                    outcomes[index] = .duplicate(original)
                case .staleEpoch:
                    outcomes[index] = .staleEpoch(current: epoch)
                case .unknownConversation:
                    outcomes[index] = .unknownConversation
                }
            }
            return try outcomes.enumerated().map { index, outcome in
                guard let outcome else { throw ChatStoreError(.unavailable, "parley_commit did not answer append \(index + 1) of \(appends.count)") }
                return outcome
            }
        }
    }

    public func messages(in id: ConversationID, after seq: Int64, limit: Int) async throws -> [Message] {
        try await fetchMessages(
            """
            SELECT \(unescaped: Self.messageColumns()) FROM messages
            WHERE conversation_id = \(id.rawValue) AND seq > \(seq) ORDER BY seq LIMIT \(max(0, limit))
            """)
    }

    public func messages(in id: ConversationID, before seq: Int64, limit: Int) async throws -> [Message] {
        try await fetchMessages(
            """
            SELECT \(unescaped: Self.messageColumns()) FROM messages
            WHERE conversation_id = \(id.rawValue) AND seq < \(seq) ORDER BY seq DESC LIMIT \(max(0, limit))
            """
        ).reversed()
    }

    public func message(in id: ConversationID, clientMessageId: String) async throws -> Message? {
        try await fetchMessages(
            """
            SELECT \(unescaped: Self.messageColumns()) FROM messages
            WHERE conversation_id = \(id.rawValue) AND client_message_id = \(clientMessageId)
            """
        ).first
    }

    public func recentlyActiveConversations(since: Date, limit: Int) async throws -> [ConversationID] {
        try await run { client in
            var ids: [ConversationID] = []
            for try await id in try await client.query(
                """
                SELECT id FROM conversations WHERE last_activity_at > \(since.millisecondsSince1970)
                ORDER BY last_activity_at DESC LIMIT \(max(0, limit))
                """, logger: logger
            ).decode(String.self) { ids.append(ConversationID(rawValue: id)) }
            return ids
        }
    }

    // MARK: Users

    public func createUser(_ user: StoredUser, reclaimingHandlesDeletedBefore quarantineEnded: Date) async throws {
        try await transaction { connection in
            _ = try await connection.query(
                "UPDATE users SET handle = '~' || id WHERE handle = \(user.user.handle) AND deleted_at < \(quarantineEnded.millisecondsSince1970)", logger: logger)
            let rows = try await connection.query(
                """
                INSERT INTO users (id, handle, password_hash, display_name, avatar_url, created_at, bot)
                VALUES (\(user.user.id.rawValue), \(user.user.handle), \(user.passwordHash), \(user.user.displayName), \(user.user.avatarURL),
                        \(user.user.createdAt.millisecondsSince1970), \(user.user.bot))
                ON CONFLICT DO NOTHING RETURNING id
                """, logger: logger)
            var inserted = false
            for try await _ in rows { inserted = true }
            guard inserted else { throw ChatStoreError(.conflict, "handle \(user.user.handle) is taken") }
            if user.deletion == nil { try await nameUser(user.user.id, user.user.displayName, connection: connection) }
        }
    }

    public func user(id: UserID) async throws -> StoredUser? {
        try await fetchUsers("SELECT \(unescaped: Self.userColumns) FROM users WHERE id = \(id.rawValue)").first
    }

    public func users(_ ids: [UserID]) async throws -> [User] {
        guard !ids.isEmpty else { return [] }
        let found = try await fetchUsers("SELECT \(unescaped: Self.userColumns) FROM users WHERE id = ANY(\(ids.map(\.rawValue)))").map(\.user)
        return StoredUser.inOrder(found, asked: ids)
    }

    public func user(handle: String) async throws -> StoredUser? {
        try await fetchUsers("SELECT \(unescaped: Self.userColumns) FROM users WHERE handle = \(handle) AND deleted_at IS NULL").first
    }

    public func updateProfile(
        of id: UserID, displayName: String?, avatarURL: String?, metadata: Metadata?, privateMetadata: Metadata?, at: Date
    ) async throws -> User? {
        try await transaction { connection in
            if avatarURL != nil {
                guard try await setAvatar(of: id, to: nil, connection: connection) else { return nil }
            }
            // Private fields alone are no change anyone else hears of.
            let counts = displayName != nil || avatarURL != nil || metadata != nil
            let stored = try await fetchUsers(
                """
                UPDATE users SET display_name = COALESCE(\(displayName), display_name), avatar_url = COALESCE(\(avatarURL), avatar_url),
                    metadata = CASE WHEN \(metadata != nil) THEN \(Metadata.column(metadata)) ELSE metadata END,
                    private_metadata = CASE WHEN \(privateMetadata != nil) THEN \(Metadata.column(privateMetadata)) ELSE private_metadata END,
                    profile_version = profile_version + \(counts ? 1 : 0),
                    profile_changed_at = CASE WHEN \(counts) THEN \(at.millisecondsSince1970) ELSE profile_changed_at END
                WHERE id = \(id.rawValue) AND deleted_at IS NULL RETURNING \(unescaped: Self.userColumns)
                """, on: connection
            ).first
            if let displayName, stored != nil { try await nameUser(id, displayName, connection: connection) }
            return stored?.user
        }
    }

    public func privateMetadata(of id: UserID) async throws -> Metadata? {
        try await run { client in
            for try await column in try await client.query(
                "SELECT private_metadata FROM users WHERE id = \(id.rawValue) AND deleted_at IS NULL", logger: logger
            ).decode(String?.self) { return try MetadataRows.metadata(column) }
            return nil
        }
    }

    public func setAvatar(of id: UserID, to media: MediaID?, at: Date) async throws -> User? {
        try await transaction { connection in
            // The row locked first: two changes of one profile at once take turns.
            guard let user = try await fetchUsers(
                "SELECT \(unescaped: Self.userColumns) FROM users WHERE id = \(id.rawValue) AND deleted_at IS NULL FOR UPDATE", on: connection
            ).first?.user else { return nil }
            guard user.avatar?.id != media || user.avatarURL != nil else { return user }
            _ = try await setAvatar(of: id, to: media, connection: connection)
            return try await fetchUsers(
                """
                UPDATE users SET avatar_url = NULL, profile_version = profile_version + 1, profile_changed_at = \(at.millisecondsSince1970)
                WHERE id = \(id.rawValue) RETURNING \(unescaped: Self.userColumns)
                """, on: connection
            ).first?.user
        }
    }

    /// The user's avatar becomes upload `media` (nil: none), the one before handed back to the
    /// sweeper unless something else uses it. False if there is no such user (or it is deleted);
    /// throws `notFound` for an upload the sweeper removed.
    private func setAvatar(of id: UserID, to media: MediaID?, connection: PostgresConnection) async throws -> Bool {
        var found = false, previous: String?
        for try await before in try await connection.query(
            "SELECT avatar_media_id FROM users WHERE id = \(id.rawValue) AND deleted_at IS NULL FOR UPDATE", logger: logger
        ).decode(String?.self) {
            found = true
            previous = before
        }
        guard found else { return false }
        let photo = try await referencePhoto(media, connection: connection)
        try await connection.query(
            "UPDATE users SET avatar = \(PhotoRows.column(photo)), avatar_media_id = \(media?.rawValue) WHERE id = \(id.rawValue)", logger: logger)
        if let previous, previous != media?.rawValue { try await releaseUnused(previous, connection: connection) }
        return true
    }

    /// Marks upload `media` used (the sweeper leaves it) and answers it; nil for nil. The UPDATE
    /// locks the upload's row, as an attach does (``referenceMedia(_:in:)``): a sweeper's DELETE
    /// either came first (`notFound`) or waits and then sees `referenced`.
    private func referencePhoto(_ media: MediaID?, connection: PostgresConnection) async throws -> Media? {
        guard let media else { return nil }
        for try await (id, uploader, contentType, size, sha256, width, height, created) in try await connection.query(
            """
            UPDATE media SET referenced = TRUE WHERE id = \(media.rawValue)
            RETURNING id, uploader_id, content_type, size, sha256, width, height, created_at
            """, logger: logger
        ).decode((String, String, String, Int64, String, Int?, Int?, Int64).self) {
            return MediaRows.media(
                id: id, uploaderId: uploader, contentType: contentType, size: size, sha256: sha256, width: width, height: height, createdAt: created
            ).media
        }
        throw ChatStoreError(.notFound, "no upload \(media)")
    }

    /// Hands upload `id` back to the sweeper unless a message, a profile or a group uses it.
    private func releaseUnused(_ id: String, connection: PostgresConnection) async throws {
        // The upload's row locked by a statement of its own: one that made it a photo meanwhile
        // holds it until it commits, and the UPDATE's snapshot, taken after, then sees that photo.
        try await connection.query("SELECT 1 FROM media WHERE id = \(id) FOR UPDATE", logger: logger)
        var bindings = PostgresBindings(capacity: 1)
        bindings.append(id)
        try await connection.query(PostgresQuery(unsafeSQL: PhotoRows.releaseUnused("$1"), binds: bindings), logger: logger)
    }

    public func untoldProfiles(limit: Int) async throws -> [UntoldProfile] {
        var untold: [(id: String, version: Int64, changedAt: Int64?)] = []
        try await run { client in
            for try await row in try await client.query(
                """
                SELECT id, profile_version, profile_changed_at FROM users WHERE profile_version > profile_told
                ORDER BY profile_changed_at, id COLLATE "C" LIMIT \(max(0, limit))
                """, logger: logger
            ).decode((String, Int64, Int64?).self) { untold.append(row) }
        }
        guard !untold.isEmpty else { return [] }
        let users = Dictionary(
            try await fetchUsers("SELECT \(unescaped: Self.userColumns) FROM users WHERE id = ANY(\(untold.map(\.id)))").map { ($0.user.id, $0.user) },
            uniquingKeysWith: { first, _ in first })
        return untold.compactMap { row in
            users[UserID(rawValue: row.id)].map { UntoldProfile(user: $0, version: row.version, changedAt: Date(millisecondsSince1970: row.changedAt ?? 0)) }
        }
    }

    public func profileTold(_ user: UserID, through version: Int64) async throws {
        try await run { client in
            _ = try await client.query(
                "UPDATE users SET profile_told = GREATEST(profile_told, \(version)) WHERE id = \(user.rawValue)", logger: logger)
        }
    }

    public func searchUsers(prefix: String, limit: Int) async throws -> [User] {
        let handle = prefix.lowercased(), key = User.nameKey(prefix)
        // Handles are ASCII below 0x7F and compared bytewise (COLLATE "C").
        let handles = try await fetchUsers(
            """
            SELECT \(unescaped: Self.userColumns) FROM users
            WHERE handle >= \(handle) AND handle < \(handle + "\u{7F}") AND deleted_at IS NULL ORDER BY handle LIMIT \(max(0, limit))
            """
        ).map(\.user)
        guard !key.isEmpty, handles.count < limit else { return handles }
        let range = UserNameRows.range(startingWith: key)
        // A name matches by at most its first few words: room for a user found twice.
        let names = try await fetchUsers(
            """
            SELECT \(unescaped: Self.userColumns(of: "u")) FROM user_names n JOIN users u ON u.id = n.user_id
            WHERE n.name_key >= \(range.lower) AND n.name_key < \(range.upper) AND u.deleted_at IS NULL
            ORDER BY n.name_key, n.user_id COLLATE "C" LIMIT \(max(0, limit) * 2)
            """
        ).map(\.user)
        return UserNameRows.merged(handles: handles, names: names, limit: limit)
    }

    public func existingUsers(_ ids: [UserID]) async throws -> Set<UserID> {
        try await run { client in
            var found: Set<UserID> = []
            for try await id in try await client.query("SELECT id FROM users WHERE id = ANY(\(ids.map(\.rawValue))) AND deleted_at IS NULL", logger: logger).decode(String.self) {
                found.insert(UserID(rawValue: id))
            }
            return found
        }
    }

    public func revokeToken(_ tokenID: String, expiresAt: Date) async throws {
        try await transaction { connection in
            try await connection.query(
                "INSERT INTO token_revocations (token_id, expires_at) VALUES (\(tokenID), \(expiresAt.millisecondsSince1970)) ON CONFLICT DO NOTHING",
                logger: logger)
            try await connection.query("DELETE FROM sessions WHERE token_id = \(tokenID)", logger: logger)
        }
    }

    public func isTokenRevoked(_ tokenID: String) async throws -> Bool {
        try await returnsRow("SELECT 1 FROM token_revocations WHERE token_id = \(tokenID)")
    }

    // MARK: Blocks

    public func block(_ block: Block, at: Date) async throws -> Bool {
        try await returnsRow(
            """
            INSERT INTO blocks (blocker_id, blocked_id, created_at) VALUES (\(block.blocker.rawValue), \(block.blocked.rawValue), \(at.millisecondsSince1970))
            ON CONFLICT DO NOTHING RETURNING blocker_id
            """)
    }

    public func unblock(_ block: Block) async throws -> Bool {
        try await returnsRow("DELETE FROM blocks WHERE blocker_id = \(block.blocker.rawValue) AND blocked_id = \(block.blocked.rawValue) RETURNING blocker_id")
    }

    /// Whether `query` answered a row: for a write with `RETURNING`, whether it changed one.
    private func returnsRow(_ query: PostgresQuery) async throws -> Bool {
        try await run { client in
            for try await _ in try await client.query(query, logger: logger) { return true }
            return false
        }
    }

    public func blocks(involving user: UserID) async throws -> [StoredBlock] {
        try await run { client in
            var blocks: [StoredBlock] = []
            for try await (blocker, blocked, at) in try await client.query(
                """
                SELECT blocker_id, blocked_id, created_at FROM blocks WHERE blocker_id = \(user.rawValue) OR blocked_id = \(user.rawValue)
                ORDER BY created_at DESC, blocker_id COLLATE "C" DESC, blocked_id COLLATE "C" DESC
                """, logger: logger
            ).decode((String, String, Int64).self) {
                blocks.append(BlockRows.block(blocker: blocker, blocked: blocked, at: at))
            }
            return blocks
        }
    }

    public func blocks(among users: [UserID]) async throws -> Set<Block> {
        guard users.count > 1 else { return [] }
        return try await run { client in
            let ids = users.map(\.rawValue)
            var blocks: Set<Block> = []
            for try await (blocker, blocked) in try await client.query(
                "SELECT blocker_id, blocked_id FROM blocks WHERE blocker_id = ANY(\(ids)) AND blocked_id = ANY(\(ids))", logger: logger
            ).decode((String, String).self) {
                blocks.insert(Block(blocker: UserID(rawValue: blocker), blocked: UserID(rawValue: blocked)))
            }
            return blocks
        }
    }

    // MARK: Reports and suspensions

    public func fileReport(_ report: Report) async throws -> (report: Report, created: Bool) {
        let document = try ReportRows.document(report)
        let target = ReportRows.target(of: report)
        return try await transaction { connection in
            // One filing per reporter at a time: two retries of one report cannot both insert.
            try await connection.query("SELECT pg_advisory_xact_lock(hashtext(\(report.reporterId.rawValue)))", logger: logger)
            for try await open in try await connection.query(
                """
                SELECT document FROM reports WHERE reporter_id = \(report.reporterId.rawValue) AND target = \(target) AND status = 'open'
                ORDER BY created_at, id LIMIT 1
                """, logger: logger
            ).decode(String.self) {
                return (try ReportRows.report(open), false)
            }
            try await connection.query(
                """
                INSERT INTO reports (id, reporter_id, target, status, created_at, webhooks_owed, document)
                VALUES (\(report.id.rawValue), \(report.reporterId.rawValue), \(target), 'open', \(report.createdAt.millisecondsSince1970), true, \(document))
                """, logger: logger)
            return (try ReportRows.report(document), true)
        }
    }

    public func report(_ id: ReportID) async throws -> Report? {
        try await fetchReports("SELECT document FROM reports WHERE id = \(id.rawValue)").first
    }

    public func reports(status: ReportStatus?, after: ReportID?, limit: Int) async throws -> [Report] {
        try await fetchReports(
            """
            SELECT document FROM reports
            WHERE (\(status?.rawValue)::TEXT IS NULL OR status = \(status?.rawValue))
              AND (\(after?.rawValue)::TEXT IS NULL OR (created_at, id COLLATE "C") > (SELECT created_at, id COLLATE "C" FROM reports WHERE id = \(after?.rawValue)))
            ORDER BY created_at, id COLLATE "C" LIMIT \(max(0, limit))
            """)
    }

    public func resolveReport(_ id: ReportID, resolution: String?, at: Date) async throws -> Report? {
        try await transaction { connection in
            var found: String?
            for try await document in try await connection.query("SELECT document FROM reports WHERE id = \(id.rawValue) FOR UPDATE", logger: logger)
                .decode(String.self)
            {
                found = document
            }
            guard let found else { return nil }
            var report = try ReportRows.report(found)
            guard report.status == .open else { return report }
            report.status = .resolved
            report.resolvedAt = at.millisecondPrecision
            report.resolution = resolution
            try await connection.query(
                "UPDATE reports SET status = 'resolved', document = \(try ReportRows.document(report)) WHERE id = \(id.rawValue)", logger: logger)
            return report
        }
    }

    public func reportsOwingWebhooks(limit: Int) async throws -> [Report] {
        try await fetchReports("SELECT document FROM reports WHERE webhooks_owed ORDER BY created_at, id COLLATE \"C\" LIMIT \(max(0, limit))")
    }

    public func reportWebhooksDone(_ id: ReportID) async throws {
        try await run { client in _ = try await client.query("UPDATE reports SET webhooks_owed = false WHERE id = \(id.rawValue)", logger: logger) }
    }

    public func setSuspended(_ user: UserID, since: Date?) async throws -> Bool {
        try await returnsRow("UPDATE users SET suspended_at = \(since?.millisecondsSince1970) WHERE id = \(user.rawValue) RETURNING id")
    }

    private func fetchReports(_ query: PostgresQuery) async throws -> [Report] {
        try await run { client in
            var reports: [Report] = []
            for try await document in try await client.query(query, logger: logger).decode(String.self) {
                reports.append(try ReportRows.report(document))
            }
            return reports
        }
    }

    // MARK: Sessions

    public func openSession(_ session: StoredSession) async throws {
        try await transaction { connection in
            try await connection.query(
                "DELETE FROM sessions WHERE user_id = \(session.userId.rawValue) AND expires_at <= \(session.createdAt.millisecondsSince1970)", logger: logger)
            try await connection.query(
                """
                INSERT INTO sessions (token_id, user_id, created_at, last_used_at, expires_at, user_agent)
                VALUES (\(session.tokenId), \(session.userId.rawValue), \(session.createdAt.millisecondsSince1970),
                        \(session.lastUsedAt.millisecondsSince1970), \(session.expiresAt.millisecondsSince1970), \(session.userAgent))
                ON CONFLICT (token_id) DO NOTHING
                """, logger: logger)
        }
    }

    public func session(_ tokenID: String) async throws -> StoredSession? {
        try await fetchSessions(
            "SELECT token_id, user_id, created_at, last_used_at, expires_at, user_agent FROM sessions WHERE token_id = \(tokenID)"
        ).first
    }

    public func sessions(of user: UserID, now: Date, limit: Int) async throws -> [StoredSession] {
        try await fetchSessions(
            """
            SELECT token_id, user_id, created_at, last_used_at, expires_at, user_agent FROM sessions
            WHERE user_id = \(user.rawValue) AND expires_at > \(now.millisecondsSince1970)
            ORDER BY created_at DESC, token_id COLLATE "C" DESC LIMIT \(max(0, limit))
            """)
    }

    public func touchSession(_ tokenID: String, at: Date) async throws {
        try await run { client in
            _ = try await client.query(
                "UPDATE sessions SET last_used_at = \(at.millisecondsSince1970) WHERE token_id = \(tokenID) AND last_used_at < \(at.millisecondsSince1970)",
                logger: logger)
        }
    }

    public func changePassword(of user: UserID, from old: String, to new: String, keeping tokenID: String, at: Date) async throws -> [StoredSession]? {
        try await transaction { connection in
            var changed = false
            for try await _ in try await connection.query(
                """
                UPDATE users SET password_hash = \(new), password_changed_at = \(at.millisecondsSince1970)
                WHERE id = \(user.rawValue) AND password_hash = \(old) RETURNING id
                """, logger: logger)
            {
                changed = true
            }
            guard changed else { return nil }
            var others: [StoredSession] = []
            for try await (token, userId, created, used, expires, agent) in try await connection.query(
                """
                DELETE FROM sessions WHERE user_id = \(user.rawValue) AND token_id <> \(tokenID)
                RETURNING token_id, user_id, created_at, last_used_at, expires_at, user_agent
                """, logger: logger
            ).decode((String, String, Int64, Int64, Int64, String?).self) {
                others.append(SessionRows.session(tokenId: token, userId: userId, createdAt: created, lastUsedAt: used, expiresAt: expires, userAgent: agent))
            }
            others.sort { $0.tokenId < $1.tokenId }
            let ids = others.map(\.tokenId)
            try await connection.query(
                """
                INSERT INTO token_revocations (token_id, expires_at)
                SELECT * FROM unnest(\(ids)::TEXT[], \(others.map(\.expiresAt.millisecondsSince1970))::BIGINT[]) ON CONFLICT DO NOTHING
                """, logger: logger)
            try await connection.query("DELETE FROM devices WHERE user_id = \(user.rawValue) AND token_id <> \(tokenID)", logger: logger)
            return others
        }
    }

    private func fetchSessions(_ query: PostgresQuery) async throws -> [StoredSession] {
        try await run { client in
            var sessions: [StoredSession] = []
            for try await (token, user, created, used, expires, agent) in try await client.query(query, logger: logger)
                .decode((String, String, Int64, Int64, Int64, String?).self)
            {
                sessions.append(SessionRows.session(tokenId: token, userId: user, createdAt: created, lastUsedAt: used, expiresAt: expires, userAgent: agent))
            }
            return sessions
        }
    }

    // MARK: Devices

    public func registerDevice(_ device: StoredDevice, keepingAtMost limit: Int) async throws -> (device: StoredDevice, created: Bool, takenFrom: UserID?) {
        try await transaction { connection in
            var stored = device
            stored.device.createdAt = device.device.createdAt.millisecondPrecision
            var existing: (id: String, userId: String, createdAt: Int64)?
            for try await row in try await connection.query(
                "SELECT id, user_id, created_at FROM devices WHERE platform = \(device.device.platform.rawValue) AND token = \(device.device.token) FOR UPDATE",
                logger: logger
            ).decode((String, String, Int64).self) {
                existing = row
            }
            if let existing, existing.userId == device.userId.rawValue {
                stored.device.id = DeviceID(rawValue: existing.id)
                stored.device.createdAt = Date(millisecondsSince1970: existing.createdAt)
                try await connection.query(
                    """
                    UPDATE devices SET token_id = \(device.tokenId), topic = \(device.device.topic), environment = \(device.device.environment?.rawValue)
                    WHERE id = \(existing.id)
                    """, logger: logger)
            } else {
                if let existing { try await connection.query("DELETE FROM devices WHERE id = \(existing.id)", logger: logger) }
                var inserted = false
                for try await _ in try await connection.query(
                    """
                    INSERT INTO devices (id, user_id, token_id, platform, token, topic, environment, created_at)
                    VALUES (\(stored.device.id.rawValue), \(device.userId.rawValue), \(device.tokenId), \(device.device.platform.rawValue),
                            \(device.device.token), \(device.device.topic), \(device.device.environment?.rawValue),
                            \(stored.device.createdAt.millisecondsSince1970))
                    ON CONFLICT (platform, token) DO NOTHING RETURNING id
                    """, logger: logger)
                {
                    inserted = true
                }
                // Another registration of the same token committed between the two statements.
                guard inserted else { throw ChatStoreError(.unavailable, "the device was registered at the same time elsewhere; try again") }
            }
            try await connection.query(
                """
                DELETE FROM devices WHERE user_id = \(device.userId.rawValue) AND id NOT IN
                    (SELECT id FROM devices WHERE user_id = \(device.userId.rawValue) ORDER BY created_at DESC, id COLLATE "C" DESC LIMIT \(max(limit, 1)))
                """, logger: logger)
            let takenFrom = existing.flatMap { $0.userId == device.userId.rawValue ? nil : UserID(rawValue: $0.userId) }
            return (stored, existing?.userId != device.userId.rawValue, takenFrom)
        }
    }

    public func devices(of user: UserID) async throws -> [StoredDevice] {
        try await run { client in
            var devices: [StoredDevice] = []
            for try await (id, tokenId, platform, token, topic, environment, created) in try await client.query(
                """
                SELECT id, token_id, platform, token, topic, environment, created_at FROM devices
                WHERE user_id = \(user.rawValue) ORDER BY created_at, id COLLATE "C"
                """, logger: logger
            ).decode((String, String, String, String, String?, String?, Int64).self) {
                devices.append(try DeviceRows.device(
                    id: id, userId: user.rawValue, tokenId: tokenId, platform: platform, token: token, topic: topic, environment: environment, createdAt: created))
            }
            return devices
        }
    }

    /// One round trip: the count and the name ride on each device's row.
    public func pushRecipient(_ user: UserID, sender: UserID?) async throws -> PushRecipient {
        try await run { client in
            var recipient = PushRecipient(devices: [], unread: 0, senderName: nil)
            for try await (id, tokenId, platform, token, topic, environment, created, unread, senderName) in try await client.query(
                """
                SELECT id, token_id, platform, token, topic, environment, created_at,
                    (SELECT coalesce(sum(x.u), 0)::BIGINT FROM (\(unescaped: Self.unreadPerConversation) WHERE m.user_id = \(user.rawValue)) x),
                    (SELECT display_name FROM users WHERE id = \(sender?.rawValue))
                FROM devices WHERE user_id = \(user.rawValue) ORDER BY created_at, id COLLATE "C"
                """, logger: logger
            ).decode((String, String, String, String, String?, String?, Int64, Int64, String?).self) {
                recipient.devices.append(try DeviceRows.device(
                    id: id, userId: user.rawValue, tokenId: tokenId, platform: platform, token: token, topic: topic, environment: environment, createdAt: created))
                recipient.unread = unread
                recipient.senderName = senderName
            }
            return recipient
        }
    }

    public func removeDevice(_ id: DeviceID, of user: UserID) async throws -> Bool {
        try await returnsRow("DELETE FROM devices WHERE id = \(id.rawValue) AND user_id = \(user.rawValue) RETURNING id")
    }

    public func removeDevices(registeredWith tokenID: String) async throws {
        try await run { client in _ = try await client.query("DELETE FROM devices WHERE token_id = \(tokenID)", logger: logger) }
    }

    public func recordMedia(_ media: StoredMedia) async throws {
        let m = media.media
        try await run { client in
            let rows = try await client.query(
                """
                INSERT INTO media (id, uploader_id, content_type, size, sha256, width, height, created_at)
                VALUES (\(m.id.rawValue), \(media.uploaderId.rawValue), \(m.contentType), \(m.size), \(m.sha256), \(m.width), \(m.height),
                        \(m.createdAt.millisecondsSince1970))
                ON CONFLICT DO NOTHING RETURNING id
                """, logger: logger)
            var inserted = false
            for try await _ in rows { inserted = true }
            guard inserted else { throw ChatStoreError(.conflict, "media \(m.id) exists") }
        }
    }

    public func media(_ id: MediaID) async throws -> StoredMedia? {
        try await run { client in
            for try await (uploader, contentType, size, sha256, width, height, created) in try await client.query(
                "SELECT uploader_id, content_type, size, sha256, width, height, created_at FROM media WHERE id = \(id.rawValue)", logger: logger
            ).decode((String, String, Int64, String, Int?, Int?, Int64).self) {
                return MediaRows.media(
                    id: id.rawValue, uploaderId: uploader, contentType: contentType, size: size, sha256: sha256, width: width, height: height, createdAt: created)
            }
            return nil
        }
    }

    @discardableResult
    public func referenceMedia(_ ids: [MediaID], in conversation: ConversationID) async throws -> Set<MediaID> {
        guard !ids.isEmpty else { return [] }
        return try await run { client in
            // The UPDATE locks each upload's row: a sweeper's DELETE of it either came first (the
            // row is gone, nothing is found) or waits and then sees `referenced`.
            var found: Set<MediaID> = []
            for try await id in try await client.query(
                """
                WITH found AS (UPDATE media SET referenced = TRUE WHERE id = ANY(\(ids.map(\.rawValue))::TEXT[]) RETURNING id),
                     referenced AS (
                         INSERT INTO media_references (media_id, conversation_id)
                         SELECT id, \(conversation.rawValue) FROM found ON CONFLICT DO NOTHING)
                SELECT id FROM found
                """, logger: logger
            ).decode(String.self) { found.insert(MediaID(rawValue: id)) }
            return found
        }
    }

    public func removeUnattachedMedia(uploadedBefore cutoff: Date, limit: Int) async throws -> [StoredMedia] {
        try await run { client in
            var removed: [StoredMedia] = []
            // The rows are locked in one order, skipping any another sweep (or an attach) holds:
            // two sweeps (one per gateway) that locked the same rows in their scans' orders were
            // seen to deadlock (40P01). `NOT referenced` again on the deleted row itself: an
            // attach that locked it first is seen once it commits.
            for try await (id, uploader, contentType, size, sha256, width, height, created) in try await client.query(
                """
                DELETE FROM media WHERE id IN (
                    SELECT id FROM media WHERE NOT referenced AND created_at < \(cutoff.millisecondsSince1970)
                    ORDER BY created_at, id LIMIT \(max(0, limit)) FOR UPDATE SKIP LOCKED)
                AND NOT referenced
                RETURNING id, uploader_id, content_type, size, sha256, width, height, created_at
                """, logger: logger
            ).decode((String, String, String, Int64, String, Int?, Int?, Int64).self) {
                removed.append(MediaRows.media(
                    id: id, uploaderId: uploader, contentType: contentType, size: size, sha256: sha256, width: width, height: height, createdAt: created))
            }
            return removed.sorted { ($0.media.createdAt, $0.media.id) < ($1.media.createdAt, $1.media.id) }
        }
    }

    public func hasMedia(withSHA256 sha256: String) async throws -> Bool {
        try await run { client in
            for try await found in try await client.query("SELECT EXISTS (SELECT 1 FROM media WHERE sha256 = \(sha256))", logger: logger).decode(Bool.self) {
                return found
            }
            return false
        }
    }

    public func conversationsReferencing(_ id: MediaID) async throws -> [ConversationID] {
        try await run { client in
            var ids: [ConversationID] = []
            for try await conversation in try await client.query(
                """
                SELECT c FROM (
                    SELECT conversation_id FROM media_references WHERE media_id = \(id.rawValue)
                    UNION SELECT id FROM conversations WHERE photo_media_id = \(id.rawValue)) AS found(c)
                ORDER BY c COLLATE "C"
                """, logger: logger
            ).decode(String.self) { ids.append(ConversationID(rawValue: conversation)) }
            return ids
        }
    }

    public func mediaBytes(of user: UserID) async throws -> Int64 {
        try await run { client in
            for try await total in try await client.query(
                "SELECT coalesce(sum(size), 0)::BIGINT FROM media WHERE uploader_id = \(user.rawValue)", logger: logger
            ).decode(Int64.self) {
                return total
            }
            return 0
        }
    }

    public func conversations(of user: UserID, after cursor: ConversationPageCursor?, limit: Int) async throws -> [ConversationRecord] {
        let ids: [String] = try await run { client in
            let activity = cursor?.lastActivityAt.millisecondsSince1970 ?? Int64.max
            let id = cursor?.id.rawValue ?? String(repeating: "\u{7F}", count: 8)
            var ids: [String] = []
            for try await value in try await client.query(
                """
                SELECT c.id FROM conversations c JOIN members m ON m.conversation_id = c.id
                WHERE m.user_id = \(user.rawValue) AND (c.last_activity_at, c.id COLLATE "C") < (\(activity), \(id) COLLATE "C")
                ORDER BY c.last_activity_at DESC, c.id COLLATE "C" DESC LIMIT \(max(0, limit))
                """, logger: logger
            ).decode(String.self) { ids.append(value) }
            return ids
        }
        return try await records(ids)
    }

    public func lastMessages(in ids: [ConversationID]) async throws -> [ConversationID: Message] {
        let messages = try await fetchMessages(
            """
            SELECT \(unescaped: Self.messageColumns(of: "m"))
            FROM conversations c JOIN messages m ON m.conversation_id = c.id AND m.seq = c.last_seq
            WHERE c.id = ANY(\(ids.map(\.rawValue)))
            """)
        return Dictionary(messages.map { ($0.conversationId, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// What ``fetchUsers(_:on:)`` reads, in its order; each after `table.` when a query joins another table.
    private static func userColumns(of table: String? = nil) -> String {
        [
            "id", "handle", "password_hash", "display_name", "avatar_url", "created_at", "bot", "password_changed_at", "suspended_at", "deleted_at",
            "deletion_erase", "deletion_finished_at", "avatar", "metadata",
        ].map { (table.map { "\($0)." } ?? "") + $0 }.joined(separator: ", ")
    }

    private static let userColumns = userColumns()

    private func fetchUsers(_ query: PostgresQuery, on connection: PostgresConnection? = nil) async throws -> [StoredUser] {
        try await run { client in
            var users: [StoredUser] = []
            let rows = if let connection { try await connection.query(query, logger: logger) } else { try await client.query(query, logger: logger) }
            for try await (id, handle, hash, name, avatarURL, created, bot, passwordChanged, suspended, deleted, erase, finished, avatar, metadata) in rows
                .decode((String, String, String, String, String?, Int64, Bool, Int64?, Int64?, Int64?, Bool, Int64?, String?, String?).self)
            {
                var user = User(
                    id: UserID(rawValue: id), handle: handle, displayName: name, avatarURL: avatarURL, createdAt: Date(millisecondsSince1970: created), bot: bot)
                user.avatar = try PhotoRows.photo(avatar)
                user.metadata = try MetadataRows.metadata(metadata)
                users.append(StoredUser(
                    user: user,
                    passwordHash: hash, passwordChangedAt: passwordChanged.map(Date.init(millisecondsSince1970:)),
                    suspendedAt: suspended.map(Date.init(millisecondsSince1970:)),
                    deletion: DeletionRows.deletion(of: id, deletedAt: deleted, erase: erase, finishedAt: finished)))
            }
            return users
        }
    }

    // MARK: Account deletion

    public func beginDeletion(of user: UserID, erase: Bool, at: Date) async throws -> AccountDeletion? {
        try await transaction { connection in
            // A deleted account shows no photo: its own goes to the sweeper, unless a group uses it.
            _ = try await setAvatar(of: user, to: nil, connection: connection)
            // An erasure asked after a deletion finished without one makes it unfinished again.
            var deletion: AccountDeletion?
            for try await (id, deleted, erase, finished) in try await connection.query(
                """
                UPDATE users SET
                    deletion_finished_at = CASE WHEN \(erase) AND NOT deletion_erase THEN NULL ELSE deletion_finished_at END,
                    deletion_webhooks_owed = deletion_webhooks_owed OR deleted_at IS NULL,
                    deleted_at = COALESCE(deleted_at, \(at.millisecondsSince1970)), deletion_erase = deletion_erase OR \(erase),
                    display_name = '', avatar_url = NULL, metadata = NULL, private_metadata = NULL
                WHERE id = \(user.rawValue) RETURNING id, deleted_at, deletion_erase, deletion_finished_at
                """, logger: logger
            ).decode((String, Int64?, Bool, Int64?).self) {
                deletion = DeletionRows.deletion(of: id, deletedAt: deleted, erase: erase, finishedAt: finished)
            }
            guard let deletion else { return nil }
            try await connection.query("DELETE FROM user_names WHERE user_id = \(user.rawValue)", logger: logger)
            try await connection.query("DELETE FROM sessions WHERE user_id = \(user.rawValue)", logger: logger)
            try await connection.query("DELETE FROM devices WHERE user_id = \(user.rawValue)", logger: logger)
            try await connection.query("DELETE FROM blocks WHERE blocker_id = \(user.rawValue) OR blocked_id = \(user.rawValue)", logger: logger)
            try await connection.query("UPDATE media SET created_at = 0 WHERE uploader_id = \(user.rawValue) AND NOT referenced", logger: logger)
            return deletion
        }
    }

    public func finishDeletion(of user: UserID, at: Date) async throws {
        try await run { client in
            _ = try await client.query(
                """
                UPDATE users SET deletion_finished_at = COALESCE(deletion_finished_at, \(at.millisecondsSince1970))
                WHERE id = \(user.rawValue) AND deleted_at IS NOT NULL
                """, logger: logger)
        }
    }

    public func unfinishedDeletions(limit: Int) async throws -> [AccountDeletion] {
        try await fetchDeletions(
            """
            SELECT id, deleted_at, deletion_erase, deletion_finished_at FROM users
            WHERE deleted_at IS NOT NULL AND deletion_finished_at IS NULL ORDER BY deleted_at, id COLLATE "C" LIMIT \(max(0, limit))
            """)
    }

    public func deletionsOwingWebhooks(limit: Int) async throws -> [AccountDeletion] {
        try await fetchDeletions(
            """
            SELECT id, deleted_at, deletion_erase, deletion_finished_at FROM users
            WHERE deletion_webhooks_owed AND deletion_finished_at IS NOT NULL ORDER BY deletion_finished_at, id COLLATE "C" LIMIT \(max(0, limit))
            """)
    }

    public func deletionWebhooksDone(_ user: UserID) async throws {
        try await run { client in _ = try await client.query("UPDATE users SET deletion_webhooks_owed = false WHERE id = \(user.rawValue)", logger: logger) }
    }

    private func fetchDeletions(_ query: PostgresQuery) async throws -> [AccountDeletion] {
        try await run { client in
            var deletions: [AccountDeletion] = []
            for try await (id, deleted, erase, finished) in try await client.query(query, logger: logger).decode((String, Int64?, Bool, Int64?).self) {
                if let deletion = DeletionRows.deletion(of: id, deletedAt: deleted, erase: erase, finishedAt: finished) { deletions.append(deletion) }
            }
            return deletions
        }
    }

    // MARK: Members

    public func addMembers(_ members: [ConversationMember], to id: ConversationID, epoch: Int64, at: Date) async throws {
        try await transaction { connection in
            try await lockAndCheckEpoch(epoch, of: id, connection: connection)
            try await insertMembers(members, into: id, connection: connection)
            try await changed(id, .memberAdded, at: at, connection: connection)
        }
    }

    public func removeMember(_ user: UserID, from id: ConversationID, epoch: Int64, at: Date) async throws {
        try await transaction { connection in
            try await lockAndCheckEpoch(epoch, of: id, connection: connection)
            var role: String?
            for try await removedRole in try await connection.query(
                "DELETE FROM members WHERE conversation_id = \(id.rawValue) AND user_id = \(user.rawValue) RETURNING role", logger: logger
            ).decode(String.self) { role = removedRole }
            guard let role else { return }
            if role == MemberRole.owner.rawValue {
                // The longest-standing member left is the owner now (ConversationState.memberRemoved).
                try await connection.query(
                    """
                    WITH heir AS (SELECT user_id FROM members WHERE conversation_id = \(id.rawValue) ORDER BY position LIMIT 1),
                    promoted AS (
                        UPDATE members SET role = \(MemberRole.owner.rawValue)
                        WHERE conversation_id = \(id.rawValue) AND user_id IN (SELECT user_id FROM heir) RETURNING user_id)
                    UPDATE conversations SET owner_id = promoted.user_id FROM promoted WHERE conversations.id = \(id.rawValue)
                    """, logger: logger)
            }
            try await connection.query(
                """
                INSERT INTO removals (user_id, removed_at, conversation_id) VALUES (\(user.rawValue), \(at.millisecondsSince1970), \(id.rawValue))
                ON CONFLICT DO NOTHING
                """, logger: logger)
            try await changed(id, .memberRemoved, at: at, connection: connection)
        }
    }

    public func updateConversation(_ id: ConversationID, name: String?, metadata: Metadata?, epoch: Int64, at: Date) async throws {
        try await transaction { connection in
            try await lockAndCheckEpoch(epoch, of: id, connection: connection)
            try await connection.query(
                """
                UPDATE conversations SET name = COALESCE(\(name), name),
                    metadata = CASE WHEN \(metadata != nil) THEN \(Metadata.column(metadata)) ELSE metadata END
                WHERE id = \(id.rawValue)
                """, logger: logger)
            try await changed(id, .updated, at: at, connection: connection)
        }
    }

    public func setMemberMetadata(_ metadata: Metadata?, for user: UserID, in id: ConversationID, epoch: Int64) async throws -> Bool {
        try await transaction { connection in
            try await lockAndCheckEpoch(epoch, of: id, connection: connection)
            let rows = try await connection.query(
                "UPDATE members SET metadata = \(Metadata.column(metadata)) WHERE conversation_id = \(id.rawValue) AND user_id = \(user.rawValue) RETURNING 1",
                logger: logger)
            for try await _ in rows.decode(Int.self) { return true }
            return false
        }
    }

    public func setConversationPhoto(_ id: ConversationID, to media: MediaID?, epoch: Int64, at: Date) async throws -> Media? {
        try await transaction { connection in
            try await lockAndCheckEpoch(epoch, of: id, connection: connection)
            var previous: String?
            for try await before in try await connection.query(
                "SELECT photo_media_id FROM conversations WHERE id = \(id.rawValue)", logger: logger
            ).decode(String?.self) { previous = before }
            let photo = try await referencePhoto(media, connection: connection)
            try await connection.query(
                "UPDATE conversations SET photo = \(PhotoRows.column(photo)), photo_media_id = \(media?.rawValue) WHERE id = \(id.rawValue)", logger: logger)
            if let previous, previous != media?.rawValue { try await releaseUnused(previous, connection: connection) }
            try await changed(id, .updated, at: at, connection: connection)
            return photo
        }
    }

    public func setPushesOwed(from seq: Int64?, in id: ConversationID, epoch: Int64) async throws {
        try await transaction { connection in
            try await lockAndCheckEpoch(epoch, of: id, connection: connection)
            try await connection.query("UPDATE conversations SET pushes_owed_from = \(seq) WHERE id = \(id.rawValue)", logger: logger)
        }
    }

    public func conversationsOwingPushes(limit: Int) async throws -> [(conversation: ConversationID, from: Int64)] {
        try await run { client in
            var owing: [(conversation: ConversationID, from: Int64)] = []
            for try await (id, from) in try await client.query(
                "SELECT id, pushes_owed_from FROM conversations WHERE pushes_owed_from IS NOT NULL ORDER BY id LIMIT \(max(0, limit))", logger: logger
            ).decode((String, Int64).self) { owing.append((ConversationID(rawValue: id), from)) }
            return owing
        }
    }

    public func annotate(_ annotation: Annotation, epoch: Int64) async throws {
        try await transaction { connection in
            try await lockAndCheckEpoch(epoch, of: annotation.conversationId, connection: connection)
            try await connection.query(
                """
                INSERT INTO annotations (conversation_id, seq, key, value, author_id, annotated_at)
                VALUES (\(annotation.conversationId.rawValue), \(annotation.seq), \(annotation.key), \(annotation.value), \(annotation.authorId.rawValue),
                        \(annotation.at.millisecondsSince1970))
                ON CONFLICT (conversation_id, seq, key) DO UPDATE SET value = excluded.value, author_id = excluded.author_id, annotated_at = excluded.annotated_at
                """, logger: logger)
        }
    }

    public func eraseMessages(in id: ConversationID, seqs: [Int64], epoch: Int64, at: Date) async throws -> [Message] {
        guard !seqs.isEmpty else { return [] }
        return try await transaction { connection in
            try await lockAndCheckEpoch(epoch, of: id, connection: connection)
            var erased: [Message] = []
            // The rows as they were: an UPDATE's RETURNING gives them as they are after.
            for try await row in try await connection.query(
                """
                SELECT conversation_id, seq, sender_id, client_message_id, text, sent_at, attachments FROM messages
                WHERE conversation_id = \(id.rawValue) AND seq = ANY(\(seqs)) AND erased_at IS NULL ORDER BY seq FOR UPDATE
                """, logger: logger
            ).decode((String, Int64, String, String, String, Int64, String?).self) { erased.append(try Self.message(row)) }
            guard !erased.isEmpty else { return [] }
            let erasedSeqs = erased.map(\.seq)
            try await connection.query(
                """
                UPDATE messages SET \(unescaped: ThreadRows.tombstoneAssignments), search_text = NULL, erased_at = \(at.millisecondsSince1970)
                WHERE conversation_id = \(id.rawValue) AND seq = ANY(\(erasedSeqs))
                """, logger: logger)
            try await deleteWhatMessagesCarry(id, seqs: erasedSeqs, connection: connection)
            try await emptied(erased.map(\.tombstone), in: id, connection: connection)
            try await connection.query(
                """
                INSERT INTO erasures (conversation_id, seq, sender_id, client_message_id, sent_at, erased_at)
                SELECT conversation_id, seq, sender_id, client_message_id, sent_at, erased_at FROM messages
                WHERE conversation_id = \(id.rawValue) AND seq = ANY(\(erasedSeqs))
                ON CONFLICT DO NOTHING
                """, logger: logger)
            return erased
        }
    }

    /// Messages `tombstones` are tombstones now: replies quote them so, and they are no longer
    /// pinned.
    private func emptied(_ tombstones: [Message], in id: ConversationID, connection: PostgresConnection) async throws {
        for tombstone in tombstones { try await requote(tombstone, connection: connection) }
        let seqs = tombstones.map(\.seq)
        // The pinned array without these seqs, in its order; NULL once empty.
        try await connection.query(
            """
            UPDATE conversations SET pinned = (
                SELECT jsonb_agg(p.seq::bigint ORDER BY p.ord)::text FROM jsonb_array_elements_text(pinned::jsonb) WITH ORDINALITY AS p(seq, ord)
                WHERE p.seq::bigint <> ALL(\(seqs)))
            WHERE id = \(id.rawValue) AND pinned IS NOT NULL
            """, logger: logger)
    }

    /// Every reply to `message` quotes it as it is now.
    private func requote(_ message: Message, connection: PostgresConnection) async throws {
        try await connection.query(
            """
            UPDATE messages SET reply_quote = \(ThreadRows.encode(MessageQuote(of: message)))
            WHERE conversation_id = \(message.conversationId.rawValue) AND reply_to = \(message.seq)
            """, logger: logger)
    }

    /// Tombstones' annotations, reactions and earlier texts.
    private func deleteWhatMessagesCarry(_ id: ConversationID, seqs: [Int64], connection: PostgresConnection) async throws {
        try await connection.query("DELETE FROM annotations WHERE conversation_id = \(id.rawValue) AND seq = ANY(\(seqs))", logger: logger)
        try await connection.query("DELETE FROM reactions WHERE conversation_id = \(id.rawValue) AND seq = ANY(\(seqs))", logger: logger)
        try await connection.query("DELETE FROM message_versions WHERE conversation_id = \(id.rawValue) AND seq = ANY(\(seqs))", logger: logger)
    }

    public func commitChange(_ change: MessageChange, epoch: Int64) async throws -> (change: MessageChange, message: Message)? {
        let id = change.conversationId
        return try await transaction { connection in
            try await lockAndCheckEpoch(epoch, of: id, connection: connection)
            guard let original = try await fetchMessages(
                "SELECT \(unescaped: Self.messageColumns()) FROM messages WHERE conversation_id = \(id.rawValue) AND seq = \(change.seq) FOR UPDATE",
                on: connection
            ).first, !original.isTombstone else { return nil }
            var change = change
            switch change.kind {
            case .edited:
                try await connection.query(
                    """
                    INSERT INTO message_versions (conversation_id, seq, version, text, at)
                    SELECT \(id.rawValue), \(change.seq), coalesce(max(version), 0) + 1, \(original.text), \((original.editedAt ?? original.sentAt).millisecondsSince1970)
                    FROM message_versions WHERE conversation_id = \(id.rawValue) AND seq = \(change.seq)
                    """, logger: logger)
                let edited = change.applied(to: original)
                try await connection.query(
                    """
                    UPDATE messages SET text = \(edited.text), edited_at = \(change.at.millisecondsSince1970), search_text = \(SearchRows.indexable(edited))
                    WHERE conversation_id = \(id.rawValue) AND seq = \(change.seq)
                    """, logger: logger)
                try await requote(edited, connection: connection)
            case .deleted:
                try await connection.query(
                    """
                    UPDATE messages SET \(unescaped: ThreadRows.tombstoneAssignments), search_text = NULL, erased_at = \(change.at.millisecondsSince1970), deleted_by = \(change.userId.rawValue)
                    WHERE conversation_id = \(id.rawValue) AND seq = \(change.seq)
                    """, logger: logger)
                try await deleteWhatMessagesCarry(id, seqs: [change.seq], connection: connection)
                try await emptied([change.applied(to: original)], in: id, connection: connection)
            case .pinned, .unpinned:
                var column: String?
                for try await value in try await connection.query("SELECT pinned FROM conversations WHERE id = \(id.rawValue)", logger: logger).decode(String?.self) {
                    column = value
                }
                let pinned = try ThreadRows.pinned(column)
                let after = change.applied(toPinned: pinned)
                guard after != pinned else { return nil }
                try await connection.query("UPDATE conversations SET pinned = \(ThreadRows.pinnedColumn(after)) WHERE id = \(id.rawValue)", logger: logger)
            case .reactionAdded, .reactionRemoved:
                guard let emoji = change.emoji else { return nil }
                let query: PostgresQuery = change.kind == .reactionAdded
                    ? """
                      INSERT INTO reactions (conversation_id, seq, emoji, user_id, at)
                      VALUES (\(id.rawValue), \(change.seq), \(emoji), \(change.userId.rawValue), \(change.at.millisecondsSince1970))
                      ON CONFLICT DO NOTHING RETURNING 1
                      """
                    : """
                      DELETE FROM reactions WHERE conversation_id = \(id.rawValue) AND seq = \(change.seq) AND emoji = \(emoji) AND user_id = \(change.userId.rawValue)
                      RETURNING 1
                      """
                var changed = false
                for try await _ in try await connection.query(query, logger: logger).decode(Int.self) { changed = true }
                guard changed else { return nil }
                var count = 0
                for try await value in try await connection.query(
                    "SELECT count(*) FROM reactions WHERE conversation_id = \(id.rawValue) AND seq = \(change.seq) AND emoji = \(emoji)", logger: logger
                ).decode(Int.self) { count = value }
                change.count = count
                try await connection.query(
                    """
                    UPDATE messages SET reactions = \(ChangeRows.encodeReactions(change.applied(to: original).reactions))
                    WHERE conversation_id = \(id.rawValue) AND seq = \(change.seq)
                    """, logger: logger)
            }
            var advanced = false
            for try await _ in try await connection.query(
                """
                UPDATE conversations SET last_change_seq = \(change.changeSeq) WHERE id = \(id.rawValue) AND last_change_seq = \(change.changeSeq - 1) RETURNING 1
                """, logger: logger
            ).decode(Int.self) { advanced = true }
            guard advanced else { throw ChatStoreError(.conflict, "change \(change.changeSeq) of \(id) is not the next") }
            var inserted = false
            for try await _ in try await connection.query(
                """
                INSERT INTO message_changes (\(unescaped: ChangeRows.changeColumns()))
                VALUES (\(id.rawValue), \(change.changeSeq), \(change.afterSeq), \(change.seq), \(change.kind.rawValue), \(change.userId.rawValue),
                        \(change.at.millisecondsSince1970), \(change.text), \(change.emoji), \(change.count), \(change.clientChangeId))
                ON CONFLICT DO NOTHING RETURNING 1
                """, logger: logger
            ).decode(Int.self) { inserted = true }
            guard inserted else { throw ChatStoreError(.conflict, "change \(change.changeSeq) of \(id), or its client change ID, is used") }
            return (change, change.applied(to: original))
        }
    }

    public func replies(in id: ConversationID, to seq: Int64, after: Int64, limit: Int) async throws -> [Message] {
        try await fetchMessages(
            """
            SELECT \(unescaped: Self.messageColumns()) FROM messages
            WHERE conversation_id = \(id.rawValue) AND reply_to = \(seq) AND seq > \(after) ORDER BY seq LIMIT \(max(0, limit))
            """)
    }

    public func searchMessages(of user: UserID, terms: [SearchText.Term], in conversation: ConversationID?, window: Int, offset: Int, limit: Int) async throws -> [Message] {
        guard !terms.isEmpty, limit > 0, window > 0 else { return [] }
        let query = Self.tsquery(terms)
        // The short texts from the index that holds their words, the long ones from their rows:
        // each half names its index's condition, so that the planner may use it.
        func matching(_ length: String) -> String {
            """
            SELECT conversation_id, seq, sent_at, search_vector FROM messages
            WHERE conversation_id IN (SELECT conversation_id FROM members WHERE user_id = $1) AND ($2::TEXT IS NULL OR conversation_id = $2)
              AND \(length) AND search_vector @@ to_tsquery('simple', $3)
            """
        }
        var bindings = PostgresBindings()
        bindings.append(user.rawValue)
        bindings.append(conversation?.rawValue)
        bindings.append(query)
        bindings.append(Int64(window))
        bindings.append(Int64(limit))
        bindings.append(Int64(max(0, offset)))
        return try await fetchMessages(PostgresQuery(
            unsafeSQL: """
                SELECT \(Self.messageColumns(of: "m")) FROM (
                    \(matching("length(search_text) <= \(Self.coveredSearchTextMax)"))
                    UNION ALL
                    \(matching("length(search_text) > \(Self.coveredSearchTextMax)"))
                    ORDER BY sent_at DESC, conversation_id DESC, seq DESC LIMIT $4
                ) found JOIN messages m ON m.conversation_id = found.conversation_id AND m.seq = found.seq
                ORDER BY ts_rank(found.search_vector, to_tsquery('simple', $3)) DESC, m.sent_at DESC, m.conversation_id DESC, m.seq DESC
                LIMIT $5 OFFSET $6
                """, binds: bindings))
    }

    /// The terms as a `tsquery` over what ``SearchText/indexable(text:captions:)`` keeps: every
    /// term, a word as a prefix, a run as characters one after the other.
    static func tsquery(_ terms: [SearchText.Term]) -> String {
        func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "''") + "'" }
        return terms.map { term in
            switch term {
            case .word(let word): quoted(word) + (SearchText.findsByBeginning(word) ? ":*" : "")
            case .run(let characters): "(" + characters.map(quoted).joined(separator: " <-> ") + ")"
            }
        }.joined(separator: " & ")
    }

    public func mentions(of user: UserID, before position: MentionPosition?, limit: Int) async throws -> [Message] {
        try await fetchMessages(
            """
            SELECT \(unescaped: Self.messageColumns(of: "m")) FROM mentions x
            JOIN members p ON p.conversation_id = x.conversation_id AND p.user_id = x.user_id
            JOIN messages m ON m.conversation_id = x.conversation_id AND m.seq = x.seq
            WHERE x.user_id = \(user.rawValue) AND m.erased_at IS NULL
              AND (x.sent_at, x.seq, x.conversation_id) < (\(position?.sentAt ?? Int64.max), \(position?.seq ?? Int64.max), \(position?.conversationId.rawValue ?? "\u{10FFFF}"))
            ORDER BY x.sent_at DESC, x.seq DESC, x.conversation_id DESC LIMIT \(max(0, limit))
            """)
    }

    public func messageChanges(in id: ConversationID, after changeSeq: Int64, limit: Int) async throws -> [MessageChange] {
        try await fetchChanges(
            """
            SELECT \(unescaped: ChangeRows.changeColumns()) FROM message_changes
            WHERE conversation_id = \(id.rawValue) AND change_seq > \(changeSeq) ORDER BY change_seq LIMIT \(max(0, limit))
            """)
    }

    public func messageChanges(in id: ConversationID, since: Date, limit: Int) async throws -> [MessageChange] {
        try await fetchChanges(
            """
            SELECT \(unescaped: ChangeRows.changeColumns()) FROM message_changes
            WHERE conversation_id = \(id.rawValue) AND at > \(since.millisecondsSince1970) ORDER BY change_seq DESC LIMIT \(max(0, limit))
            """
        ).reversed()
    }

    public func messageChange(in id: ConversationID, clientChangeId: String) async throws -> MessageChange? {
        try await fetchChanges(
            """
            SELECT \(unescaped: ChangeRows.changeColumns()) FROM message_changes
            WHERE conversation_id = \(id.rawValue) AND client_change_id = \(clientChangeId)
            """
        ).first
    }

    public func messageChanges(for user: UserID, since: Date, after position: ChangePosition?, limit: Int) async throws -> [MessageChange] {
        try await fetchChanges(
            """
            SELECT \(unescaped: ChangeRows.changeColumns(of: "c")) FROM members m JOIN message_changes c ON c.conversation_id = m.conversation_id
            WHERE m.user_id = \(user.rawValue) AND c.at > \(since.millisecondsSince1970)
            AND (c.conversation_id COLLATE "C", c.change_seq) > (\(position?.conversationId.rawValue ?? "") COLLATE "C", \(position?.changeSeq ?? 0))
            ORDER BY c.conversation_id COLLATE "C", c.change_seq LIMIT \(max(0, limit))
            """)
    }

    private func fetchChanges(_ query: PostgresQuery) async throws -> [MessageChange] {
        try await run { client in
            var changes: [MessageChange] = []
            for try await (conversation, changeSeq, afterSeq, seq, kind, user, at, text, emoji, count, clientChangeId) in try await client.query(query, logger: logger)
                .decode((String, Int64, Int64, Int64, String, String, Int64, String?, String?, Int64?, String?).self)
            {
                if let change = ChangeRows.change(
                    conversation: conversation, changeSeq: changeSeq, afterSeq: afterSeq, seq: seq, kind: kind, user: user, at: at, text: text, emoji: emoji,
                    count: count, clientChangeId: clientChangeId)
                {
                    changes.append(change)
                }
            }
            return changes
        }
    }

    public func messageVersions(in id: ConversationID, seq: Int64) async throws -> [MessageVersion] {
        try await run { client in
            var versions: [MessageVersion] = []
            for try await (text, at) in try await client.query(
                "SELECT text, at FROM message_versions WHERE conversation_id = \(id.rawValue) AND seq = \(seq) ORDER BY version", logger: logger
            ).decode((String, Int64).self) { versions.append(MessageVersion(text: text, at: Date(millisecondsSince1970: at))) }
            return versions
        }
    }

    public func reactions(of user: UserID, in id: ConversationID, seqs: ClosedRange<Int64>) async throws -> [HeldReaction] {
        try await run { client in
            var held: [HeldReaction] = []
            for try await (seq, emoji) in try await client.query(
                """
                SELECT seq, emoji FROM reactions WHERE user_id = \(user.rawValue) AND conversation_id = \(id.rawValue)
                AND seq BETWEEN \(seqs.lowerBound) AND \(seqs.upperBound) ORDER BY seq, emoji COLLATE "C"
                """, logger: logger
            ).decode((Int64, String).self) { held.append(HeldReaction(seq: seq, emoji: emoji)) }
            return held
        }
    }

    public func erasures(in id: ConversationID, since: Date, limit: Int) async throws -> [Erasure] {
        try await run { client in
            try await fetchErasures(
                """
                SELECT conversation_id, seq, sender_id, client_message_id, sent_at, erased_at FROM erasures
                WHERE conversation_id = \(id.rawValue) AND erased_at > \(since.millisecondsSince1970) ORDER BY erased_at DESC, seq DESC LIMIT \(max(0, limit))
                """, on: client
            ).reversed()
        }
    }

    private func fetchErasures(_ query: PostgresQuery, on client: PostgresClient) async throws -> [Erasure] {
        var erasures: [Erasure] = []
        for try await (conversation, seq, sender, cmid, sent, erased) in try await client.query(query, logger: logger)
            .decode((String, Int64, String, String, Int64, Int64).self)
        {
            erasures.append(DeletionRows.erasure(conversation: conversation, seq: seq, sender: sender, clientMessageId: cmid, sentAt: sent, erasedAt: erased))
        }
        return erasures
    }

    public func releaseMedia(_ ids: [MediaID]) async throws {
        guard !ids.isEmpty else { return }
        try await transaction { connection in
            try await connection.query("DELETE FROM media_references WHERE media_id = ANY(\(ids.map(\.rawValue)))", logger: logger)
            for id in ids { try await releaseUnused(id.rawValue, connection: connection) }
        }
    }

    public func annotations(in id: ConversationID, seqs: ClosedRange<Int64>) async throws -> [Annotation] {
        try await run { client in
            try await fetchAnnotations(
                """
                SELECT conversation_id, seq, key, value, author_id, annotated_at FROM annotations
                WHERE conversation_id = \(id.rawValue) AND seq BETWEEN \(seqs.lowerBound) AND \(seqs.upperBound) ORDER BY seq, key
                """, on: client)
        }
    }

    private func fetchAnnotations(_ query: PostgresQuery, on client: PostgresClient) async throws -> [Annotation] {
        var annotations: [Annotation] = []
        for try await (conversation, seq, key, value, author, at) in try await client.query(query, logger: logger)
            .decode((String, Int64, String, String, String, Int64).self)
        {
            annotations.append(Annotation(
                conversationId: ConversationID(rawValue: conversation), seq: seq, key: key, value: value, authorId: UserID(rawValue: author),
                at: Date(millisecondsSince1970: at)))
        }
        return annotations
    }

    public func webhookEndpointFirstSeen(_ name: String, at: Date) async throws -> Date {
        try await run { client in
            try await client.query(
                "INSERT INTO webhook_endpoints (name, first_seen_at) VALUES (\(name), \(at.millisecondsSince1970)) ON CONFLICT (name) DO NOTHING",
                logger: logger)
            for try await first in try await client.query("SELECT first_seen_at FROM webhook_endpoints WHERE name = \(name)", logger: logger).decode(Int64.self) {
                return Date(millisecondsSince1970: first)
            }
            return at.millisecondPrecision
        }
    }

    public func webhookCursors(in id: ConversationID) async throws -> [WebhookCursorRecord] {
        try await run { client in
            var cursors: [WebhookCursorRecord] = []
            for try await (endpoint, state, pending) in try await client.query(
                "SELECT endpoint, state, pending FROM webhook_cursors WHERE conversation_id = \(id.rawValue) ORDER BY endpoint", logger: logger
            ).decode((String, String, Bool).self) { cursors.append(WebhookCursorRecord(endpoint: endpoint, state: state, pending: pending)) }
            return cursors
        }
    }

    public func saveWebhookCursor(_ cursor: WebhookCursorRecord, in id: ConversationID, epoch: Int64) async throws {
        try await transaction { connection in
            try await lockAndCheckEpoch(epoch, of: id, connection: connection)
            try await connection.query(
                """
                INSERT INTO webhook_cursors (conversation_id, endpoint, state, pending) VALUES (\(id.rawValue), \(cursor.endpoint), \(cursor.state), \(cursor.pending))
                ON CONFLICT (conversation_id, endpoint) DO UPDATE SET state = excluded.state, pending = excluded.pending
                """, logger: logger)
        }
    }

    public func conversationsOwingWebhooks(limit: Int) async throws -> [ConversationID] {
        try await run { client in
            var ids: [ConversationID] = []
            for try await id in try await client.query(
                "SELECT DISTINCT conversation_id FROM webhook_cursors WHERE pending ORDER BY conversation_id LIMIT \(max(0, limit))", logger: logger
            ).decode(String.self) { ids.append(ConversationID(rawValue: id)) }
            return ids
        }
    }

    public func recentlyChangedConversations(since: Date, limit: Int) async throws -> [ConversationID] {
        try await run { client in
            var ids: [ConversationID] = []
            let since = since.millisecondsSince1970
            for try await id in try await client.query(
                """
                SELECT id FROM conversations WHERE changed_at > \(since)
                UNION SELECT conversation_id FROM members WHERE receipt_at > \(since)
                UNION SELECT conversation_id FROM erasures WHERE erased_at > \(since)
                UNION SELECT conversation_id FROM message_changes WHERE at > \(since)
                ORDER BY 1 LIMIT \(max(0, limit))
                """, logger: logger
            ).decode(String.self) { ids.append(ConversationID(rawValue: id)) }
            return ids
        }
    }

    public func recentChanges(in id: ConversationID, since: Date) async throws -> [RecentChange] {
        try await run { client in
            var changes: [RecentChange] = []
            let since = since.millisecondsSince1970
            for try await (user, at) in try await client.query(
                "SELECT user_id, removed_at FROM removals WHERE conversation_id = \(id.rawValue) AND removed_at > \(since)", logger: logger
            ).decode((String, Int64).self) {
                changes.append(RecentChange(change: .memberRemoved, at: Date(millisecondsSince1970: at), removed: UserID(rawValue: user)))
            }
            for try await (change, at) in try await client.query(
                """
                SELECT last_change, changed_at FROM conversations
                WHERE id = \(id.rawValue) AND changed_at > \(since) AND last_change <> 'member_removed'
                """, logger: logger
            ).decode((String, Int64).self) {
                changes.append(RecentChange(change: ConversationChangeKind(rawValue: change) ?? .updated, at: Date(millisecondsSince1970: at)))
            }
            return changes.sorted { ($0.at, $0.removed?.rawValue ?? "") < ($1.at, $1.removed?.rawValue ?? "") }
        }
    }

    /// A member's unread messages in each of their conversations (``ChatStore/unread(of:)``), as
    /// `u`: a query for a `WHERE m.user_id = …` to follow.
    private static let unreadPerConversation = """
        SELECT greatest(0, c.last_seq - m.read_seq
            - (SELECT count(*) FROM messages t WHERE t.conversation_id = m.conversation_id AND t.seq > m.read_seq AND t.erased_at IS NOT NULL)) AS u
        FROM members m JOIN conversations c ON c.id = m.conversation_id
        """

    public func unread(of user: UserID) async throws -> UnreadCount {
        try await run { client in
            let rows = try await client.query(
                """
                SELECT coalesce(sum(x.u), 0)::BIGINT, count(*) FILTER (WHERE x.u > 0)
                FROM (\(unescaped: Self.unreadPerConversation) WHERE m.user_id = \(user.rawValue)) x
                """, logger: logger)
            for try await (messages, conversations) in rows.decode((Int64, Int64).self) { return UnreadCount(messages: messages, conversations: conversations) }
            return UnreadCount(messages: 0, conversations: 0)
        }
    }

    public func setMuted(_ muted: Bool, for user: UserID, in id: ConversationID, epoch: Int64) async throws -> Bool {
        try await transaction { connection in
            try await lockAndCheckEpoch(epoch, of: id, connection: connection)
            let rows = try await connection.query(
                "UPDATE members SET muted = \(muted) WHERE conversation_id = \(id.rawValue) AND user_id = \(user.rawValue) RETURNING 1", logger: logger)
            for try await _ in rows.decode(Int.self) { return true }
            return false
        }
    }

    private func changed(_ id: ConversationID, _ change: ConversationChangeKind, at: Date, connection: PostgresConnection) async throws {
        try await connection.query(
            "UPDATE conversations SET last_change = \(change.rawValue), changed_at = \(at.millisecondsSince1970) WHERE id = \(id.rawValue)",
            logger: logger)
    }

    public func durableChanges(for user: UserID, since: Date) async throws -> DurableChanges {
        let since = since.millisecondsSince1970
        var changed: [(String, String, Int64)] = []
        var receipts: [DurableChanges.Receipt] = []
        var removed: [(String, Int64)] = []
        var annotations: [Annotation] = []
        var erasures: [Erasure] = []
        try await run { client in
            for try await row in try await client.query(
                """
                SELECT c.id, c.last_change, c.changed_at FROM conversations c JOIN members m ON m.conversation_id = c.id
                WHERE m.user_id = \(user.rawValue) AND c.changed_at > \(since) ORDER BY c.changed_at, c.id
                """, logger: logger
            ).decode((String, String, Int64).self) { changed.append(row) }
            for try await (conversation, member, role, delivered, read, at) in try await client.query(
                """
                SELECT other.conversation_id, other.user_id, other.role, other.delivered_seq, other.read_seq, other.receipt_at
                FROM members mine JOIN members other ON other.conversation_id = mine.conversation_id
                WHERE mine.user_id = \(user.rawValue) AND other.receipt_at > \(since) ORDER BY other.receipt_at
                """, logger: logger
            ).decode((String, String, String, Int64, Int64, Int64).self) {
                receipts.append(.init(
                    conversationId: ConversationID(rawValue: conversation),
                    member: ConversationMember(userId: UserID(rawValue: member), role: MemberRole(rawValue: role) ?? .member, deliveredSeq: delivered, readSeq: read),
                    at: Date(millisecondsSince1970: at)))
            }
            for try await row in try await client.query(
                "SELECT conversation_id, removed_at FROM removals WHERE user_id = \(user.rawValue) AND removed_at > \(since) ORDER BY removed_at",
                logger: logger
            ).decode((String, Int64).self) { removed.append(row) }
            annotations = try await fetchAnnotations(
                """
                SELECT a.conversation_id, a.seq, a.key, a.value, a.author_id, a.annotated_at FROM members m
                JOIN annotations a ON a.conversation_id = m.conversation_id
                WHERE m.user_id = \(user.rawValue) AND a.annotated_at > \(since) ORDER BY a.annotated_at, a.conversation_id, a.seq, a.key
                """, on: client)
            erasures = try await fetchErasures(
                """
                SELECT e.conversation_id, e.seq, e.sender_id, e.client_message_id, e.sent_at, e.erased_at FROM members m
                JOIN erasures e ON e.conversation_id = m.conversation_id
                WHERE m.user_id = \(user.rawValue) AND e.erased_at > \(since) ORDER BY e.erased_at, e.conversation_id, e.seq
                """, on: client)
        }
        let records = try await records(changed.map(\.0) + removed.map(\.0)).reduce(into: [String: ConversationRecord]()) { $0[$1.id.rawValue] = $1 }
        return DurableChanges(
            conversations: changed.compactMap { id, change, at in
                records[id].map { .init(conversation: $0, change: ConversationChangeKind(rawValue: change) ?? .updated, at: Date(millisecondsSince1970: at)) }
            },
            receipts: receipts,
            removals: removed.compactMap { id, at in
                records[id].map { .init(conversation: $0, change: .memberRemoved, at: Date(millisecondsSince1970: at)) }
            },
            annotations: annotations, erasures: erasures)
    }

    public func advanceReceipts(in id: ConversationID, user: UserID, deliveredSeq: Int64, readSeq: Int64, at: Date) async throws -> ConversationMember? {
        try await run { client in
            let rows = try await client.query(
                """
                UPDATE members SET read_seq = GREATEST(read_seq, \(readSeq)), delivered_seq = GREATEST(delivered_seq, \(deliveredSeq), \(readSeq)),
                    receipt_at = CASE WHEN \(readSeq) > read_seq OR GREATEST(\(deliveredSeq), \(readSeq)) > delivered_seq
                                      THEN \(at.millisecondsSince1970) ELSE receipt_at END
                WHERE conversation_id = \(id.rawValue) AND user_id = \(user.rawValue)
                RETURNING role, delivered_seq, read_seq
                """, logger: logger)
            for try await (role, delivered, read) in rows.decode((String, Int64, Int64).self) {
                return ConversationMember(userId: user, role: MemberRole(rawValue: role) ?? .member, deliveredSeq: delivered, readSeq: read)
            }
            return nil
        }
    }

    // MARK: Helpers

    private func lockAndCheckEpoch(_ epoch: Int64, of id: ConversationID, connection: PostgresConnection) async throws {
        var current: Int64?
        for try await value in try await connection.query(
            "SELECT epoch FROM conversations WHERE id = \(id.rawValue) FOR UPDATE", logger: logger
        ).decode(Int64.self) { current = value }
        guard let current else { throw ChatStoreError(.notFound, "no conversation \(id)") }
        guard current == epoch else { throw ChatStoreError(.staleEpoch, "epoch \(epoch) of \(id) is not the current \(current)") }
    }

    private func insertMembers(_ members: [ConversationMember], into id: ConversationID, connection: PostgresConnection) async throws {
        guard !members.isEmpty else { return }
        var next: Int64 = 0
        for try await value in try await connection.query(
            "SELECT COALESCE(MAX(position), -1) + 1 FROM members WHERE conversation_id = \(id.rawValue)", logger: logger
        ).decode(Int64.self) { next = value }
        try await connection.query(
            """
            INSERT INTO members (conversation_id, user_id, role, delivered_seq, read_seq, position)
            SELECT \(id.rawValue), * FROM UNNEST(\(members.map(\.userId.rawValue)), \(members.map(\.role.rawValue)),
                                                 \(members.map(\.deliveredSeq)), \(members.map(\.readSeq)),
                                                 \(members.indices.map { next + Int64($0) }))
            ON CONFLICT (conversation_id, user_id) DO NOTHING
            """, logger: logger)
    }

    /// What ``fetchMessages(_:)`` reads, in its order; each after `table.` when a query joins another table.
    private static func messageColumns(of table: String? = nil) -> String {
        let prefix = table.map { "\($0)." } ?? ""
        return [
            "conversation_id", "seq", "sender_id", "client_message_id", "text", "sent_at", "attachments", "erased_at IS NOT NULL", "edited_at", "deleted_by",
            "reactions", "reply_quote", "mentions", "metadata",
        ]
            .map { prefix + $0 }.joined(separator: ", ")
    }

    private func fetchMessages(_ query: PostgresQuery, on connection: PostgresConnection? = nil) async throws -> [Message] {
        try await run { client in
            var messages: [Message] = []
            let rows = if let connection { try await connection.query(query, logger: logger) } else { try await client.query(query, logger: logger) }
            for try await row in rows.decode((String, Int64, String, String, String, Int64, String?, Bool, Int64?, String?, String?, String?, String?, String?).self) {
                var message = try Self.message((row.0, row.1, row.2, row.3, row.4, row.5, row.6))
                if row.7 { message.erased = true }
                try ChangeRows.apply(editedAt: row.8, deletedBy: row.9, reactions: row.10, to: &message)
                try ThreadRows.apply(replyQuote: row.11, mentions: row.12, to: &message)
                message.metadata = try MetadataRows.metadata(row.13)
                messages.append(message)
            }
            return messages
        }
    }

    private static func message(_ row: (String, Int64, String, String, String, Int64, String?)) throws -> Message {
        Message(
            conversationId: ConversationID(rawValue: row.0), seq: row.1, senderId: UserID(rawValue: row.2),
            clientMessageId: row.3, text: row.4, sentAt: Date(millisecondsSince1970: row.5), attachments: try MediaRows.attachments(row.6))
    }

    /// Runs `body` on the pool; database failures become `unavailable`, store errors pass through.
    private func run<T>(_ body: (PostgresClient) async throws -> T) async throws -> T {
        do {
            return try await pool.operation(body)
        } catch let error as PostgresPool.Away {
            throw ChatStoreError(.unavailable, error.description)
        } catch let error as ChatStoreError {
            throw error
        } catch let error as PostgresTransactionError where error.closureError is ChatStoreError {
            throw error.closureError as? ChatStoreError ?? ChatStoreError(.unavailable, "\(error)")
        } catch {
            throw ChatStoreError(.unavailable, "PostgreSQL (\(description)) failed: \(String(reflecting: error))")
        }
    }

    private func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await run { client in
            try await client.withTransaction(logger: logger) { connection in try await body(connection) }
        }
    }
}
