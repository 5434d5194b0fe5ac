import Foundation
import GRDB
import ParleyModel

/// What ``OfflineClient`` keeps on the device, in SQLite: the outbox, the conversations, the
/// recent messages of each, the members' profiles and the event stream's cursor. Each change is
/// one transaction, committed before the client does anything on the network that depends on
/// it: a message is in the outbox before its first byte is sent.
///
/// It holds one user's data: opened by another user, it forgets the first one's (outbox included).
public final class ClientStore: Sendable {
    /// How the files are encrypted at rest, through the platform's data protection (iOS, iPadOS,
    /// watchOS, visionOS; other platforms keep the files as the file system does).
    public enum Protection: Sendable, Hashable {
        /// The platform's default for the app (on iOS: until the first unlock after a restart).
        case `default`
        /// Readable from the first unlock after the device starts until it shuts down: the
        /// outbox can be sent and the stream applied while the device is locked (a background
        /// fetch, a push that wakes the app).
        case untilFirstUnlock
        /// Readable only while the device is unlocked: nothing can be read or written in the
        /// background while it is locked, so the outbox waits for the next unlock.
        case complete
    }

    let database: any DatabaseWriter
    /// Where the outbox keeps its own copies of attachments (nil in memory: files are read where
    /// the app put them).
    let filesDirectory: URL?
    /// How many of each conversation's latest messages are kept.
    public let recentMessages: Int

    /// The store in `directory` (made if missing): `parley.sqlite` and, for the outbox's
    /// attachments, `outbox-files/`. Put it in the app group container when a share extension
    /// sends too. `recentMessages` is how many of each conversation's latest messages are kept.
    public init(directory: URL, protection: Protection = .default, recentMessages: Int = 200) throws {
        guard recentMessages >= 1 else { throw Self.invalid("recentMessages must be at least 1, not \(recentMessages)") }
        let files = directory.appendingPathComponent("outbox-files", isDirectory: true)
        try FileManager.default.createDirectory(at: files, withIntermediateDirectories: true)
        try Self.protect([directory, files], protection)
        var configuration = Configuration()
        // Another process (a share extension) may hold the write lock for a moment.
        configuration.busyMode = .timeout(5)
        let pool = try DatabasePool(path: directory.appendingPathComponent("parley.sqlite").path, configuration: configuration)
        try Self.migrator.migrate(pool)
        // The WAL and shared-memory files exist once the pool wrote: they hold the same data.
        try Self.protect(["parley.sqlite", "parley.sqlite-wal", "parley.sqlite-shm"].map { directory.appendingPathComponent($0) }, protection)
        self.database = pool
        self.filesDirectory = files
        self.recentMessages = recentMessages
    }

    /// A store that lives as long as this object: for tests and command-line tools.
    public static func inMemory(recentMessages: Int = 200) throws -> ClientStore {
        try ClientStore(database: DatabaseQueue(), recentMessages: recentMessages)
    }

    private init(database: DatabaseQueue, recentMessages: Int) throws {
        guard recentMessages >= 1 else { throw Self.invalid("recentMessages must be at least 1, not \(recentMessages)") }
        try Self.migrator.migrate(database)
        self.database = database
        self.filesDirectory = nil
        self.recentMessages = recentMessages
    }

    static func invalid(_ message: String) -> ParleyError {
        ParleyError(status: 0, code: "invalid_configuration", message: message, retryable: false)
    }

    /// Data protection is a file attribute on Apple's devices; elsewhere there is none to set.
    private static let platformHasDataProtection: Bool = {
        #if os(iOS) || os(watchOS) || os(tvOS) || os(visionOS)
            true
        #else
            false
        #endif
    }()

