import CSQLiteSettings
import Foundation
import GRDB
import GRDBSQLite
import Logging
import ParleyModel
import ParleyStore
import Synchronization

/// The embedded store: one SQLite file (WAL mode) that every node of a local cluster may share.
///
/// Every write runs in an IMMEDIATE transaction (the write lock is taken up front, so two
/// processes never deadlock upgrading a read lock), waiting up to `busyTimeout` for another
/// process's transaction. `synchronous=NORMAL` in WAL mode: a committed transaction survives the
/// death of any process (SIGKILL); `synchronous: .full` also survives power loss, at an fsync per
/// commit.
public final class SQLiteChatStore: ChatStore {
    /// How the database is opened.
    public struct Settings: Sendable {
        public enum Synchronous: String, Sendable { case normal = "NORMAL", full = "FULL" }

        public var busyTimeout: Duration = .seconds(10)
        public var synchronous: Synchronous = .normal
        public var readers = 4
        /// Page cache per connection, in KiB: appends land all over the message tree, and every
        /// page missing from the cache is a read.
        public var cacheKiB = 65_536
        /// Bytes of the file read through a memory map (0: none, pages are read with `pread`).
        /// None by default: when several processes share the file (a local cluster), every
        /// transaction that follows another process's commit unmaps the whole map and faults its
        /// pages in again, with a TLB shootdown per unmap; three processes appending 500/s each
        /// into one file took 17 % less CPU without it, and one process alone is no slower.
        public var mmapBytes = 0
        /// WAL pages between automatic checkpoints (SQLite's default, 1,000), when
        /// `backgroundCheckpoint` is nil.
        public var walAutocheckpointPages = 1_000
        /// Page size of a new database file (appends dirty pages at random in the indexes: smaller
        /// pages write less per append). Ignored for an existing file.
        public var pageSize = 4096
        /// When set, automatic checkpoints are off and a thread of this store, on its own
        /// connection, checkpoints this often (``BackgroundCheckpointer``); nil: SQLite's automatic
        /// checkpoints every `walAutocheckpointPages`, after the commit that crosses the mark and
        /// outside its lock — only for a file no other connection writes or checkpoints (a
        /// benchmark's): with others, they meet the race ``BackgroundCheckpointer`` describes.
        public var backgroundCheckpoint: Duration? = .milliseconds(50)

        public init() {}
    }

    public let path: String
    let pool: DatabasePool
    private let logger: Logger
    private let checkpointer: BackgroundCheckpointer?

    /// Turns off SQLite's memory statistics for the process: with them on (SQLite's default),
    /// every SQLite allocation and free takes a process-wide mutex to keep counts nothing here
    /// reads — about 94 of each per message at one message per commit, whose mutex calls and
    /// counting cost 30,000 of a message's 979,000 instructions (callgrind, one node). Process-wide
    /// and not thread-safe: a program calls it once at start, before anything opens a database;
    /// false when SQLite was already in use (the setting is then unchanged).
    public static func turnOffMemoryStatistics() -> Bool {
        parley_sqlite_turn_off_memory_statistics() == SQLITE_OK
    }

    /// Opens (creating if needed) the database at `path`. Several processes may do this at once:
    /// switching a new file to WAL can fail with SQLITE_BUSY while another process opens it, so the
    /// open is retried (50 × 20 ms).
    public init(path: String, settings: Settings = Settings(), logger: Logger = Logger(label: "parley.store.sqlite")) throws {
        self.path = path
        self.logger = logger
        var configuration = Configuration()
        configuration.busyMode = Self.pollingBusyMode(giveUpAfter: settings.busyTimeout)
        configuration.maximumReaderCount = settings.readers
        let pragmas = [
            "synchronous = \(settings.synchronous.rawValue)", "foreign_keys = ON", "cache_size = -\(settings.cacheKiB)",
            "mmap_size = \(settings.mmapBytes)",
            "wal_autocheckpoint = \(settings.backgroundCheckpoint == nil ? settings.walAutocheckpointPages : 0)",
            "journal_size_limit = \(64 << 20)",
        ]
        configuration.prepareDatabase { db in
            for pragma in pragmas { try db.execute(sql: "PRAGMA \(pragma)") }
            SearchRank.register(db)
        }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var attempt = 0
        while true {
            do {
                try Self.createIfMissing(path: path, pageSize: settings.pageSize)
                pool = try DatabasePool(path: path, configuration: configuration)
                break
            } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY && attempt < 50 {
                attempt += 1
                Thread.sleep(forTimeInterval: 0.02)
            }
        }
        let writer = pool
        checkpointer = try settings.backgroundCheckpoint.map { try BackgroundCheckpointer(path: path, writer: writer, every: $0, logger: logger) }
    }

    deinit {
        stopBackgroundWork()
    }

    /// Stops the background checkpoints (as dropping the store does): for a store that others may
    /// still hold when its file is about to go away.
    public func stopBackgroundWork() {
        checkpointer?.stop()
    }

    /// Background checkpoints begun so far: one a round while commits come, none while none do.
    public var backgroundCheckpoints: Int { checkpointer?.checkpoints.load(ordering: .relaxed) ?? 0 }

    /// Waits for a lock held by another connection by polling it every 100 µs for the first 20 ms,
    /// then every millisecond, until `giveUpAfter`. SQLite's own busy timeout sleeps 1, 2, 5, 10,
    /// 15… ms between attempts: a commit that found the background checkpoint holding the write
    /// lock for 3 ms slept until 18 or 33 ms — the open-loop p99 — while the lock sat free.
    static func pollingBusyMode(giveUpAfter limit: Duration) -> Database.BusyMode {
        let fineTries = 200
        return .callback { (tries: Int) -> Bool in
            let fine = tries < fineTries
            let waited: Duration = fine ? .microseconds(100 * tries) : .milliseconds(20) + .milliseconds(tries - fineTries)
            guard waited < limit else { return false }
            usleep(fine ? 100 : 1_000)
            return true
        }
    }

    /// A new file gets its page size and WAL mode once, before any pool opens it (switching a
    /// fresh file to WAL while another process opens it fails with SQLITE_BUSY).
    private static func createIfMissing(path: String, pageSize: Int) throws {
        guard !FileManager.default.fileExists(atPath: path) else { return }
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        try queue.writeWithoutTransaction { db in
            if try Int.fetchOne(db, sql: "PRAGMA page_count") == 0 {
                try db.execute(sql: "PRAGMA page_size = \(pageSize)")
            }
            try db.execute(sql: "PRAGMA journal_mode = WAL")
        }
        try queue.close()
    }

    // MARK: Schema

    public func migrate() async throws {
        try await migrate(upTo: nil)
    }

    /// The schema migrations in order, by name.
    public static let migrationNames = [
        "v1: conversations, members, messages", "v2: users, token revocations", "v3: change stamps for resuming event streams",
        "v4: the idempotency index in clientMessageId order", "v5: messages in commit order, indexed per conversation behind the commits",
        "v6: one index entry per 64 messages of a conversation, written by the commit",
        "v7: devices for push notifications",
        "v8: members may mute a conversation",
        "v9: push notifications owed, for the owner after a failover",
        "v10: webhook endpoints and where each conversation's events to them have got to",
        "v11: users may be bots",
        "v12: bots' annotations of messages",
        "v13: uploads' descriptions",
        "v14: messages' attachments, and which conversations may download an upload",
        "v15: uploads never attached, for the sweeper",
        "v16: sessions, and when a password changed",
        "v17: users' blocks",
        "v18: reports, and suspended users",
        "v19: account deletions, and erased messages",
        "v20: changes to messages: edits, deletions for everyone, reactions",
        "v21: replies, mentions and pins",
        "v22: display names found by prefix",
        "v23: profile and group photos, and profile changes told to webhooks",
        "v24: apps' own fields on users, conversations, members and messages",
        "v25: messages found by their words",
    ]