    private static func protect(_ urls: [URL], _ protection: Protection) throws {
        let type: FileProtectionType
        switch protection {
        case .default: return
        case .untilFirstUnlock: type = .completeUntilFirstUserAuthentication
        case .complete: type = .complete
        }
        guard platformHasDataProtection else { return }
        // A folder's class is the one new files in it get (the WAL, an attachment's copy).
        for url in urls where FileManager.default.fileExists(atPath: url.path) {
            try FileManager.default.setAttributes([.protectionKey: type], ofItemAtPath: url.path)
        }
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            // Bodies are the API's JSON: the server's form, so a newer server's fields survive.
            try db.execute(
                sql: """
                    CREATE TABLE account (id INTEGER PRIMARY KEY CHECK (id = 1), userId TEXT NOT NULL, cursor TEXT);
                    CREATE TABLE conversation (id TEXT PRIMARY KEY, activity REAL NOT NULL, body TEXT NOT NULL);
                    CREATE INDEX conversationByActivity ON conversation (activity DESC);
                    CREATE TABLE message (
                        conversationId TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
                        PRIMARY KEY (conversationId, seq)) WITHOUT ROWID;
                    CREATE TABLE user (id TEXT PRIMARY KEY, body TEXT NOT NULL);
                    CREATE TABLE outbox (
                        position INTEGER PRIMARY KEY AUTOINCREMENT, clientMessageId TEXT NOT NULL UNIQUE,
                        conversationId TEXT NOT NULL, failed INTEGER NOT NULL DEFAULT 0, body TEXT NOT NULL);
                    CREATE INDEX outboxByConversation ON outbox (conversationId, failed, position);
                    """)
        }
        return migrator
    }

    static let encoder = API.makeEncoder()
    static let decoder = API.makeDecoder()

    // Text, not a blob: SQLite's JSON functions read a blob as its binary JSON form.
    static func encode(_ value: some Encodable) throws -> String { String(decoding: try encoder.encode(value), as: UTF8.self) }
    static func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T { try decoder.decode(type, from: Data(text.utf8)) }
}

// MARK: Reading

extension ClientStore {
    /// The user the store holds the data of, and the stream's cursor.
    func account() throws -> (user: UserID, cursor: String?)? {
        try database.read { db in
            try Row.fetchOne(db, sql: "SELECT userId, cursor FROM account").map { (UserID(rawValue: $0["userId"]), $0["cursor"]) }
        }
    }

    /// The conversations held, newest activity first.
    public func conversations() throws -> [API.Conversation] {
        try database.read { db in try Self.conversations(db) }
    }

    public func conversation(_ id: ConversationID) throws -> API.Conversation? {
        try database.read { db in try Self.conversation(db, id) }
    }

    /// The messages held of a conversation (its latest ``recentMessages``, or fewer), ascending.
    public func messages(in id: ConversationID) throws -> [Message] {
        try database.read { db in try Self.messages(db, id) }
    }

    /// What waits to be sent (and what failed), oldest first; in one conversation when given.
    public func outbox(in id: ConversationID? = nil) throws -> [OutboxEntry] {
        try database.read { db in try Self.outbox(db, id) }
    }

    public func user(_ id: UserID) throws -> User? {
        try database.read { db in
            try String.fetchOne(db, sql: "SELECT body FROM user WHERE id = ?", arguments: [id.rawValue]).map { try Self.decode(User.self, $0) }
        }
    }

    static func conversations(_ db: Database) throws -> [API.Conversation] {
        try String.fetchAll(db, sql: "SELECT body FROM conversation ORDER BY activity DESC, id").map { try decode(API.Conversation.self, $0) }
    }

    static func conversation(_ db: Database, _ id: ConversationID) throws -> API.Conversation? {
        try String.fetchOne(db, sql: "SELECT body FROM conversation WHERE id = ?", arguments: [id.rawValue]).map { try decode(API.Conversation.self, $0) }
    }

    static func messages(_ db: Database, _ id: ConversationID) throws -> [Message] {
        try String.fetchAll(db, sql: "SELECT body FROM message WHERE conversationId = ? ORDER BY seq", arguments: [id.rawValue])
            .map { try decode(Message.self, $0) }
    }

    static func message(_ db: Database, _ id: ConversationID, _ seq: Int64) throws -> Message? {
        try String.fetchOne(db, sql: "SELECT body FROM message WHERE conversationId = ? AND seq = ?", arguments: [id.rawValue, seq])
            .map { try decode(Message.self, $0) }
    }

    /// The lowest and highest seq held of a conversation (nil: none held).
    static func heldRange(_ db: Database, _ id: ConversationID) throws -> ClosedRange<Int64>? {
        guard let row = try Row.fetchOne(db, sql: "SELECT MIN(seq) AS low, MAX(seq) AS high FROM message WHERE conversationId = ?", arguments: [id.rawValue]),
            let low: Int64 = row["low"], let high: Int64 = row["high"]
        else { return nil }
        return low...high
    }

    static func outbox(_ db: Database, _ id: ConversationID?) throws -> [OutboxEntry] {
        let bodies: [String]
        if let id {
            bodies = try String.fetchAll(db, sql: "SELECT body FROM outbox WHERE conversationId = ? ORDER BY position", arguments: [id.rawValue])
        } else {
            bodies = try String.fetchAll(db, sql: "SELECT body FROM outbox ORDER BY position")
        }
        return try bodies.map { try decode(OutboxEntry.self, $0) }
    }
}

// MARK: Writing