    /// Applies the migrations not yet applied, up to and including `last` (a name from
    /// ``migrationNames``; nil: all of them). Tests stop early to check a later one on old data.
    public func migrate(upTo last: String?) async throws {
        var migrator = DatabaseMigrator()
        migrator.registerMigration(Self.migrationNames[0]) { db in
            try db.execute(sql: """
                CREATE TABLE conversations (
                    id TEXT PRIMARY KEY NOT NULL,
                    kind TEXT NOT NULL,
                    name TEXT,
                    owner_id TEXT NOT NULL,
                    last_seq INTEGER NOT NULL DEFAULT 0,
                    epoch INTEGER NOT NULL DEFAULT 0,
                    created_at INTEGER NOT NULL,
                    last_activity_at INTEGER NOT NULL
                );
                CREATE TABLE members (
                    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                    user_id TEXT NOT NULL,
                    role TEXT NOT NULL,
                    delivered_seq INTEGER NOT NULL DEFAULT 0,
                    read_seq INTEGER NOT NULL DEFAULT 0,
                    position INTEGER NOT NULL,
                    PRIMARY KEY (conversation_id, user_id)
                ) WITHOUT ROWID;
                CREATE INDEX members_by_user ON members(user_id);
                CREATE TABLE messages (
                    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                    seq INTEGER NOT NULL,
                    sender_id TEXT NOT NULL,
                    client_message_id TEXT NOT NULL,
                    text TEXT NOT NULL,
                    sent_at INTEGER NOT NULL,
                    PRIMARY KEY (conversation_id, seq),
                    UNIQUE (conversation_id, client_message_id)
                ) WITHOUT ROWID;
                """)
        }
        migrator.registerMigration(Self.migrationNames[1]) { db in
            try db.execute(sql: """
                CREATE TABLE users (
                    id TEXT PRIMARY KEY NOT NULL,
                    handle TEXT NOT NULL UNIQUE,
                    password_hash TEXT NOT NULL,
                    display_name TEXT NOT NULL,
                    avatar_url TEXT,
                    created_at INTEGER NOT NULL
                );
                CREATE TABLE token_revocations (
                    token_id TEXT PRIMARY KEY NOT NULL,
                    expires_at INTEGER NOT NULL
                );
                CREATE INDEX conversations_by_activity ON conversations(last_activity_at, id);
                """)
        }
        migrator.registerMigration(Self.migrationNames[2]) { db in
            try db.execute(sql: """
                ALTER TABLE conversations ADD COLUMN last_change TEXT NOT NULL DEFAULT 'created';
                ALTER TABLE conversations ADD COLUMN changed_at INTEGER NOT NULL DEFAULT 0;
                UPDATE conversations SET changed_at = created_at;
                ALTER TABLE members ADD COLUMN receipt_at INTEGER NOT NULL DEFAULT 0;
                CREATE TABLE removals (
                    user_id TEXT NOT NULL,
                    removed_at INTEGER NOT NULL,
                    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                    PRIMARY KEY (user_id, removed_at, conversation_id)
                ) WITHOUT ROWID;
                """)
        }
        migrator.registerMigration(Self.migrationNames[3]) { db in
            // Unique on (clientMessageId, conversation) rather than (conversation, clientMessageId):
            // clients make time-ordered IDs, so every append's index entry lands on the same last
            // page instead of a page of its own conversation — into 1,000 conversations that was
            // one more page of WAL, and of checkpoint, per append.
            try db.execute(sql: """
                CREATE TABLE messages_v4 (
                    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                    seq INTEGER NOT NULL,
                    sender_id TEXT NOT NULL,
                    client_message_id TEXT NOT NULL,
                    text TEXT NOT NULL,
                    sent_at INTEGER NOT NULL,
                    PRIMARY KEY (conversation_id, seq)
                ) WITHOUT ROWID;
                INSERT INTO messages_v4 (conversation_id, seq, sender_id, client_message_id, text, sent_at)
                    SELECT conversation_id, seq, sender_id, client_message_id, text, sent_at FROM messages;
                DROP TABLE messages;
                ALTER TABLE messages_v4 RENAME TO messages;
                CREATE UNIQUE INDEX messages_by_client_message_id ON messages(client_message_id, conversation_id);
                """)
        }
        migrator.registerMigration(Self.migrationNames[4]) { db in
            // Messages were clustered by (conversation, seq): into 1,000 conversations every append
            // of a commit dirtied a page of its own, ~1.7 MB of WAL per 256 appends. Now a commit
            // appends them in commit order to `message_log` (its last pages), each linked to its
            // conversation's previous message, and an indexer added them to `message_index`
            // afterwards, sorted, many of a conversation at once (v6 replaced it). Messages are
            // never deleted, so ids only grow.
            // The same migration drops the activity index (no query uses it; each append moved its
            // conversation's entry) and makes members a rowid table: the sender's watermarks,
            // updated with every append, are then rewritten in place rather than deleted and
            // reinserted in a clustered tree.
            try db.execute(sql: """
                CREATE TABLE message_log (
                    id INTEGER PRIMARY KEY,
                    conversation_id TEXT NOT NULL REFERENCES conversations(id),
                    seq INTEGER NOT NULL,
                    sender_id TEXT NOT NULL,
                    client_message_id TEXT NOT NULL,
                    text TEXT NOT NULL,
                    sent_at INTEGER NOT NULL,
                    previous INTEGER
                );
                INSERT INTO message_log (conversation_id, seq, sender_id, client_message_id, text, sent_at)
                    SELECT conversation_id, seq, sender_id, client_message_id, text, sent_at FROM messages ORDER BY conversation_id, seq;
                UPDATE message_log SET previous = id - 1
                    WHERE seq > 1 AND (SELECT p.conversation_id FROM message_log p WHERE p.id = message_log.id - 1) = conversation_id;
                DROP TABLE messages;
                CREATE UNIQUE INDEX message_log_by_client_message_id ON message_log(client_message_id, conversation_id);
                CREATE TABLE message_index (
                    conversation_id TEXT NOT NULL,
                    seq INTEGER NOT NULL,
                    message INTEGER NOT NULL,
                    PRIMARY KEY (conversation_id, seq)
                ) WITHOUT ROWID;
                INSERT INTO message_index (conversation_id, seq, message) SELECT conversation_id, seq, id FROM message_log;
                CREATE TABLE message_index_progress (
                    only INTEGER PRIMARY KEY CHECK (only = 0),
                    indexed_through INTEGER NOT NULL
                );
                INSERT INTO message_index_progress (only, indexed_through) SELECT 0, coalesce(max(id), 0) FROM message_log;
                ALTER TABLE conversations ADD COLUMN last_message INTEGER;
                UPDATE conversations SET last_message = (
                    SELECT i.message FROM message_index i WHERE i.conversation_id = conversations.id AND i.seq = conversations.last_seq);
                DROP INDEX conversations_by_activity;
                CREATE TABLE members_v5 (
                    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                    user_id TEXT NOT NULL,
                    role TEXT NOT NULL,
                    delivered_seq INTEGER NOT NULL DEFAULT 0,
                    read_seq INTEGER NOT NULL DEFAULT 0,
                    position INTEGER NOT NULL,
                    receipt_at INTEGER NOT NULL DEFAULT 0,
                    PRIMARY KEY (conversation_id, user_id)
                );
                INSERT INTO members_v5 (conversation_id, user_id, role, delivered_seq, read_seq, position, receipt_at)
                    SELECT conversation_id, user_id, role, delivered_seq, read_seq, position, receipt_at FROM members;
                DROP TABLE members;
                ALTER TABLE members_v5 RENAME TO members;
                CREATE INDEX members_by_user ON members(user_id);
                """)
        }
        migrator.registerMigration(Self.migrationNames[5]) { db in
            // v5's index had an entry per message, written behind the commits by a pass every
            // 500 ms that was the open-loop tail into 1,000 conversations; one entry per block of
            // 64 is written by the commit that fills the block (MessageBlocks). Built from the
            // log, which also holds what v5's indexer had not reached.
            try db.execute(sql: """
                CREATE TABLE message_blocks (
                    conversation_id TEXT NOT NULL,
                    block INTEGER NOT NULL,
                    message INTEGER NOT NULL,
                    PRIMARY KEY (conversation_id, block)
                ) WITHOUT ROWID;
                INSERT INTO message_blocks (conversation_id, block, message)
                    SELECT conversation_id, seq / \(MessageBlocks.size) - 1, id FROM message_log WHERE seq % \(MessageBlocks.size) = 0;
                DROP TABLE message_index;
                DROP TABLE message_index_progress;
                """)
        }
        migrator.registerMigration(Self.migrationNames[6]) { db in
            for statement in DeviceRows.migration { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[7]) { db in
            try db.execute(sql: "ALTER TABLE members ADD COLUMN muted INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration(Self.migrationNames[8]) { db in
            try db.execute(sql: """
                ALTER TABLE conversations ADD COLUMN pushes_owed_from INTEGER;
                CREATE INDEX conversations_owing_pushes ON conversations(id) WHERE pushes_owed_from IS NOT NULL;
                """)
        }
        migrator.registerMigration(Self.migrationNames[9]) { db in
            try db.execute(sql: """
                CREATE TABLE webhook_endpoints (name TEXT PRIMARY KEY NOT NULL, first_seen_at INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TABLE webhook_cursors (
                    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                    endpoint TEXT NOT NULL,
                    state TEXT NOT NULL,
                    pending INTEGER NOT NULL,
                    PRIMARY KEY (conversation_id, endpoint)
                ) WITHOUT ROWID;
                CREATE INDEX webhook_cursors_pending ON webhook_cursors(conversation_id) WHERE pending;
                """)
        }
        migrator.registerMigration(Self.migrationNames[10]) { db in
            try db.execute(sql: "ALTER TABLE users ADD COLUMN bot INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration(Self.migrationNames[11]) { db in
            try db.execute(sql: """
                CREATE TABLE annotations (
                    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                    seq INTEGER NOT NULL,
                    key TEXT NOT NULL,
                    value TEXT NOT NULL,
                    author_id TEXT NOT NULL,
                    annotated_at INTEGER NOT NULL,
                    PRIMARY KEY (conversation_id, seq, key)
                ) WITHOUT ROWID;
                CREATE INDEX annotations_by_time ON annotations(conversation_id, annotated_at);
                """)
        }
        migrator.registerMigration(Self.migrationNames[12]) { db in
            for statement in MediaRows.migration { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[13]) { db in
            try db.execute(sql: "ALTER TABLE message_log ADD COLUMN attachments TEXT")
            for statement in MediaRows.referencesMigration { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[14]) { db in
            for statement in MediaRows.sweepMigration { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[15]) { db in
            for statement in SessionRows.migration { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[16]) { db in
            for statement in BlockRows.migration { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[17]) { db in
            for statement in ReportRows.migration { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[18]) { db in
            for statement in DeletionRows.migration(messagesTable: "message_log") { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[19]) { db in
            for statement in ChangeRows.migration(messagesTable: "message_log") { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[20]) { db in
            for statement in ThreadRows.migration(messagesTable: "message_log") { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[21]) { db in
            for statement in UserNameRows.migration(keyType: "TEXT") { try db.execute(sql: statement) }
            for row in try Row.fetchAll(db, sql: "SELECT id, display_name FROM users WHERE deleted_at IS NULL") {
                try Self.nameUser(UserID(rawValue: try row.decode(atIndex: 0)), try row.decode(atIndex: 1), db: db)
            }
        }
        migrator.registerMigration(Self.migrationNames[22]) { db in
            for statement in PhotoRows.migration { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[23]) { db in
            for statement in MetadataRows.migration(messagesTable: "message_log") { try db.execute(sql: statement) }
        }
        migrator.registerMigration(Self.migrationNames[24]) { db in
            // Each live message's words under its row's ID, its conversation's as one more word
            // (``SearchRows/scopeToken(_:)``) in a column ranking ignores. Every word of a query
            // is found by its beginning: the 2- and 3-letter beginnings are indexed too.
            try db.execute(sql: "CREATE VIRTUAL TABLE message_search USING fts5(body, scope, tokenize = 'unicode61 remove_diacritics 2', prefix = '2 3')")
            let rows = try Row.fetchCursor(db, sql: "SELECT * FROM message_log WHERE erased_at IS NULL")
            while let row = try rows.next() {
                try Self.index(try Self.message(from: row), row: try row.decode(forColumn: "id"), db: db)
            }
        }
        // Several processes may start at once on one file: one of them applies a migration, the
        // others may fail on the race and find it applied when they try again.
        var attempt = 0
        while true {
            do {
                if let last { try migrator.migrate(pool, upTo: last) } else { try migrator.migrate(pool) }
                return
            } catch {
                attempt += 1
                guard attempt < 5 else { throw ChatStoreError(.unavailable, "cannot migrate \(path): \(error)") }
                try await Task.sleep(for: .milliseconds(50 * attempt))
            }
        }
    }

    // MARK: Conversations

    public func createConversation(_ record: ConversationRecord) async throws {
        try await write { db in
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM conversations WHERE id = ?", arguments: [record.id.rawValue]) == true {
                throw ChatStoreError(.conflict, "conversation \(record.id) exists")
            }
            try db.execute(
                sql: """
                    INSERT INTO conversations (id, kind, name, owner_id, last_seq, epoch, created_at, last_activity_at, last_change, changed_at)
                    VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?7, 'created', ?6)
                    """,
                arguments: [
                    record.id.rawValue, record.kind.rawValue, record.name, record.ownerId.rawValue, record.lastSeq,
                    record.createdAt.millisecondsSince1970, record.lastActivityAt.millisecondsSince1970,
                ])
            try Self.insertMembers(record.members, into: record.id, db: db)
        }
    }

    public func conversation(_ id: ConversationID) async throws -> ConversationRecord? {
        try await read { db in try Self.conversation(id, db: db) }
    }

    private static func conversation(_ id: ConversationID, db: Database) throws -> ConversationRecord? {
        do {
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM conversations WHERE id = ?", arguments: [id.rawValue]) else {
                return nil
            }
            let rows = try Row.fetchAll(db, sql: "SELECT * FROM members WHERE conversation_id = ? ORDER BY position", arguments: [id.rawValue])
            let members = try rows.map { try Self.member(from: $0) }
            let mutedBy = try rows.filter { try $0.decode(Bool.self, forColumn: "muted") }.map { UserID(rawValue: try $0.decode(forColumn: "user_id")) }
            var record = ConversationRecord(
                id: id, kind: ConversationKind(rawValue: try row.decode(forColumn: "kind")) ?? .group, name: try row.decode(forColumn: "name"), ownerId: UserID(rawValue: try row.decode(forColumn: "owner_id")),
                lastSeq: try row.decode(forColumn: "last_seq"), createdAt: Date(millisecondsSince1970: try row.decode(forColumn: "created_at")),
                lastActivityAt: Date(millisecondsSince1970: try row.decode(forColumn: "last_activity_at")), members: members, mutedBy: mutedBy.sorted(),
                lastChangeSeq: try row.decode(forColumn: "last_change_seq"), pinned: try ThreadRows.pinned(try row.decode(forColumn: "pinned")),
                photo: try PhotoRows.photo(try row.decode(forColumn: "photo")))
            record.metadata = try MetadataRows.metadata(try row.decode(forColumn: "metadata"))
            return record
        }
    }

    // MARK: Users

    public func createUser(_ user: StoredUser, reclaimingHandlesDeletedBefore quarantineEnded: Date) async throws {
        try await write { db in
            try db.execute(
                sql: "UPDATE users SET handle = '~' || id WHERE handle = ? AND deleted_at < ?",
                arguments: [user.user.handle, quarantineEnded.millisecondsSince1970])
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM users WHERE id = ? OR handle = ?", arguments: [user.user.id.rawValue, user.user.handle]) == true {
                throw ChatStoreError(.conflict, "handle \(user.user.handle) is taken")
            }
            try db.execute(
                sql: "INSERT INTO users (id, handle, password_hash, display_name, avatar_url, created_at, bot) VALUES (?, ?, ?, ?, ?, ?, ?)",
                arguments: [user.user.id.rawValue, user.user.handle, user.passwordHash, user.user.displayName, user.user.avatarURL,
                            user.user.createdAt.millisecondsSince1970, user.user.bot])
            if user.deletion == nil { try Self.nameUser(user.user.id, user.user.displayName, db: db) }
        }
    }

    /// `user`'s name keys become those of `displayName` (none for an empty one).
    private static func nameUser(_ user: UserID, _ displayName: String, db: Database) throws {
        try db.execute(sql: "DELETE FROM user_names WHERE user_id = ?", arguments: [user.rawValue])
        for key in User.nameKeys(displayName) {
            try db.execute(sql: "INSERT OR IGNORE INTO user_names (name_key, user_id) VALUES (?, ?)", arguments: [key, user.rawValue])
        }
    }

    public func user(id: UserID) async throws -> StoredUser? {
        try await read { db in try Row.fetchOne(db, sql: "SELECT * FROM users WHERE id = ?", arguments: [id.rawValue]).map { try Self.storedUser(from: $0) } }
    }

    public func users(_ ids: [UserID]) async throws -> [User] {
        guard !ids.isEmpty else { return [] }
        let found = try await read { db in
            let placeholders = Array(repeating: "?", count: ids.count).joined(separator: ",")
            return try Row.fetchAll(db, sql: "SELECT * FROM users WHERE id IN (\(placeholders))", arguments: StatementArguments(ids.map(\.rawValue)))
                .map { try Self.storedUser(from: $0).user }
        }
        return StoredUser.inOrder(found, asked: ids)
    }

    public func user(handle: String) async throws -> StoredUser? {
        try await read { db in try Row.fetchOne(db, sql: "SELECT * FROM users WHERE handle = ? AND deleted_at IS NULL", arguments: [handle]).map { try Self.storedUser(from: $0) } }
    }

    public func updateProfile(
        of id: UserID, displayName: String?, avatarURL: String?, metadata: Metadata?, privateMetadata: Metadata?, at: Date
    ) async throws -> User? {
        try await write { db in
            if avatarURL != nil {
                guard try Self.setAvatar(of: id, to: nil, db: db) else { return nil }
            }
            // Private fields alone are no change anyone else hears of.
            let counts = displayName != nil || avatarURL != nil || metadata != nil
            guard let row = try Row.fetchOne(
                db,
                sql: """
                    UPDATE users SET display_name = coalesce(?1, display_name), avatar_url = coalesce(?2, avatar_url),
                        metadata = CASE WHEN ?3 THEN ?4 ELSE metadata END, private_metadata = CASE WHEN ?5 THEN ?6 ELSE private_metadata END,
                        profile_version = profile_version + ?7, profile_changed_at = CASE WHEN ?7 > 0 THEN ?8 ELSE profile_changed_at END
                    WHERE id = ?9 AND deleted_at IS NULL RETURNING *
                    """,
                arguments: [
                    displayName, avatarURL, metadata != nil, Metadata.column(metadata), privateMetadata != nil, Metadata.column(privateMetadata),
                    counts ? 1 : 0, at.millisecondsSince1970, id.rawValue,
                ])
            else { return nil }
            if let displayName { try Self.nameUser(id, displayName, db: db) }
            return try Self.storedUser(from: row).user
        }
    }

    public func privateMetadata(of id: UserID) async throws -> Metadata? {
        try await read { db in
            try MetadataRows.metadata(try String.fetchOne(db, sql: "SELECT private_metadata FROM users WHERE id = ? AND deleted_at IS NULL", arguments: [id.rawValue]))
        }
    }

    public func setAvatar(of id: UserID, to media: MediaID?, at: Date) async throws -> User? {
        try await write { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM users WHERE id = ? AND deleted_at IS NULL", arguments: [id.rawValue]) else { return nil }
            let user = try Self.storedUser(from: row).user
            guard user.avatar?.id != media || user.avatarURL != nil else { return user }
            _ = try Self.setAvatar(of: id, to: media, db: db)
            guard let changed = try Row.fetchOne(
                db,
                sql: "UPDATE users SET avatar_url = NULL, profile_version = profile_version + 1, profile_changed_at = ? WHERE id = ? RETURNING *",
                arguments: [at.millisecondsSince1970, id.rawValue])
            else { return nil }
            return try Self.storedUser(from: changed).user
        }
    }

    /// The user's avatar becomes upload `media` (nil: none), the one before handed back to the
    /// sweeper unless something else uses it. False if there is no such user (or it is deleted);
    /// throws `notFound` for an upload the sweeper removed.
    private static func setAvatar(of id: UserID, to media: MediaID?, db: Database) throws -> Bool {
        guard let before = try Row.fetchOne(db, sql: "SELECT avatar_media_id FROM users WHERE id = ? AND deleted_at IS NULL", arguments: [id.rawValue]) else {
            return false
        }
        let previous: String? = try before.decode(atIndex: 0)
        var photo: Media?
        if let media {
            guard let row = try Row.fetchOne(db, sql: "UPDATE media SET referenced = TRUE WHERE id = ? RETURNING *", arguments: [media.rawValue]) else {
                throw ChatStoreError(.notFound, "no upload \(media)")
            }
            photo = try storedMedia(from: row).media
        }
        try db.execute(
            sql: "UPDATE users SET avatar = ?, avatar_media_id = ? WHERE id = ?",
            arguments: [PhotoRows.column(photo), media?.rawValue, id.rawValue])
        if let previous, previous != media?.rawValue { try db.execute(sql: PhotoRows.releaseUnused("?1"), arguments: [previous]) }
        return true
    }

    public func untoldProfiles(limit: Int) async throws -> [UntoldProfile] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM users WHERE profile_version > profile_told ORDER BY profile_changed_at, id LIMIT ?", arguments: [max(0, limit)]
            ).map { row in
                UntoldProfile(
                    user: try Self.storedUser(from: row).user, version: try row.decode(forColumn: "profile_version"),
                    changedAt: Date(millisecondsSince1970: (try row.decode(forColumn: "profile_changed_at") as Int64?) ?? 0))
            }
        }
    }

    public func profileTold(_ user: UserID, through version: Int64) async throws {
        try await write { db in
            try db.execute(sql: "UPDATE users SET profile_told = max(profile_told, ?) WHERE id = ?", arguments: [version, user.rawValue])
        }
    }

    public func searchUsers(prefix: String, limit: Int) async throws -> [User] {
        let handle = prefix.lowercased(), key = User.nameKey(prefix)
        return try await read { db in
            // Handles are ASCII below 0x7F: [prefix, prefix + DEL) is exactly the handles with the prefix.
            let handles = try Row.fetchAll(
                db, sql: "SELECT * FROM users WHERE handle >= ? AND handle < ? AND deleted_at IS NULL ORDER BY handle LIMIT ?",
                arguments: [handle, handle + "\u{7F}", max(0, limit)]
            ).map { try Self.storedUser(from: $0).user }
            guard !key.isEmpty, handles.count < limit else { return handles }
            let range = UserNameRows.range(startingWith: key)
            // A name matches by at most its first few words: room for a user found twice.
            let names = try Row.fetchAll(
                db,
                sql: """
                    SELECT u.* FROM user_names n JOIN users u ON u.id = n.user_id
                    WHERE n.name_key >= ? AND n.name_key < ? AND u.deleted_at IS NULL ORDER BY n.name_key, n.user_id LIMIT ?
                    """,
                arguments: [range.lower, range.upper, max(0, limit) * 2]
            ).map { try Self.storedUser(from: $0).user }
            return UserNameRows.merged(handles: handles, names: names, limit: limit)
        }
    }

    public func existingUsers(_ ids: [UserID]) async throws -> Set<UserID> {
        guard !ids.isEmpty else { return [] }
        return try await read { db in
            let placeholders = Array(repeating: "?", count: ids.count).joined(separator: ",")
            let found = try String.fetchAll(db, sql: "SELECT id FROM users WHERE id IN (\(placeholders)) AND deleted_at IS NULL", arguments: StatementArguments(ids.map(\.rawValue)))
            return Set(found.map(UserID.init(rawValue:)))
        }
    }

    public func revokeToken(_ tokenID: String, expiresAt: Date) async throws {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO token_revocations (token_id, expires_at) VALUES (?, ?) ON CONFLICT (token_id) DO NOTHING",
                arguments: [tokenID, expiresAt.millisecondsSince1970])
            try db.execute(sql: "DELETE FROM sessions WHERE token_id = ?", arguments: [tokenID])
        }
    }

    public func isTokenRevoked(_ tokenID: String) async throws -> Bool {
        try await read { db in try Bool.fetchOne(db, sql: "SELECT 1 FROM token_revocations WHERE token_id = ?", arguments: [tokenID]) ?? false }
    }

    // MARK: Blocks

    public func block(_ block: Block, at: Date) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO blocks (blocker_id, blocked_id, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                arguments: [block.blocker.rawValue, block.blocked.rawValue, at.millisecondsSince1970])
            return db.changesCount == 1
        }
    }

    public func unblock(_ block: Block) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM blocks WHERE blocker_id = ? AND blocked_id = ?", arguments: [block.blocker.rawValue, block.blocked.rawValue])
            return db.changesCount == 1
        }
    }

    public func blocks(involving user: UserID) async throws -> [StoredBlock] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM blocks WHERE blocker_id = ?1 UNION ALL SELECT * FROM blocks WHERE blocked_id = ?1 AND blocker_id <> ?1
                    ORDER BY created_at DESC, blocker_id DESC, blocked_id DESC
                    """,
                arguments: [user.rawValue]
            ).map { row in BlockRows.block(blocker: row["blocker_id"], blocked: row["blocked_id"], at: row["created_at"]) }
        }
    }

    public func blocks(among users: [UserID]) async throws -> Set<Block> {
        guard users.count > 1 else { return [] }
        return try await read { db in
            let placeholders = Array(repeating: "?", count: users.count).joined(separator: ",")
            let ids = users.map(\.rawValue)
            return Set(try Row.fetchAll(
                db, sql: "SELECT blocker_id, blocked_id FROM blocks WHERE blocker_id IN (\(placeholders)) AND blocked_id IN (\(placeholders))",
                arguments: StatementArguments(ids + ids)
            ).map { row in Block(blocker: UserID(rawValue: row["blocker_id"]), blocked: UserID(rawValue: row["blocked_id"])) })
        }
    }

    // MARK: Reports and suspensions

    public func fileReport(_ report: Report) async throws -> (report: Report, created: Bool) {
        let document = try ReportRows.document(report)
        let target = ReportRows.target(of: report)
        return try await write { db in
            if let open = try String.fetchOne(
                db, sql: "SELECT document FROM reports WHERE reporter_id = ? AND target = ? AND status = 'open' ORDER BY created_at, id LIMIT 1",
                arguments: [report.reporterId.rawValue, target])
            {
                return (try ReportRows.report(open), false)
            }
            try db.execute(
                sql: "INSERT INTO reports (id, reporter_id, target, status, created_at, webhooks_owed, document) VALUES (?, ?, ?, 'open', ?, 1, ?)",
                arguments: [report.id.rawValue, report.reporterId.rawValue, target, report.createdAt.millisecondsSince1970, document])
            return (try ReportRows.report(document), true)
        }
    }

    public func report(_ id: ReportID) async throws -> Report? {
        try await read { db in try String.fetchOne(db, sql: "SELECT document FROM reports WHERE id = ?", arguments: [id.rawValue]).map(ReportRows.report) }
    }

    public func reports(status: ReportStatus?, after: ReportID?, limit: Int) async throws -> [Report] {
        try await read { db in
            var sql = "SELECT document FROM reports WHERE 1 = 1"
            var arguments: [(any DatabaseValueConvertible)?] = []
            if let status {
                sql += " AND status = ?"
                arguments.append(status.rawValue)
            }
            if let after {
                sql += " AND (created_at, id) > (SELECT created_at, id FROM reports WHERE id = ?)"
                arguments.append(after.rawValue)
            }
            sql += " ORDER BY created_at, id LIMIT ?"
            arguments.append(max(0, limit))
            return try String.fetchAll(db, sql: sql, arguments: StatementArguments(arguments)).map(ReportRows.report)
        }
    }

    public func resolveReport(_ id: ReportID, resolution: String?, at: Date) async throws -> Report? {
        try await write { db in
            guard let document = try String.fetchOne(db, sql: "SELECT document FROM reports WHERE id = ?", arguments: [id.rawValue]) else { return nil }
            var report = try ReportRows.report(document)
            guard report.status == .open else { return report }
            report.status = .resolved
            report.resolvedAt = at.millisecondPrecision
            report.resolution = resolution
            try db.execute(
                sql: "UPDATE reports SET status = 'resolved', document = ? WHERE id = ?", arguments: [try ReportRows.document(report), id.rawValue])
            return report
        }
    }

    public func reportsOwingWebhooks(limit: Int) async throws -> [Report] {
        try await read { db in
            try String.fetchAll(db, sql: "SELECT document FROM reports WHERE webhooks_owed ORDER BY created_at, id LIMIT ?", arguments: [max(0, limit)])
                .map(ReportRows.report)
        }
    }

    public func reportWebhooksDone(_ id: ReportID) async throws {
        try await write { db in try db.execute(sql: "UPDATE reports SET webhooks_owed = 0 WHERE id = ?", arguments: [id.rawValue]) }
    }

    public func setSuspended(_ user: UserID, since: Date?) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "UPDATE users SET suspended_at = ? WHERE id = ?", arguments: [since?.millisecondsSince1970, user.rawValue])
            return db.changesCount == 1
        }
    }

    // MARK: Account deletion

    public func beginDeletion(of user: UserID, erase: Bool, at: Date) async throws -> AccountDeletion? {
        try await write { db in
            // A deleted account shows no photo: its own goes to the sweeper, unless a group uses it.
            _ = try Self.setAvatar(of: user, to: nil, db: db)
            // An erasure asked after a deletion finished without one makes it unfinished again.
            let row = try Row.fetchOne(
                db,
                sql: """
                    UPDATE users SET
                        deletion_finished_at = CASE WHEN ?1 AND NOT deletion_erase THEN NULL ELSE deletion_finished_at END,
                        deletion_webhooks_owed = deletion_webhooks_owed OR deleted_at IS NULL,
                        deleted_at = coalesce(deleted_at, ?2), deletion_erase = deletion_erase OR ?1, display_name = '', avatar_url = NULL,
                        metadata = NULL, private_metadata = NULL
                    WHERE id = ?3 RETURNING id, deleted_at, deletion_erase, deletion_finished_at
                    """,
                arguments: [erase, at.millisecondsSince1970, user.rawValue])
            guard let row else { return nil }
            try db.execute(sql: "DELETE FROM user_names WHERE user_id = ?", arguments: [user.rawValue])
            try db.execute(sql: "DELETE FROM sessions WHERE user_id = ?", arguments: [user.rawValue])
            try db.execute(sql: "DELETE FROM devices WHERE user_id = ?", arguments: [user.rawValue])
            try db.execute(sql: "DELETE FROM blocks WHERE blocker_id = ?1 OR blocked_id = ?1", arguments: [user.rawValue])
            try db.execute(sql: "UPDATE media SET created_at = 0 WHERE uploader_id = ? AND NOT referenced", arguments: [user.rawValue])
            return try Self.deletion(from: row)
        }
    }

    public func finishDeletion(of user: UserID, at: Date) async throws {
        try await write { db in
            try db.execute(
                sql: "UPDATE users SET deletion_finished_at = coalesce(deletion_finished_at, ?) WHERE id = ? AND deleted_at IS NOT NULL",
                arguments: [at.millisecondsSince1970, user.rawValue])
        }
    }

    public func unfinishedDeletions(limit: Int) async throws -> [AccountDeletion] {
        try await deletions(where: "deleted_at IS NOT NULL AND deletion_finished_at IS NULL ORDER BY deleted_at, id", limit: limit)
    }

    public func deletionsOwingWebhooks(limit: Int) async throws -> [AccountDeletion] {
        try await deletions(where: "deletion_webhooks_owed AND deletion_finished_at IS NOT NULL ORDER BY deletion_finished_at, id", limit: limit)
    }

    /// At most `limit` deletions of the users `condition` (and its order) picks.
    private func deletions(where condition: String, limit: Int) async throws -> [AccountDeletion] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT id, deleted_at, deletion_erase, deletion_finished_at FROM users WHERE \(condition) LIMIT ?", arguments: [max(0, limit)]
            ).compactMap(Self.deletion(from:))
        }
    }

    public func deletionWebhooksDone(_ user: UserID) async throws {
        try await write { db in try db.execute(sql: "UPDATE users SET deletion_webhooks_owed = FALSE WHERE id = ?", arguments: [user.rawValue]) }
    }

    private static func deletion(from row: Row) throws -> AccountDeletion? {
        DeletionRows.deletion(
            of: try row.decode(forColumn: "id"), deletedAt: try row.decode(forColumn: "deleted_at"), erase: try row.decode(forColumn: "deletion_erase"),
            finishedAt: try row.decode(forColumn: "deletion_finished_at"))
    }

    // MARK: Sessions

    public func openSession(_ session: StoredSession) async throws {
        try await write { db in
            try db.execute(sql: "DELETE FROM sessions WHERE user_id = ? AND expires_at <= ?", arguments: [session.userId.rawValue, session.createdAt.millisecondsSince1970])
            try db.execute(
                sql: """
                    INSERT INTO sessions (token_id, user_id, created_at, last_used_at, expires_at, user_agent) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (token_id) DO NOTHING
                    """,
                arguments: [session.tokenId, session.userId.rawValue, session.createdAt.millisecondsSince1970, session.lastUsedAt.millisecondsSince1970,
                            session.expiresAt.millisecondsSince1970, session.userAgent])
        }
    }

    public func session(_ tokenID: String) async throws -> StoredSession? {
        try await read { db in try Row.fetchOne(db, sql: "SELECT * FROM sessions WHERE token_id = ?", arguments: [tokenID]).map(Self.storedSession) }
    }

    public func sessions(of user: UserID, now: Date, limit: Int) async throws -> [StoredSession] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM sessions WHERE user_id = ? AND expires_at > ? ORDER BY created_at DESC, token_id DESC LIMIT ?",
                arguments: [user.rawValue, now.millisecondsSince1970, max(0, limit)]
            ).map(Self.storedSession)
        }
    }

    public func touchSession(_ tokenID: String, at: Date) async throws {
        try await write { db in
            try db.execute(
                sql: "UPDATE sessions SET last_used_at = ?1 WHERE token_id = ?2 AND last_used_at < ?1", arguments: [at.millisecondsSince1970, tokenID])
        }
    }

    public func changePassword(of user: UserID, from old: String, to new: String, keeping tokenID: String, at: Date) async throws -> [StoredSession]? {
        try await write { db in
            try db.execute(
                sql: "UPDATE users SET password_hash = ?, password_changed_at = ? WHERE id = ? AND password_hash = ?",
                arguments: [new, at.millisecondsSince1970, user.rawValue, old])
            guard db.changesCount == 1 else { return nil }
            let others = try Row.fetchAll(
                db, sql: "DELETE FROM sessions WHERE user_id = ? AND token_id <> ? RETURNING *", arguments: [user.rawValue, tokenID]
            ).map(Self.storedSession).sorted { $0.tokenId < $1.tokenId }
            for session in others {
                try db.execute(
                    sql: "INSERT INTO token_revocations (token_id, expires_at) VALUES (?, ?) ON CONFLICT (token_id) DO NOTHING",
                    arguments: [session.tokenId, session.expiresAt.millisecondsSince1970])
            }
            try db.execute(sql: "DELETE FROM devices WHERE user_id = ? AND token_id <> ?", arguments: [user.rawValue, tokenID])
            return others
        }
    }

    // MARK: Devices

    public func registerDevice(_ device: StoredDevice, keepingAtMost limit: Int) async throws -> (device: StoredDevice, created: Bool, takenFrom: UserID?) {
        try await write { db in
            var stored = device
            stored.device.createdAt = device.device.createdAt.millisecondPrecision
            var created = true
            var takenFrom: UserID?
            let existing = try Row.fetchOne(
                db, sql: "SELECT id, user_id, created_at FROM devices WHERE platform = ? AND token = ?",
                arguments: [device.device.platform.rawValue, device.device.token])
            if let existing, try existing.decode(forColumn: "user_id") == device.userId.rawValue {
                stored.device.id = DeviceID(rawValue: try existing.decode(forColumn: "id"))
                stored.device.createdAt = Date(millisecondsSince1970: try existing.decode(forColumn: "created_at"))
                created = false
                try db.execute(
                    sql: "UPDATE devices SET token_id = ?, topic = ?, environment = ? WHERE id = ?",
                    arguments: [device.tokenId, device.device.topic, device.device.environment?.rawValue, stored.device.id.rawValue])
            } else {
                if let existing {
                    takenFrom = UserID(rawValue: try existing.decode(forColumn: "user_id"))
                    try db.execute(sql: "DELETE FROM devices WHERE id = ?", arguments: [try existing.decode(forColumn: "id") as String])
                }
                try db.execute(
                    sql: """
                        INSERT INTO devices (id, user_id, token_id, platform, token, topic, environment, created_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        stored.device.id.rawValue, device.userId.rawValue, device.tokenId, device.device.platform.rawValue, device.device.token,
                        device.device.topic, device.device.environment?.rawValue, stored.device.createdAt.millisecondsSince1970,
                    ])
            }
            try db.execute(
                sql: """
                    DELETE FROM devices WHERE user_id = ?1 AND id NOT IN
                        (SELECT id FROM devices WHERE user_id = ?1 ORDER BY created_at DESC, id DESC LIMIT ?2)
                    """,
                arguments: [device.userId.rawValue, max(limit, 1)])
            return (stored, created, takenFrom)
        }
    }

    public func devices(of user: UserID) async throws -> [StoredDevice] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM devices WHERE user_id = ? ORDER BY created_at, id", arguments: [user.rawValue]).map(Self.storedDevice)
        }
    }

    /// One read transaction: a push is one hop to a reader and back, not three. Its statements
    /// are prepared once per connection: preparing them for each push (GRDB's authorizer runs on
    /// every column a statement reads) was a tenth of a worker's CPU at 1,000 pushes a second.
    public func pushRecipient(_ user: UserID, sender: UserID?) async throws -> PushRecipient {
        try await read { db in
            let devices = try Row.fetchAll(
                db.cachedStatement(sql: "SELECT * FROM devices WHERE user_id = ? ORDER BY created_at, id"), arguments: [user.rawValue]
            ).map(Self.storedDevice)
            guard !devices.isEmpty else { return PushRecipient(devices: [], unread: 0, senderName: nil) }
            let unread = try Int64.fetchOne(db.cachedStatement(sql: Self.unreadSQL), arguments: [user.rawValue]) ?? 0
            let senderName = try sender.flatMap {
                try String.fetchOne(db.cachedStatement(sql: "SELECT display_name FROM users WHERE id = ?"), arguments: [$0.rawValue])
            }
            return PushRecipient(devices: devices, unread: unread, senderName: senderName)
        }
    }

    public func removeDevice(_ id: DeviceID, of user: UserID) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM devices WHERE id = ? AND user_id = ?", arguments: [id.rawValue, user.rawValue])
            return db.changesCount > 0
        }
    }

    public func removeDevices(registeredWith tokenID: String) async throws {
        try await write { db in try db.execute(sql: "DELETE FROM devices WHERE token_id = ?", arguments: [tokenID]) }
    }

    // MARK: Media

    public func recordMedia(_ media: StoredMedia) async throws {
        try await write { db in
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM media WHERE id = ?", arguments: [media.media.id.rawValue]) == true {
                throw ChatStoreError(.conflict, "media \(media.media.id) exists")
            }
            let m = media.media
            try db.execute(
                sql: "INSERT INTO media (id, uploader_id, content_type, size, sha256, width, height, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                arguments: [m.id.rawValue, media.uploaderId.rawValue, m.contentType, m.size, m.sha256, m.width, m.height, m.createdAt.millisecondsSince1970])
        }
    }

    public func media(_ id: MediaID) async throws -> StoredMedia? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM media WHERE id = ?", arguments: [id.rawValue]).map(Self.storedMedia(from:))
        }
    }

    static func storedMedia(from row: Row) throws -> StoredMedia {
        MediaRows.media(
            id: try row.decode(forColumn: "id"), uploaderId: try row.decode(forColumn: "uploader_id"),
            contentType: try row.decode(forColumn: "content_type"), size: try row.decode(forColumn: "size"),
            sha256: try row.decode(forColumn: "sha256"), width: try row.decode(forColumn: "width"),
            height: try row.decode(forColumn: "height"), createdAt: try row.decode(forColumn: "created_at"))
    }

    @discardableResult
    public func referenceMedia(_ ids: [MediaID], in conversation: ConversationID) async throws -> Set<MediaID> {
        try await write { db in
            var found: Set<MediaID> = []
            for id in ids {
                try db.execute(sql: "UPDATE media SET referenced = TRUE WHERE id = ?", arguments: [id.rawValue])
                guard db.changesCount > 0 else { continue }
                found.insert(id)
                try db.execute(
                    sql: "INSERT INTO media_references (media_id, conversation_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    arguments: [id.rawValue, conversation.rawValue])
            }
            return found
        }
    }

    public func removeUnattachedMedia(uploadedBefore cutoff: Date, limit: Int) async throws -> [StoredMedia] {
        try await write { db in
            let rows = try Row.fetchAll(
                db, sql: "SELECT * FROM media WHERE NOT referenced AND created_at < ? ORDER BY created_at, id LIMIT ?",
                arguments: [cutoff.millisecondsSince1970, max(0, limit)])
            let removed = try rows.map(Self.storedMedia(from:))
            for media in removed { try db.execute(sql: "DELETE FROM media WHERE id = ?", arguments: [media.media.id.rawValue]) }
            return removed
        }
    }

    public func hasMedia(withSHA256 sha256: String) async throws -> Bool {
        try await read { db in try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM media WHERE sha256 = ?)", arguments: [sha256]) ?? false }
    }

    public func conversationsReferencing(_ id: MediaID) async throws -> [ConversationID] {
        try await read { db in
            try String.fetchAll(
                db,
                sql: """
                    SELECT conversation_id FROM media_references WHERE media_id = ?1
                    UNION SELECT id FROM conversations WHERE photo_media_id = ?1 ORDER BY 1
                    """,
                arguments: [id.rawValue])
                .map { ConversationID(rawValue: $0) }
        }
    }

    public func mediaBytes(of user: UserID) async throws -> Int64 {
        try await read { db in try Int64.fetchOne(db, sql: "SELECT coalesce(sum(size), 0) FROM media WHERE uploader_id = ?", arguments: [user.rawValue]) ?? 0 }
    }

    static func storedDevice(from row: Row) throws -> StoredDevice {
        try DeviceRows.device(
            id: row.decode(forColumn: "id"), userId: row.decode(forColumn: "user_id"), tokenId: row.decode(forColumn: "token_id"),
            platform: row.decode(forColumn: "platform"), token: row.decode(forColumn: "token"), topic: row.decode(forColumn: "topic"),
            environment: row.decode(forColumn: "environment"), createdAt: row.decode(forColumn: "created_at"))
    }

    public func conversations(of user: UserID, after cursor: ConversationPageCursor?, limit: Int) async throws -> [ConversationRecord] {
        try await read { db in
            let ids = try String.fetchAll(
                db,
                sql: """
                    SELECT c.id FROM conversations c JOIN members m ON m.conversation_id = c.id
                    WHERE m.user_id = ?1 AND (?2 IS NULL OR c.last_activity_at < ?2 OR (c.last_activity_at = ?2 AND c.id < ?3))
                    ORDER BY c.last_activity_at DESC, c.id DESC LIMIT ?4
                    """,
                arguments: [user.rawValue, cursor?.lastActivityAt.millisecondsSince1970, cursor?.id.rawValue, max(0, limit)])
            return try ids.compactMap { try Self.conversation(ConversationID(rawValue: $0), db: db) }
        }
    }

    static func storedUser(from row: Row) throws -> StoredUser {
        var user = User(
            id: UserID(rawValue: try row.decode(forColumn: "id")), handle: try row.decode(forColumn: "handle"),
            displayName: try row.decode(forColumn: "display_name"), avatarURL: try row.decode(forColumn: "avatar_url"),
            createdAt: Date(millisecondsSince1970: try row.decode(forColumn: "created_at")), bot: try row.decode(forColumn: "bot"))
        user.avatar = try PhotoRows.photo(try row.decode(forColumn: "avatar"))
        user.metadata = try MetadataRows.metadata(try row.decode(forColumn: "metadata"))
        return StoredUser(
            user: user,
            passwordHash: try row.decode(forColumn: "password_hash"),
            passwordChangedAt: (try row.decode(forColumn: "password_changed_at") as Int64?).map(Date.init(millisecondsSince1970:)),
            suspendedAt: (try row.decode(forColumn: "suspended_at") as Int64?).map(Date.init(millisecondsSince1970:)),
            deletion: try deletion(from: row))
    }

    static func storedSession(from row: Row) throws -> StoredSession {
        SessionRows.session(
            tokenId: try row.decode(forColumn: "token_id"), userId: try row.decode(forColumn: "user_id"), createdAt: try row.decode(forColumn: "created_at"),
            lastUsedAt: try row.decode(forColumn: "last_used_at"), expiresAt: try row.decode(forColumn: "expires_at"), userAgent: try row.decode(forColumn: "user_agent"))
    }

    public func acquireOwnership(of id: ConversationID) async throws -> Int64 {
        try await write { db in
            guard let epoch = try Int64.fetchOne(
                db, sql: "UPDATE conversations SET epoch = epoch + 1 WHERE id = ? RETURNING epoch", arguments: [id.rawValue])
            else { throw ChatStoreError(.notFound, "no conversation \(id)") }
            return epoch
        }
    }

    // MARK: Messages

    public func commit(_ appends: [AppendRequest]) async throws -> [AppendOutcome] {
        guard !appends.isEmpty else { return [] }
        do {
            return try await pool.writeWithoutTransaction { db in try Self.commitInTransaction(appends, db: db) }
        } catch {
            throw Self.writeFailure(error)
        }
    }

    /// The commit on the calling thread (GRDB runs a write on the thread that asks when no other
    /// write is running, and waits for it otherwise).
    public var blockingCommit: BlockingCommit? {
        { [pool] appends in
            guard !appends.isEmpty else { return [] }
            do {
                return try pool.writeWithoutTransaction { db in try Self.commitInTransaction(appends, db: db) }
            } catch {
                throw Self.writeFailure(error)
            }
        }
    }

    private static func commitInTransaction(_ appends: [AppendRequest], db: Database) throws -> [AppendOutcome] {
        try db.immediateTransaction { try commit(appends, db: db) }
    }

    private static func commit(_ appends: [AppendRequest], db: Database) throws -> [AppendOutcome] {
        let head = try db.cachedStatement(sql: "SELECT epoch, last_seq, last_message FROM conversations WHERE id = ?")
        let insert = try db.cachedStatement(sql: """
            INSERT INTO message_log (
                conversation_id, seq, sender_id, client_message_id, text, sent_at, previous, attachments, reply_to, reply_quote, mentions, metadata)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (client_message_id, conversation_id) DO NOTHING
            """)
        let mention = try db.cachedStatement(sql: """
            INSERT INTO mentions (user_id, sent_at, seq, conversation_id, client_message_id) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
            """)
        let existing = try db.cachedStatement(sql: "SELECT * FROM message_log WHERE client_message_id = ? AND conversation_id = ?")
        let block = try db.cachedStatement(sql: "INSERT INTO message_blocks (conversation_id, block, message) VALUES (?, ?, ?)")
        let search = try db.cachedStatement(sql: "INSERT INTO message_search (rowid, body, scope) VALUES (?, ?, ?)")
        // Each conversation's head is read once per batch and written back once at the end.
        var heads: [String: (epoch: Int64, lastSeq: Int64, lastActivity: Int64, lastMessage: Int64?)?] = [:]
        var ownReceipts: [String: [String: Int64]] = [:]
        var outcomes: [AppendOutcome] = []
        outcomes.reserveCapacity(appends.count)
        for append in appends {
            let conversation = append.conversationId.rawValue
            if heads[conversation] == nil {
                head.bind(conversation, at: 1)
                heads[conversation] = try head.runForOneRow(in: db) { row in
                    (SQLiteColumn.int64(row, 0), SQLiteColumn.int64(row, 1), 0, SQLiteColumn.optionalInt64(row, 2))
                }
            }
            guard let current = heads[conversation] ?? nil else {
                outcomes.append(.unknownConversation)
                continue
            }
            guard current.epoch == append.epoch else {
                outcomes.append(.staleEpoch(current: current.epoch))
                continue
            }
            let seq = current.lastSeq + 1
            let sentAt = append.sentAt.millisecondsSince1970
            insert.bind(conversation, at: 1)
            insert.bind(seq, at: 2)
            insert.bind(append.senderId.rawValue, at: 3)
            insert.bind(append.clientMessageId, at: 4)
            insert.bind(append.text, at: 5)
            insert.bind(sentAt, at: 6)
            insert.bind(current.lastMessage, at: 7)
            insert.bind(MediaRows.column(append.attachments), at: 8)
            insert.bind(append.replyTo?.seq, at: 9)
            insert.bind(ThreadRows.encode(append.replyTo), at: 10)
            insert.bind(ThreadRows.mentionsColumn(append.mentions), at: 11)
            insert.bind(Metadata.column(append.metadata), at: 12)
            try insert.run(in: db)
            guard db.changesCount == 1 else {
                // This clientMessageId was stored before: the original, untouched.
                guard let original = try Row.fetchOne(existing, arguments: [append.clientMessageId, conversation]) else {
                    throw ChatStoreError(.unavailable, "insert of \(append.clientMessageId) changed nothing and found nothing")
                }
                outcomes.append(.duplicate(try Self.message(from: original)))
                continue
            }
            // The message's row ID, before any other insert takes the connection's last one.
            let row = db.lastInsertedRowID
            heads[conversation] = (current.epoch, seq, sentAt, row)
            search.bind(row, at: 1)
            search.bind(SearchRows.indexable(text: append.text, attachments: append.attachments), at: 2)
            search.bind(SearchRows.scopeToken(append.conversationId), at: 3)
            try search.run(in: db)
            if let completed = MessageBlocks.completedBlock(bySeq: seq) {
                block.bind(conversation, at: 1)
                block.bind(completed, at: 2)
                block.bind(row, at: 3)
                try block.run(in: db)
            }
            for user in append.mentions ?? [] {
                mention.bind(user.rawValue, at: 1)
                mention.bind(sentAt, at: 2)
                mention.bind(seq, at: 3)
                mention.bind(conversation, at: 4)
                mention.bind(append.clientMessageId, at: 5)
                try mention.run(in: db)
            }
            ownReceipts[conversation, default: [:]][append.senderId.rawValue] = seq
            outcomes.append(.appended(append.message(seq: seq, sentAt: sentAt)))
        }
        let advance = try db.cachedStatement(sql: "UPDATE conversations SET last_seq = ?, last_activity_at = ?, last_message = ? WHERE id = ?")
        let receipts = try db.cachedStatement(sql: """
            UPDATE members SET delivered_seq = max(delivered_seq, ?1), read_seq = max(read_seq, ?1)
            WHERE conversation_id = ?2 AND user_id = ?3
            """)
        for (conversation, senders) in ownReceipts {
            guard let current = heads[conversation] ?? nil else { continue }
            advance.bind(current.lastSeq, at: 1)
            advance.bind(current.lastActivity, at: 2)
            advance.bind(current.lastMessage, at: 3)
            advance.bind(conversation, at: 4)
            try advance.run(in: db)
            for (sender, seq) in senders {
                receipts.bind(seq, at: 1)
                receipts.bind(conversation, at: 2)
                receipts.bind(sender, at: 3)
                try receipts.run(in: db)
            }
        }
        return outcomes
    }

    public func messages(in id: ConversationID, after seq: Int64, limit: Int) async throws -> [Message] {
        guard limit > 0 else { return [] }
        return try await read { db in
            guard let head = try Self.head(of: id, db: db), seq < head.lastSeq else { return [] }
            let lowest = max(seq, 0) + 1
            let highest = min(lowest - 1 + Int64(min(limit, 1 << 30)), head.lastSeq)
            return try MessageBlocks.messages(in: id.rawValue, from: highest, downTo: lowest, lastMessage: head.lastMessage, db: db).reversed()
        }
    }

    public func messages(in id: ConversationID, before seq: Int64, limit: Int) async throws -> [Message] {
        guard limit > 0 else { return [] }
        return try await read { db in
            guard seq > 1, let head = try Self.head(of: id, db: db), head.lastSeq > 0 else { return [] }
            let highest = min(seq - 1, head.lastSeq)
            let lowest = max(highest - Int64(min(limit, 1 << 30)) + 1, 1)
            return try MessageBlocks.messages(in: id.rawValue, from: highest, downTo: lowest, lastMessage: head.lastMessage, db: db).reversed()
        }
    }

    /// The conversation's last seq and last message (nil: no such conversation).
    private static func head(of id: ConversationID, db: Database) throws -> (lastSeq: Int64, lastMessage: Int64?)? {
        let select = try db.cachedStatement(sql: "SELECT last_seq, last_message FROM conversations WHERE id = ?")
        select.bind(id.rawValue, at: 1)
        return try select.runForOneRow(in: db) { row in (SQLiteColumn.int64(row, 0), SQLiteColumn.optionalInt64(row, 1)) }
    }

    public func lastMessages(in ids: [ConversationID]) async throws -> [ConversationID: Message] {
        guard !ids.isEmpty else { return [:] }
        return try await read { db in
            let placeholders = Array(repeating: "?", count: ids.count).joined(separator: ",")
            let messages = try Row.fetchAll(
                db,
                sql: """
                    SELECT m.* FROM conversations c JOIN message_log m ON m.id = c.last_message
                    WHERE c.id IN (\(placeholders))
                    """,
                arguments: StatementArguments(ids.map(\.rawValue))
            ).map { try Self.message(from: $0) }
            return Dictionary(messages.map { ($0.conversationId, $0) }, uniquingKeysWith: { first, _ in first })
        }
    }

    public func recentlyActiveConversations(since: Date, limit: Int) async throws -> [ConversationID] {
        try await read { db in
            try String.fetchAll(
                db, sql: "SELECT id FROM conversations WHERE last_activity_at > ? ORDER BY last_activity_at DESC LIMIT ?",
                arguments: [since.millisecondsSince1970, max(0, limit)]
            ).map(ConversationID.init(rawValue:))
        }
    }

    public func message(in id: ConversationID, clientMessageId: String) async throws -> Message? {
        try await read { db in
            try Row.fetchOne(
                db, sql: "SELECT * FROM message_log WHERE client_message_id = ? AND conversation_id = ?",
                arguments: [clientMessageId, id.rawValue]
            ).map { try Self.message(from: $0) }
        }
    }

    // MARK: Members

    public func addMembers(_ members: [ConversationMember], to id: ConversationID, epoch: Int64, at: Date) async throws {
        try await write { db in
            try Self.checkEpoch(epoch, of: id, db: db)
            try Self.insertMembers(members, into: id, db: db)
            try Self.changed(id, .memberAdded, at: at, db: db)
        }
    }

    public func removeMember(_ user: UserID, from id: ConversationID, epoch: Int64, at: Date) async throws {
        try await write { db in
            try Self.checkEpoch(epoch, of: id, db: db)
            let role = try String.fetchOne(
                db, sql: "DELETE FROM members WHERE conversation_id = ? AND user_id = ? RETURNING role", arguments: [id.rawValue, user.rawValue])
            guard let role else { return }
            if role == MemberRole.owner.rawValue {
                // The longest-standing member left is the owner now (ConversationState.memberRemoved).
                if let heir = try String.fetchOne(
                    db, sql: "SELECT user_id FROM members WHERE conversation_id = ? ORDER BY position LIMIT 1", arguments: [id.rawValue])
                {
                    try db.execute(
                        sql: "UPDATE members SET role = ? WHERE conversation_id = ? AND user_id = ?",
                        arguments: [MemberRole.owner.rawValue, id.rawValue, heir])
                    try db.execute(sql: "UPDATE conversations SET owner_id = ? WHERE id = ?", arguments: [heir, id.rawValue])
                }
            }
            try db.execute(
                sql: "INSERT OR IGNORE INTO removals (user_id, removed_at, conversation_id) VALUES (?, ?, ?)",
                arguments: [user.rawValue, at.millisecondsSince1970, id.rawValue])
            try Self.changed(id, .memberRemoved, at: at, db: db)
        }
    }

    public func updateConversation(_ id: ConversationID, name: String?, metadata: Metadata?, epoch: Int64, at: Date) async throws {
        try await write { db in
            try Self.checkEpoch(epoch, of: id, db: db)
            try db.execute(
                sql: "UPDATE conversations SET name = coalesce(?, name), metadata = CASE WHEN ? THEN ? ELSE metadata END WHERE id = ?",
                arguments: [name, metadata != nil, Metadata.column(metadata), id.rawValue])
            try Self.changed(id, .updated, at: at, db: db)
        }
    }

    public func setMemberMetadata(_ metadata: Metadata?, for user: UserID, in id: ConversationID, epoch: Int64) async throws -> Bool {
        try await write { db in
            try Self.checkEpoch(epoch, of: id, db: db)
            try db.execute(
                sql: "UPDATE members SET metadata = ? WHERE conversation_id = ? AND user_id = ?",
                arguments: [Metadata.column(metadata), id.rawValue, user.rawValue])
            return db.changesCount > 0
        }
    }

    public func setConversationPhoto(_ id: ConversationID, to media: MediaID?, epoch: Int64, at: Date) async throws -> Media? {
        try await write { db in
            try Self.checkEpoch(epoch, of: id, db: db)
            let previous = try String.fetchOne(db, sql: "SELECT photo_media_id FROM conversations WHERE id = ?", arguments: [id.rawValue])
            var photo: Media?
            if let media {
                guard let row = try Row.fetchOne(db, sql: "UPDATE media SET referenced = TRUE WHERE id = ? RETURNING *", arguments: [media.rawValue]) else {
                    throw ChatStoreError(.notFound, "no upload \(media)")
                }
                photo = try Self.storedMedia(from: row).media
            }
            try db.execute(
                sql: "UPDATE conversations SET photo = ?, photo_media_id = ? WHERE id = ?",
                arguments: [PhotoRows.column(photo), media?.rawValue, id.rawValue])
            if let previous, previous != media?.rawValue { try db.execute(sql: PhotoRows.releaseUnused("?1"), arguments: [previous]) }
            try Self.changed(id, .updated, at: at, db: db)
            return photo
        }
    }

    public func setPushesOwed(from seq: Int64?, in id: ConversationID, epoch: Int64) async throws {
        try await write { db in
            try Self.checkEpoch(epoch, of: id, db: db)
            try db.execute(sql: "UPDATE conversations SET pushes_owed_from = ? WHERE id = ?", arguments: [seq, id.rawValue])
        }
    }

    public func conversationsOwingPushes(limit: Int) async throws -> [(conversation: ConversationID, from: Int64)] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT id, pushes_owed_from FROM conversations WHERE pushes_owed_from IS NOT NULL ORDER BY id LIMIT ?", arguments: [max(0, limit)]
            ).map { (ConversationID(rawValue: try $0.decode(forColumn: "id")), try $0.decode(forColumn: "pushes_owed_from")) }
        }
    }

    public func annotate(_ annotation: Annotation, epoch: Int64) async throws {
        try await write { db in
            try Self.checkEpoch(epoch, of: annotation.conversationId, db: db)
            try db.execute(
                sql: """
                    INSERT INTO annotations (conversation_id, seq, key, value, author_id, annotated_at) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (conversation_id, seq, key) DO UPDATE SET value = excluded.value, author_id = excluded.author_id, annotated_at = excluded.annotated_at
                    """,
                arguments: [annotation.conversationId.rawValue, annotation.seq, annotation.key, annotation.value, annotation.authorId.rawValue,
                            annotation.at.millisecondsSince1970])
        }
    }

    public func annotations(in id: ConversationID, seqs: ClosedRange<Int64>) async throws -> [Annotation] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM annotations WHERE conversation_id = ? AND seq BETWEEN ? AND ? ORDER BY seq, key",
                arguments: [id.rawValue, seqs.lowerBound, seqs.upperBound]
            ).map(Self.annotation(from:))
        }
    }

    public func eraseMessages(in id: ConversationID, seqs: [Int64], epoch: Int64, at: Date) async throws -> [Message] {
        guard let lowest = seqs.min(), let highest = seqs.max(), lowest >= 1 else { return [] }
        let wanted = Set(seqs)
        return try await write { db in
            try Self.checkEpoch(epoch, of: id, db: db)
            guard let head = try Self.head(of: id, db: db), lowest <= head.lastSeq else { return [] }
            let found = try MessageBlocks.messages(in: id.rawValue, from: min(highest, head.lastSeq), downTo: lowest, lastMessage: head.lastMessage, db: db)
            var erased: [Message] = []
            for message in found.reversed() where wanted.contains(message.seq) && !message.isTombstone {
                try db.execute(
                    sql: "UPDATE message_log SET \(ThreadRows.tombstoneAssignments), erased_at = ? WHERE client_message_id = ? AND conversation_id = ?",
                    arguments: [at.millisecondsSince1970, message.clientMessageId, id.rawValue])
                try Self.deleteWhatAMessageCarries(id, seq: message.seq, db: db)
                try db.execute(
                    sql: """
                        INSERT INTO erasures (conversation_id, seq, sender_id, client_message_id, sent_at, erased_at) VALUES (?, ?, ?, ?, ?, ?)
                        ON CONFLICT DO NOTHING
                        """,
                    arguments: [id.rawValue, message.seq, message.senderId.rawValue, message.clientMessageId, message.sentAt.millisecondsSince1970,
                                at.millisecondsSince1970])
                erased.append(message)
            }
            try Self.emptied(erased.map(\.tombstone), in: id, db: db)
            return erased
        }
    }

    /// Messages `tombstones` of conversation `id` are tombstones now: replies quote them so, and
    /// they are no longer pinned.
    private static func emptied(_ tombstones: [Message], in id: ConversationID, db: Database) throws {
        guard !tombstones.isEmpty else { return }
        for tombstone in tombstones {
            try requote(tombstone, db: db)
            try db.execute(
                sql: "DELETE FROM message_search WHERE rowid = (SELECT id FROM message_log WHERE client_message_id = ? AND conversation_id = ?)",
                arguments: [tombstone.clientMessageId, id.rawValue])
        }
        let pinned = try ThreadRows.pinned(try String.fetchOne(db, sql: "SELECT pinned FROM conversations WHERE id = ?", arguments: [id.rawValue]))
        let seqs = Set(tombstones.map(\.seq))
        guard pinned.contains(where: seqs.contains) else { return }
        try db.execute(
            sql: "UPDATE conversations SET pinned = ? WHERE id = ?", arguments: [ThreadRows.pinnedColumn(pinned.filter { !seqs.contains($0) }), id.rawValue])
    }

    /// Every reply to `message` quotes it as it is now.
    private static func requote(_ message: Message, db: Database) throws {
        try db.execute(
            sql: "UPDATE message_log SET reply_quote = ? WHERE conversation_id = ? AND reply_to = ?",
            arguments: [ThreadRows.encode(MessageQuote(of: message)), message.conversationId.rawValue, message.seq])
    }

    /// A tombstone's annotations, reactions and earlier texts.
    private static func deleteWhatAMessageCarries(_ id: ConversationID, seq: Int64, db: Database) throws {
        for table in ["annotations", "reactions", "message_versions"] {
            try db.execute(sql: "DELETE FROM \(table) WHERE conversation_id = ? AND seq = ?", arguments: [id.rawValue, seq])
        }
    }

    public func commitChange(_ change: MessageChange, epoch: Int64) async throws -> (change: MessageChange, message: Message)? {
        let id = change.conversationId
        return try await write { db in
            try Self.checkEpoch(epoch, of: id, db: db)
            guard let head = try Self.head(of: id, db: db), change.seq >= 1, change.seq <= head.lastSeq,
                  let original = try MessageBlocks.messages(in: id.rawValue, from: change.seq, downTo: change.seq, lastMessage: head.lastMessage, db: db).first,
                  !original.isTombstone
            else { return nil }
            var change = change
            switch change.kind {
            case .edited:
                let version = try Int64.fetchOne(
                    db, sql: "SELECT coalesce(max(version), 0) + 1 FROM message_versions WHERE conversation_id = ? AND seq = ?",
                    arguments: [id.rawValue, change.seq]) ?? 1
                try db.execute(
                    sql: "INSERT INTO message_versions (conversation_id, seq, version, text, at) VALUES (?, ?, ?, ?, ?)",
                    arguments: [id.rawValue, change.seq, version, original.text, (original.editedAt ?? original.sentAt).millisecondsSince1970])
                try db.execute(
                    sql: "UPDATE message_log SET text = ?, edited_at = ? WHERE client_message_id = ? AND conversation_id = ?",
                    arguments: [change.text ?? original.text, change.at.millisecondsSince1970, original.clientMessageId, id.rawValue])
                let edited = change.applied(to: original)
                try db.execute(
                    sql: "UPDATE message_search SET body = ? WHERE rowid = (SELECT id FROM message_log WHERE client_message_id = ? AND conversation_id = ?)",
                    arguments: [SearchRows.indexable(edited), original.clientMessageId, id.rawValue])
                try Self.requote(edited, db: db)
            case .deleted:
                try db.execute(
                    sql: "UPDATE message_log SET \(ThreadRows.tombstoneAssignments), erased_at = ?, deleted_by = ? WHERE client_message_id = ? AND conversation_id = ?",
                    arguments: [change.at.millisecondsSince1970, change.userId.rawValue, original.clientMessageId, id.rawValue])
                try Self.deleteWhatAMessageCarries(id, seq: change.seq, db: db)
                try Self.emptied([change.applied(to: original)], in: id, db: db)
            case .pinned, .unpinned:
                let pinned = try ThreadRows.pinned(try String.fetchOne(db, sql: "SELECT pinned FROM conversations WHERE id = ?", arguments: [id.rawValue]))
                let after = change.applied(toPinned: pinned)
                guard after != pinned else { return nil }
                try db.execute(sql: "UPDATE conversations SET pinned = ? WHERE id = ?", arguments: [ThreadRows.pinnedColumn(after), id.rawValue])
            case .reactionAdded, .reactionRemoved:
                guard let emoji = change.emoji else { return nil }
                if change.kind == .reactionAdded {
                    try db.execute(
                        sql: "INSERT INTO reactions (conversation_id, seq, emoji, user_id, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        arguments: [id.rawValue, change.seq, emoji, change.userId.rawValue, change.at.millisecondsSince1970])
                } else {
                    try db.execute(
                        sql: "DELETE FROM reactions WHERE conversation_id = ? AND seq = ? AND emoji = ? AND user_id = ?",
                        arguments: [id.rawValue, change.seq, emoji, change.userId.rawValue])
                }
                guard db.changesCount > 0 else { return nil }
                change.count = try Int.fetchOne(
                    db, sql: "SELECT count(*) FROM reactions WHERE conversation_id = ? AND seq = ? AND emoji = ?",
                    arguments: [id.rawValue, change.seq, emoji]) ?? 0
                try db.execute(
                    sql: "UPDATE message_log SET reactions = ? WHERE client_message_id = ? AND conversation_id = ?",
                    arguments: [ChangeRows.encodeReactions(change.applied(to: original).reactions), original.clientMessageId, id.rawValue])
            }
            try db.execute(
                sql: "UPDATE conversations SET last_change_seq = ?1 WHERE id = ?2 AND last_change_seq = ?1 - 1",
                arguments: [change.changeSeq, id.rawValue])
            guard db.changesCount == 1 else { throw ChatStoreError(.conflict, "change \(change.changeSeq) of \(id) is not the next") }
            do {
                try db.execute(
                    sql: "INSERT INTO message_changes (\(ChangeRows.changeColumns())) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    arguments: [id.rawValue, change.changeSeq, change.afterSeq, change.seq, change.kind.rawValue, change.userId.rawValue,
                                change.at.millisecondsSince1970, change.text, change.emoji, change.count, change.clientChangeId])
            } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                throw ChatStoreError(.conflict, "change \(change.changeSeq) of \(id), or its client change ID, is used")
            }
            return (change, change.applied(to: original))
        }
    }

    /// Indexes a message stored as row `row` (nothing for a tombstone).
    private static func index(_ message: Message, row: Int64, db: Database) throws {
        guard let body = SearchRows.indexable(message) else { return }
        try db.execute(
            sql: "INSERT INTO message_search (rowid, body, scope) VALUES (?, ?, ?)", arguments: [row, body, SearchRows.scopeToken(message.conversationId)])
    }

    /// A search in more conversations than this filters by the members' table instead of by
    /// the index's conversation words.
    public static let scopedSearchMax = 500

    public func searchMessages(of user: UserID, terms: [SearchText.Term], in conversation: ConversationID?, window: Int, offset: Int, limit: Int) async throws -> [Message] {
        guard !terms.isEmpty, limit > 0, window > 0 else { return [] }
        return try await read { db in
            var conversations = try String.fetchAll(db, sql: "SELECT conversation_id FROM members WHERE user_id = ?", arguments: [user.rawValue])
            if let conversation { conversations = conversations.filter { $0 == conversation.rawValue } }
            guard !conversations.isEmpty else { return [] }
            var match = "body : (\(SearchText.fts5Query(terms)))"
            var filter = ""
            if conversations.count <= Self.scopedSearchMax {
                match += " AND scope : (" + conversations.map { SearchRows.scopeToken(ConversationID(rawValue: $0)) }.joined(separator: " OR ") + ")"
            } else {
                filter = "AND EXISTS (SELECT 1 FROM message_log m JOIN members p ON p.conversation_id = m.conversation_id AND p.user_id = ? WHERE m.id = message_search.rowid)"
            }
            // The index walks its matches newest (highest row) first and stops at the window, so
            // a word in most messages costs the window, not every match.
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT m.* FROM (
                        SELECT rowid AS id, \(SearchRank.name)(message_search) AS score FROM message_search
                        WHERE message_search MATCH ? \(filter) ORDER BY rowid DESC LIMIT ?
                    ) found JOIN message_log m ON m.id = found.id
                    ORDER BY found.score, m.sent_at DESC, m.id DESC LIMIT ? OFFSET ?
                    """,
                arguments: StatementArguments([match] + (filter.isEmpty ? [] : [user.rawValue]) + [window, limit, max(0, offset)] as [any DatabaseValueConvertible]))
            return try rows.map(Self.message(from:))
        }
    }

    public func replies(in id: ConversationID, to seq: Int64, after: Int64, limit: Int) async throws -> [Message] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM message_log WHERE conversation_id = ? AND reply_to = ? AND seq > ? ORDER BY seq LIMIT ?",
                arguments: [id.rawValue, seq, after, max(0, limit)]
            ).map { try Self.message(from: $0) }
        }
    }

    public func mentions(of user: UserID, before position: MentionPosition?, limit: Int) async throws -> [Message] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT m.* FROM mentions x
                    JOIN members p ON p.conversation_id = x.conversation_id AND p.user_id = x.user_id
                    JOIN message_log m ON m.client_message_id = x.client_message_id AND m.conversation_id = x.conversation_id
                    WHERE x.user_id = ? AND (x.sent_at, x.seq, x.conversation_id) < (?, ?, ?) AND m.erased_at IS NULL
                    ORDER BY x.sent_at DESC, x.seq DESC, x.conversation_id DESC LIMIT ?
                    """,
                arguments: [user.rawValue, position?.sentAt ?? Int64.max, position?.seq ?? Int64.max, position?.conversationId.rawValue ?? "\u{10FFFF}", max(0, limit)]
            ).map { try Self.message(from: $0) }
        }
    }

    public func messageChanges(in id: ConversationID, after changeSeq: Int64, limit: Int) async throws -> [MessageChange] {
        try await read { db in
            try Self.changes(
                db, "SELECT \(ChangeRows.changeColumns()) FROM message_changes WHERE conversation_id = ? AND change_seq > ? ORDER BY change_seq LIMIT ?",
                [id.rawValue, changeSeq, max(0, limit)])
        }
    }

    public func messageChanges(in id: ConversationID, since: Date, limit: Int) async throws -> [MessageChange] {
        try await read { db in
            try Self.changes(
                db, "SELECT \(ChangeRows.changeColumns()) FROM message_changes WHERE conversation_id = ? AND at > ? ORDER BY change_seq DESC LIMIT ?",
                [id.rawValue, since.millisecondsSince1970, max(0, limit)]
            ).reversed()
        }
    }

    public func messageChange(in id: ConversationID, clientChangeId: String) async throws -> MessageChange? {
        try await read { db in
            try Self.changes(
                db, "SELECT \(ChangeRows.changeColumns()) FROM message_changes WHERE conversation_id = ? AND client_change_id = ?", [id.rawValue, clientChangeId]
            ).first
        }
    }

    public func messageChanges(for user: UserID, since: Date, after position: ChangePosition?, limit: Int) async throws -> [MessageChange] {
        try await read { db in
            try Self.changes(
                db,
                """
                SELECT \(ChangeRows.changeColumns(of: "c"))
                FROM members m JOIN message_changes c ON c.conversation_id = m.conversation_id
                WHERE m.user_id = ? AND c.at > ? AND (c.conversation_id, c.change_seq) > (?, ?) ORDER BY c.conversation_id, c.change_seq LIMIT ?
                """,
                [user.rawValue, since.millisecondsSince1970, position?.conversationId.rawValue ?? "", position?.changeSeq ?? 0, max(0, limit)])
        }
    }

    private static func changes(_ db: Database, _ sql: String, _ arguments: StatementArguments) throws -> [MessageChange] {
        try Row.fetchAll(db, sql: sql, arguments: arguments).compactMap { row in
            ChangeRows.change(
                conversation: try row.decode(atIndex: 0), changeSeq: try row.decode(atIndex: 1), afterSeq: try row.decode(atIndex: 2), seq: try row.decode(atIndex: 3),
                kind: try row.decode(atIndex: 4), user: try row.decode(atIndex: 5), at: try row.decode(atIndex: 6), text: try row.decode(atIndex: 7),
                emoji: try row.decode(atIndex: 8), count: try row.decode(atIndex: 9), clientChangeId: try row.decode(atIndex: 10))
        }
    }

    public func messageVersions(in id: ConversationID, seq: Int64) async throws -> [MessageVersion] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT text, at FROM message_versions WHERE conversation_id = ? AND seq = ? ORDER BY version", arguments: [id.rawValue, seq]
            ).map { MessageVersion(text: try $0.decode(atIndex: 0), at: Date(millisecondsSince1970: try $0.decode(atIndex: 1))) }
        }
    }

    public func reactions(of user: UserID, in id: ConversationID, seqs: ClosedRange<Int64>) async throws -> [HeldReaction] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT seq, emoji FROM reactions WHERE user_id = ? AND conversation_id = ? AND seq BETWEEN ? AND ? ORDER BY seq, emoji",
                arguments: [user.rawValue, id.rawValue, seqs.lowerBound, seqs.upperBound]
            ).map { HeldReaction(seq: try $0.decode(atIndex: 0), emoji: try $0.decode(atIndex: 1)) }
        }
    }

    public func erasures(in id: ConversationID, since: Date, limit: Int) async throws -> [Erasure] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM erasures WHERE conversation_id = ? AND erased_at > ? ORDER BY erased_at DESC, seq DESC LIMIT ?",
                arguments: [id.rawValue, since.millisecondsSince1970, max(0, limit)]
            ).map(Self.erasure(from:)).reversed()
        }
    }

    private static func erasure(from row: Row) throws -> Erasure {
        DeletionRows.erasure(
            conversation: try row.decode(forColumn: "conversation_id"), seq: try row.decode(forColumn: "seq"),
            sender: try row.decode(forColumn: "sender_id"), clientMessageId: try row.decode(forColumn: "client_message_id"),
            sentAt: try row.decode(forColumn: "sent_at"), erasedAt: try row.decode(forColumn: "erased_at"))
    }

    public func releaseMedia(_ ids: [MediaID]) async throws {
        guard !ids.isEmpty else { return }
        try await write { db in
            for id in ids {
                try db.execute(sql: "DELETE FROM media_references WHERE media_id = ?", arguments: [id.rawValue])
                try db.execute(sql: PhotoRows.releaseUnused("?1"), arguments: [id.rawValue])
            }
        }
    }

    static func annotation(from row: Row) throws -> Annotation {
        Annotation(
            conversationId: ConversationID(rawValue: try row.decode(forColumn: "conversation_id")), seq: try row.decode(forColumn: "seq"),
            key: try row.decode(forColumn: "key"), value: try row.decode(forColumn: "value"), authorId: UserID(rawValue: try row.decode(forColumn: "author_id")),
            at: Date(millisecondsSince1970: try row.decode(forColumn: "annotated_at")))
    }

    public func webhookEndpointFirstSeen(_ name: String, at: Date) async throws -> Date {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO webhook_endpoints (name, first_seen_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                arguments: [name, at.millisecondsSince1970])
            let first = try Int64.fetchOne(db, sql: "SELECT first_seen_at FROM webhook_endpoints WHERE name = ?", arguments: [name])
            return Date(millisecondsSince1970: first ?? at.millisecondsSince1970)
        }
    }

    public func webhookCursors(in id: ConversationID) async throws -> [WebhookCursorRecord] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT endpoint, state, pending FROM webhook_cursors WHERE conversation_id = ? ORDER BY endpoint", arguments: [id.rawValue]
            ).map { WebhookCursorRecord(endpoint: try $0.decode(forColumn: "endpoint"), state: try $0.decode(forColumn: "state"), pending: try $0.decode(forColumn: "pending")) }
        }
    }

    public func saveWebhookCursor(_ cursor: WebhookCursorRecord, in id: ConversationID, epoch: Int64) async throws {
        try await write { db in
            try Self.checkEpoch(epoch, of: id, db: db)
            try db.execute(
                sql: """
                    INSERT INTO webhook_cursors (conversation_id, endpoint, state, pending) VALUES (?, ?, ?, ?)
                    ON CONFLICT (conversation_id, endpoint) DO UPDATE SET state = excluded.state, pending = excluded.pending
                    """,
                arguments: [id.rawValue, cursor.endpoint, cursor.state, cursor.pending])
        }
    }

    public func conversationsOwingWebhooks(limit: Int) async throws -> [ConversationID] {
        try await read { db in
            try String.fetchAll(
                db, sql: "SELECT DISTINCT conversation_id FROM webhook_cursors WHERE pending ORDER BY conversation_id LIMIT ?", arguments: [max(0, limit)]
            ).map(ConversationID.init(rawValue:))
        }
    }

    public func recentlyChangedConversations(since: Date, limit: Int) async throws -> [ConversationID] {
        try await read { db in
            try String.fetchAll(
                db,
                sql: """
                    SELECT id FROM conversations WHERE changed_at > ?1
                    UNION SELECT conversation_id FROM members WHERE receipt_at > ?1
                    UNION SELECT conversation_id FROM erasures WHERE erased_at > ?1
                    UNION SELECT conversation_id FROM message_changes WHERE at > ?1
                    ORDER BY 1 LIMIT ?2
                    """,
                arguments: [since.millisecondsSince1970, max(0, limit)]
            ).map(ConversationID.init(rawValue:))
        }
    }

    public func recentChanges(in id: ConversationID, since: Date) async throws -> [RecentChange] {
        try await read { db in
            var changes = try Row.fetchAll(
                db, sql: "SELECT user_id, removed_at FROM removals WHERE conversation_id = ? AND removed_at > ?",
                arguments: [id.rawValue, since.millisecondsSince1970]
            ).map { row in
                RecentChange(
                    change: .memberRemoved, at: Date(millisecondsSince1970: try row.decode(forColumn: "removed_at")),
                    removed: UserID(rawValue: try row.decode(forColumn: "user_id")))
            }
            if let row = try Row.fetchOne(
                db, sql: "SELECT last_change, changed_at FROM conversations WHERE id = ? AND changed_at > ? AND last_change <> 'member_removed'",
                arguments: [id.rawValue, since.millisecondsSince1970])
            {
                changes.append(RecentChange(
                    change: ConversationChangeKind(rawValue: try row.decode(forColumn: "last_change")) ?? .updated,
                    at: Date(millisecondsSince1970: try row.decode(forColumn: "changed_at"))))
            }
            return changes.sorted { ($0.at, $0.removed?.rawValue ?? "") < ($1.at, $1.removed?.rawValue ?? "") }
        }
    }

    public func unread(of user: UserID) async throws -> UnreadCount {
        try await read { db in
            let row = try Row.fetchOne(db.cachedStatement(sql: Self.unreadSQL), arguments: [user.rawValue])
            return UnreadCount(messages: try row?.decode(atIndex: 0) ?? 0, conversations: try row?.decode(atIndex: 1) ?? 0)
        }
    }

    /// A member's unread messages, and the conversations with any: each conversation's
    /// `last_seq - read_seq` less the tombstones past `read_seq` (a partial index finds them).
    private static let unreadSQL = """
        SELECT coalesce(sum(u), 0), coalesce(sum(u > 0), 0) FROM (
            SELECT max(0, c.last_seq - m.read_seq
                - (SELECT count(*) FROM message_log t WHERE t.conversation_id = m.conversation_id AND t.seq > m.read_seq AND t.erased_at IS NOT NULL)) AS u
            FROM members m JOIN conversations c ON c.id = m.conversation_id
            WHERE m.user_id = ?)
        """

    public func setMuted(_ muted: Bool, for user: UserID, in id: ConversationID, epoch: Int64) async throws -> Bool {
        try await write { db in
            try Self.checkEpoch(epoch, of: id, db: db)
            try db.execute(
                sql: "UPDATE members SET muted = ? WHERE conversation_id = ? AND user_id = ?", arguments: [muted, id.rawValue, user.rawValue])
            return db.changesCount > 0
        }
    }

    private static func changed(_ id: ConversationID, _ change: ConversationChangeKind, at: Date, db: Database) throws {
        try db.execute(
            sql: "UPDATE conversations SET last_change = ?, changed_at = ? WHERE id = ?",
            arguments: [change.rawValue, at.millisecondsSince1970, id.rawValue])
    }

    public func advanceReceipts(in id: ConversationID, user: UserID, deliveredSeq: Int64, readSeq: Int64, at: Date) async throws -> ConversationMember? {
        try await write { db in
            try Row.fetchOne(
                db,
                sql: """
                    UPDATE members SET read_seq = max(read_seq, ?1), delivered_seq = max(delivered_seq, ?2, ?1),
                        receipt_at = CASE WHEN ?1 > read_seq OR max(?2, ?1) > delivered_seq THEN ?5 ELSE receipt_at END
                    WHERE conversation_id = ?3 AND user_id = ?4
                    RETURNING *
                    """,
                arguments: [readSeq, deliveredSeq, id.rawValue, user.rawValue, at.millisecondsSince1970]
            ).map { try Self.member(from: $0) }
        }
    }

    public func durableChanges(for user: UserID, since: Date) async throws -> DurableChanges {
        try await read { db in
            let since = since.millisecondsSince1970
            var changes = DurableChanges()
            let changed = try Row.fetchAll(
                db,
                sql: """
                    SELECT c.id, c.last_change, c.changed_at FROM conversations c JOIN members m ON m.conversation_id = c.id
                    WHERE m.user_id = ? AND c.changed_at > ? ORDER BY c.changed_at, c.id
                    """,
                arguments: [user.rawValue, since])
            for row in changed {
                guard let record = try Self.conversation(ConversationID(rawValue: try row.decode(forColumn: "id")), db: db) else { continue }
                let change = ConversationChangeKind(rawValue: try row.decode(forColumn: "last_change")) ?? .updated
                changes.conversations.append(.init(conversation: record, change: change, at: Date(millisecondsSince1970: try row.decode(forColumn: "changed_at"))))
            }
            changes.receipts = try Row.fetchAll(
                db,
                sql: """
                    SELECT other.* FROM members mine JOIN members other ON other.conversation_id = mine.conversation_id
                    WHERE mine.user_id = ? AND other.receipt_at > ? ORDER BY other.receipt_at
                    """,
                arguments: [user.rawValue, since]
            ).map { row in
                DurableChanges.Receipt(
                    conversationId: ConversationID(rawValue: try row.decode(forColumn: "conversation_id")), member: try Self.member(from: row),
                    at: Date(millisecondsSince1970: try row.decode(forColumn: "receipt_at")))
            }
            changes.annotations = try Row.fetchAll(
                db,
                sql: """
                    SELECT a.* FROM members m JOIN annotations a ON a.conversation_id = m.conversation_id
                    WHERE m.user_id = ? AND a.annotated_at > ? ORDER BY a.annotated_at, a.conversation_id, a.seq, a.key
                    """,
                arguments: [user.rawValue, since]
            ).map(Self.annotation(from:))
            changes.erasures = try Row.fetchAll(
                db,
                sql: """
                    SELECT e.* FROM members m JOIN erasures e ON e.conversation_id = m.conversation_id
                    WHERE m.user_id = ? AND e.erased_at > ? ORDER BY e.erased_at, e.conversation_id, e.seq
                    """,
                arguments: [user.rawValue, since]
            ).map(Self.erasure(from:))
            let removed = try Row.fetchAll(
                db, sql: "SELECT conversation_id, removed_at FROM removals WHERE user_id = ? AND removed_at > ? ORDER BY removed_at",
                arguments: [user.rawValue, since])
            for row in removed {
                guard let record = try Self.conversation(ConversationID(rawValue: try row.decode(forColumn: "conversation_id")), db: db) else { continue }
                changes.removals.append(.init(conversation: record, change: .memberRemoved, at: Date(millisecondsSince1970: try row.decode(forColumn: "removed_at"))))
            }
            return changes
        }
    }

    // MARK: Helpers

    private static func checkEpoch(_ epoch: Int64, of id: ConversationID, db: Database) throws {
        guard let current = try Int64.fetchOne(db, sql: "SELECT epoch FROM conversations WHERE id = ?", arguments: [id.rawValue]) else {
            throw ChatStoreError(.notFound, "no conversation \(id)")
        }
        guard current == epoch else { throw ChatStoreError(.staleEpoch, "epoch \(epoch) of \(id) is not the current \(current)") }
    }

    private static func insertMembers(_ members: [ConversationMember], into id: ConversationID, db: Database) throws {
        let next = try Int64.fetchOne(db, sql: "SELECT coalesce(max(position), -1) + 1 FROM members WHERE conversation_id = ?", arguments: [id.rawValue]) ?? 0
        let insert = try db.cachedStatement(sql: """
            INSERT INTO members (conversation_id, user_id, role, delivered_seq, read_seq, position) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT (conversation_id, user_id) DO NOTHING
            """)
        for (offset, member) in members.enumerated() {
            try insert.execute(arguments: [
                id.rawValue, member.userId.rawValue, member.role.rawValue, member.deliveredSeq, member.readSeq, next + Int64(offset),
            ])
        }
    }

    // Rows are read with GRDB's throwing `decode`: a value of the wrong type (a row written by
    // another tool, a damaged file) is an error, where its subscripts would trap.
    static func member(from row: Row) throws -> ConversationMember {
        var member = ConversationMember(
            userId: UserID(rawValue: try row.decode(forColumn: "user_id")), role: MemberRole(rawValue: try row.decode(forColumn: "role")) ?? .member,
            deliveredSeq: try row.decode(forColumn: "delivered_seq"), readSeq: try row.decode(forColumn: "read_seq"))
        member.metadata = try MetadataRows.metadata(try row.decode(forColumn: "metadata"))
        return member
    }

    static func message(from row: Row) throws -> Message {
        var message = Message(
            conversationId: ConversationID(rawValue: try row.decode(forColumn: "conversation_id")), seq: try row.decode(forColumn: "seq"),
            senderId: UserID(rawValue: try row.decode(forColumn: "sender_id")), clientMessageId: try row.decode(forColumn: "client_message_id"),
            text: try row.decode(forColumn: "text"), sentAt: Date(millisecondsSince1970: try row.decode(forColumn: "sent_at")),
            attachments: try MediaRows.attachments(try row.decode(forColumn: "attachments")))
        if (try row.decode(forColumn: "erased_at") as Int64?) != nil { message.erased = true }
        try ChangeRows.apply(
            editedAt: try row.decode(forColumn: "edited_at"), deletedBy: try row.decode(forColumn: "deleted_by"), reactions: try row.decode(forColumn: "reactions"),
            to: &message)
        try ThreadRows.apply(replyQuote: try row.decode(forColumn: "reply_quote"), mentions: try row.decode(forColumn: "mentions"), to: &message)
        message.metadata = try MetadataRows.metadata(try row.decode(forColumn: "metadata"))
        return message
    }

    /// A write transaction; database failures become `unavailable`, store errors pass through.
    private func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        do {
            return try await pool.write(body)
        } catch {
            throw Self.writeFailure(error)
        }
    }

    /// Database failures become `unavailable`; store errors pass through.
    private static func writeFailure(_ error: any Error) -> ChatStoreError {
        error as? ChatStoreError ?? ChatStoreError(.unavailable, "SQLite write failed: \(error)")
    }

    private func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        do {
            return try await pool.read(body)
        } catch let error as ChatStoreError {
            throw error
        } catch {
            throw ChatStoreError(.unavailable, "SQLite read failed: \(error)")
        }
    }
}

/// Copies the WAL back into the database on its own connection and thread at a fixed interval, so
/// that no commit pays for the copy and its fsync (on this VM a checkpoint of SQLite's default
/// 1,000 pages takes 15–20 ms, and with automatic checkpoints every ~4th commit waited for one).
///
/// Every pass runs while the store's writer holds the write lock (an empty IMMEDIATE transaction):
/// no commit, from this process or another, runs during a checkpoint. SQLite before 3.51.3 (Debian
/// 12 ships 3.40.1) has a race, the "WAL-reset bug": a checkpoint that begins right after another
/// one copied everything, while a commit rewinds the WAL, marks the commit's frames as copied
/// when they are not, and later readers and writers see the database without that commit. With
/// three processes appending and three checkpointing PASSIVE back to back, 3 runs of 12 lost
/// commits within 30 s each on this machine (a counter read and incremented in each transaction
/// came out with 3, 7 and 10 values missing or written twice); with the checkpoints under the
/// write lock, 0 of 12 (`Scripts/bench-sqlite-wal-reset`).
/// A commit that arrives meanwhile waits for the pass (the copy and its fsyncs).
///
/// Since nothing is appended during a pass, a pass copies everything the readers allow, and the
/// next commit rewinds the WAL (`journal_size_limit` then trims the file): the WAL stays short
/// under steady writing without a RESTART checkpoint, which would take the write lock itself and,
/// when it cannot, run unlocked as a PASSIVE one.
final class BackgroundCheckpointer: Sendable {
    private let stopped = Mutex(false)