extension ClientStore {
    /// Makes the store `user`'s: another user's data (from a previous sign-in) is removed. A
    /// store no user had yet keeps what it holds (an outbox written before the user was known is
    /// this user's). Answers whether anything was removed.
    @discardableResult
    func bind(to user: UserID) throws -> Bool {
        try database.write { db in
            let held = try String.fetchOne(db, sql: "SELECT userId FROM account")
            guard held != user.rawValue else { return false }
            if held != nil {
                for table in ["account", "conversation", "message", "user", "outbox"] { try db.execute(sql: "DELETE FROM \(table)") }
            }
            try db.execute(sql: "INSERT INTO account (id, userId) VALUES (1, ?)", arguments: [user.rawValue])
            return held != nil
        }
    }

    static func setCursor(_ db: Database, _ cursor: String) throws {
        try db.execute(sql: "UPDATE account SET cursor = ?", arguments: [cursor])
    }

    static func put(_ db: Database, _ conversation: API.Conversation) throws {
        let activity = (conversation.lastMessage?.sentAt ?? conversation.createdAt).timeIntervalSince1970
        try db.execute(
            sql: "INSERT INTO conversation (id, activity, body) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET activity = excluded.activity, body = excluded.body",
            arguments: [conversation.id.rawValue, activity, try encode(conversation)])
    }

    static func removeConversation(_ db: Database, _ id: ConversationID) throws {
        try db.execute(sql: "DELETE FROM conversation WHERE id = ?", arguments: [id.rawValue])
        try db.execute(sql: "DELETE FROM message WHERE conversationId = ?", arguments: [id.rawValue])
    }

    /// Puts a message (replacing the one held at its seq), and keeps only the latest
    /// `recentMessages` seqs of its conversation.
    func put(_ db: Database, _ message: Message) throws {
        try Self.putMessage(db, message)
        try db.execute(
            sql: "DELETE FROM message WHERE conversationId = ? AND seq <= ?",
            arguments: [message.conversationId.rawValue, (try Self.heldRange(db, message.conversationId)?.upperBound ?? 0) - Int64(recentMessages)])
    }

    static func putMessage(_ db: Database, _ message: Message) throws {
        try db.execute(
            sql: "INSERT INTO message (conversationId, seq, body) VALUES (?, ?, ?) ON CONFLICT (conversationId, seq) DO UPDATE SET body = excluded.body",
            arguments: [message.conversationId.rawValue, message.seq, try encode(message)])
    }

    static func put(_ db: Database, _ user: User) throws {
        try db.execute(
            sql: "INSERT INTO user (id, body) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET body = excluded.body",
            arguments: [user.id.rawValue, try encode(user)])
    }

    static func put(_ db: Database, _ entry: OutboxEntry) throws {
        try db.execute(
            sql: """
                INSERT INTO outbox (clientMessageId, conversationId, failed, body) VALUES (?, ?, ?, ?)
                ON CONFLICT (clientMessageId) DO UPDATE SET failed = excluded.failed, body = excluded.body
                """,
            arguments: [entry.clientMessageId, entry.conversationId.rawValue, entry.failure != nil, try encode(entry)])
    }

    static func removeFromOutbox(_ db: Database, _ clientMessageId: String) throws {
        try db.execute(sql: "DELETE FROM outbox WHERE clientMessageId = ?", arguments: [clientMessageId])
    }

    static func outboxEntry(_ db: Database, _ clientMessageId: String) throws -> OutboxEntry? {
        try String.fetchOne(db, sql: "SELECT body FROM outbox WHERE clientMessageId = ?", arguments: [clientMessageId]).map { try decode(OutboxEntry.self, $0) }
    }

    /// Per conversation, how many entries wait and how many failed.
    static func outboxCounts(_ db: Database) throws -> [ConversationID: (waiting: Int, failed: Int)] {
        var counts: [ConversationID: (waiting: Int, failed: Int)] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT conversationId, SUM(failed = 0) AS waiting, SUM(failed) AS failed FROM outbox GROUP BY conversationId") {
            counts[ConversationID(rawValue: row["conversationId"])] = (row["waiting"], row["failed"])
        }
        return counts
    }

    /// The next entry of the conversation to send: its oldest that has not failed.
    static func nextToSend(_ db: Database, in id: ConversationID) throws -> OutboxEntry? {
        try String.fetchOne(db, sql: "SELECT body FROM outbox WHERE conversationId = ? AND failed = 0 ORDER BY position LIMIT 1", arguments: [id.rawValue])
            .map { try decode(OutboxEntry.self, $0) }
    }

    /// The conversations with entries waiting to be sent.
    static func conversationsWithPending(_ db: Database) throws -> [ConversationID] {
        try String.fetchAll(db, sql: "SELECT DISTINCT conversationId FROM outbox WHERE failed = 0").map(ConversationID.init(rawValue:))
    }
}