    init(path: String, writer: DatabasePool, every interval: Duration, logger: Logger) throws {
        var configuration = Configuration()
        configuration.busyMode = SQLiteChatStore.pollingBusyMode(giveUpAfter: Duration.milliseconds(50))
        let connection = try DatabaseQueue(path: path, configuration: configuration)
        let seconds = interval.seconds
        let thread = Thread { [self] in
            // The WAL as it was before the last pass that left nothing to copy: until a commit
            // changes it there is nothing to do (but look once a second anyway: ``WALFileState``).
            var caughtUpAt: WALFileState?
            var lastPass = ContinuousClock.now
            while !self.stopped.withLock({ $0 }) {
                Thread.sleep(forTimeInterval: seconds)
                let wal = WALFileState.of(databasePath: path)
                if let wal, wal == caughtUpAt, lastPass.duration(to: .now) < .seconds(1) { continue }
                lastPass = .now
                checkpoints.add(1, ordering: .relaxed)
                do {
                    let pass = try Self.pass(writer: writer, checkpointer: connection)
                    // Looked at before the pass: a commit before the lock was taken changed the
                    // file, so the next round looks again. A checkpoint that found the checkpoint
                    // lock taken (an outside tool's) answers -1 for both and caught nothing up.
                    caughtUpAt = pass.frames >= 0 && pass.frames == pass.copied ? wal : nil
                } catch {
                    caughtUpAt = nil
                    logger.debug("background checkpoint skipped: \(error)")
                }
            }
        }
        thread.name = "parley-sqlite-checkpoint"
        thread.start()
    }

    /// One PASSIVE checkpoint on `checkpointer` while `writer` holds the write lock: the WAL's
    /// frames, and how many of them are in the database file now.
    static func pass(writer: DatabasePool, checkpointer: DatabaseQueue) throws -> (frames: Int, copied: Int) {
        try writer.write { _ in
            try checkpointer.writeWithoutTransaction { db in
                guard let row = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(PASSIVE)") else { return (0, 0) }
                return (row[1], row[2])
            }
        }
    }

    func stop() { stopped.withLock { $0 = true } }

    /// Checkpoints begun (those skipped because nothing was committed are not counted).
    let checkpoints = Atomic(0)
}

/// What `stat` says of a WAL database's `-wal` file — its inode, size and times of change — which
/// every commit changes (it writes frames into the file) and a checkpoint does not (it copies them
/// out). Looking costs one `stat`, where a checkpoint that found nothing to copy cost an idle
/// worker a connection's locks and statements every 50 ms: 17 % of its CPU. No file of the
/// database is opened here: closing a descriptor of a file drops every POSIX lock this process
/// holds on it — the locks SQLite's connections keep on those files — and readers in the other
/// processes could then be handed frames that are being overwritten.
///
/// The times are the kernel's coarse clock (a few ms): a commit in the same tick as the one
/// before, into a WAL rewound to the same size, looks like no change; the checkpointer therefore
/// also looks at least once a second.
struct WALFileState: Equatable, Sendable {
    var inode: UInt64
    var size: Int64
    var modified: timespec
    var changed: timespec

    /// The state of `databasePath`'s WAL, or nil when it cannot be read (not created yet, or gone).
    static func of(databasePath: String) -> WALFileState? {
        var info = stat()
        guard stat(databasePath + "-wal", &info) == 0 else { return nil }
        return WALFileState(inode: UInt64(info.st_ino), size: Int64(info.st_size), modified: info.st_mtim, changed: info.st_ctim)
    }

    static func == (a: WALFileState, b: WALFileState) -> Bool {
        a.inode == b.inode && a.size == b.size
            && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
            && a.changed.tv_sec == b.changed.tv_sec && a.changed.tv_nsec == b.changed.tv_nsec
    }
}
