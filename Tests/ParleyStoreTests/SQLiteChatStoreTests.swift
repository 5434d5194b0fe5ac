import Foundation
import GRDB
import GRDBSQLite
import ParleyModel
import ParleyStore
import ParleyStoreSQLite
import ParleyTestKit
import Testing

@Suite struct SQLiteChatStoreTests {
    static func conversation(_ members: [UserID] = ["u_a", "u_b"]) -> ConversationRecord {
        ConversationRecord(
            id: .make(), kind: .direct, name: nil, ownerId: members[0], createdAt: Date(),
            members: members.map { ConversationMember(userId: $0, role: .member) })
    }

    /// Another process's connection to the store's file (an operator's tool), which waits for the
    /// write lock as any writer must: the store's background checkpoint holds it for each pass
    /// after a write, and a connection without a busy timeout that meets a pass fails at once.
    static func outsideConnection(_ path: String) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        return try DatabaseQueue(path: path, configuration: configuration)
    }

    static func append(_ id: ConversationID, _ epoch: Int64, _ text: String) -> AppendRequest {
        AppendRequest(conversationId: id, epoch: epoch, senderId: "u_a", clientMessageId: UUID().uuidString.lowercased(), text: text, sentAt: Date())
    }

    /// In a process of its own (the setting is process-wide, and this one's other tests use SQLite
    /// on other threads): turned off before the first database opens, SQLite keeps no memory
    /// statistics while the store writes — `sqlite3_memory_used` stays 0, which with them on
    /// counts every allocation.
    @Test func memoryStatisticsTurnedOffAtStartStayOffWhileTheStoreWrites() async {
        await #expect(processExitsWith: .success) {
            guard SQLiteChatStore.turnOffMemoryStatistics() else { exit(2) }
            let path = Scratch.path("parley-memstatus", suffix: ".sqlite")
            let store = try SQLiteChatStore(path: path)
            try await store.migrate()
            let record = Self.conversation()
            try await store.createConversation(record)
            let epoch = try await store.acquireOwnership(of: record.id)
            _ = try await store.commit((1...5).map { Self.append(record.id, epoch, "m\($0)") })
            exit(sqlite3_memory_used() == 0 ? 0 : 3)
        }
    }

    @Test func committedMessagesSurviveReopeningTheFile() async throws {
        let path = Scratch.path("parley-reopen", suffix: ".sqlite")
        let record = Self.conversation()
        do {
            let store = try SQLiteChatStore(path: path)
            try await store.migrate()
            try await store.createConversation(record)
            let epoch = try await store.acquireOwnership(of: record.id)
            _ = try await store.commit((1...5).map { Self.append(record.id, epoch, "m\($0)") })
        }
        let reopened = try SQLiteChatStore(path: path)
        try await reopened.migrate()  // already applied: a no-op
        #expect(try await reopened.messages(in: record.id, after: 0, limit: 10).map(\.text) == ["m1", "m2", "m3", "m4", "m5"])
        #expect(try await reopened.conversation(record.id)?.lastSeq == 5)
    }

    /// The group commit's thread commits through `blockingCommit`: the same commit as `commit(_:)`
    /// (seqs, idempotency, fencing), on the calling thread.
    @Test func theBlockingCommitIsTheCommit() async throws {
        let store = try await makeSQLiteStore()
        let blockingCommit = try #require(store.blockingCommit, "SQLite commits on the caller's thread")
        let record = Self.conversation()
        try await store.createConversation(record)
        let stale = try await store.acquireOwnership(of: record.id)
        let epoch = try await store.acquireOwnership(of: record.id)
        let first = Self.append(record.id, epoch, "m1")
        let appends = [first, Self.append(record.id, epoch, "m2"), first, Self.append(record.id, stale, "late"), Self.append(.make(), 1, "nowhere")]
        let outcomes = try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try blockingCommit(appends) }) }
        }
        #expect(outcomes.map(\.message?.seq) == [1, 2, 1, nil, nil])
        guard case .duplicate(let original) = outcomes[2], case .staleEpoch(let current) = outcomes[3], case .unknownConversation = outcomes[4] else {
            Issue.record("a retry, a stale owner and an unknown conversation: \(outcomes)")
            return
        }
        #expect(original.text == "m1")
        #expect(current == epoch)
        #expect(try await store.messages(in: record.id, after: 0, limit: 10).map(\.text) == ["m1", "m2"])
        #expect(try await store.conversation(record.id)?.lastSeq == 2)
        #expect(try blockingCommit([]).isEmpty)
    }

    /// A commit that fails part-way (here a trigger refuses its second message) stores none of its
    /// messages and leaves no transaction open: the next commit, on either path, stores its own
    /// from seq 1.
    @Test func aCommitThatFailsPartWayStoresNothingAndTheNextOneCommits() async throws {
        let path = Scratch.path("parley-rollback", suffix: ".sqlite")
        let store = try SQLiteChatStore(path: path)
        try await store.migrate()
        let blockingCommit = try #require(store.blockingCommit)
        let record = Self.conversation()
        try await store.createConversation(record)
        let epoch = try await store.acquireOwnership(of: record.id)
        let outside = try Self.outsideConnection(path)
        try await outside.write { db in
            try db.execute(sql: "CREATE TRIGGER refuse_boom BEFORE INSERT ON message_log WHEN NEW.text = 'boom' BEGIN SELECT RAISE(ABORT, 'boom refused'); END")
        }
        try outside.close()
        let refused = [Self.append(record.id, epoch, "m1"), Self.append(record.id, epoch, "boom")]
        #expect(throws: ChatStoreError.self) { try blockingCommit(refused) }
        await #expect(throws: ChatStoreError.self) { try await store.commit(refused) }
        #expect(try await store.messages(in: record.id, after: 0, limit: 10).isEmpty)
        #expect(try await store.conversation(record.id)?.lastSeq == 0)
        #expect(try blockingCommit([Self.append(record.id, epoch, "m2")]).map(\.message?.seq) == [1])
        #expect(try await store.commit([Self.append(record.id, epoch, "m3")]).map(\.message?.seq) == [2])
        #expect(try await store.messages(in: record.id, after: 0, limit: 10).map(\.text) == ["m2", "m3"])
    }

    /// Messages stored under schema v3 (clustered by conversation and seq, idempotency unique on
    /// conversation then clientMessageId) are all there after v4 rebuilt the table, v5 moved them
    /// into the message log and v6 indexed them by blocks of 64: read forwards, backwards and as the
    /// last message, a retried clientMessageId is still one message, and a new append continues the
    /// conversation.
    @Test func messagesAndTheirIdempotencySurviveTheMigrations() async throws {
        let path = Scratch.path("parley-v5", suffix: ".sqlite")
        let store = try SQLiteChatStore(path: path)
        try await store.migrate(upTo: SQLiteChatStore.migrationNames[2])
        let (a, b, c) = (Self.conversation(), Self.conversation(), Self.conversation())
        for record in [a, b, c] { try await store.createConversation(record) }
        let epoch = try await store.acquireOwnership(of: a.id)
        let epochC = try await store.acquireOwnership(of: c.id)
        // Rows as the v3 store wrote them, the conversations interleaved; c has two full blocks.
        let old = ([(a.id, 1), (b.id, 1), (a.id, 2), (a.id, 3), (b.id, 2)] + (1...130).map { (c.id, $0) }).map { id, seq in
            (id: id, seq: Int64(seq), cmid: UUID().uuidString.lowercased(), text: "old \(id == a.id ? "a" : id == b.id ? "b" : "c")\(seq)")
        }
        let database = try Self.outsideConnection(path)
        try await database.write { db in
            for row in old {
                try db.execute(
                    sql: "INSERT INTO messages (conversation_id, seq, sender_id, client_message_id, text, sent_at) VALUES (?, ?, 'u_a', ?, ?, 0)",
                    arguments: [row.id.rawValue, row.seq, row.cmid, row.text])
                try db.execute(sql: "UPDATE conversations SET last_seq = ? WHERE id = ?", arguments: [row.seq, row.id.rawValue])
            }
        }
        try database.close()
        try await store.migrate()
        #expect(try await store.messages(in: a.id, after: 0, limit: 10).map(\.text) == ["old a1", "old a2", "old a3"])
        #expect(try await store.messages(in: b.id, after: 1, limit: 10).map(\.text) == ["old b2"])
        #expect(try await store.messages(in: a.id, before: 3, limit: 1).map(\.text) == ["old a2"])
        #expect(try await store.lastMessages(in: [a.id, b.id]).mapValues(\.text) == [a.id: "old a3", b.id: "old b2"])
        let outcomes = try await store.commit([
            AppendRequest(conversationId: a.id, epoch: epoch, senderId: "u_b", clientMessageId: old[2].cmid, text: "retried", sentAt: Date()),
            Self.append(a.id, epoch, "new a4"),
        ])
        guard case .duplicate(let original) = outcomes.first else {
            Issue.record("a clientMessageId stored before the migrations is a duplicate after them: \(outcomes)")
            return
        }
        #expect(original.seq == 2 && original.text == "old a2")
        #expect(outcomes.last?.message?.seq == 4)
        #expect(try await store.message(in: b.id, clientMessageId: old[1].cmid)?.seq == 1)
        // The members moved to their new table, and the sender's watermarks still follow its sends.
        let members = try #require(try await store.conversation(a.id)).members
        #expect(members.map(\.userId) == ["u_a", "u_b"])
        #expect(members.first?.readSeq == 4 && members.first?.deliveredSeq == 4)
        #expect(try await store.messages(in: a.id, after: 0, limit: 10).map(\.text) == ["old a1", "old a2", "old a3", "new a4"])
        #expect(try await store.messages(in: a.id, before: 5, limit: 2).map(\.text) == ["old a3", "new a4"])
        _ = try await store.commit([Self.append(c.id, epochC, "new c131")])
        let textsC = (1...130).map { "old c\($0)" } + ["new c131"]
        #expect(try await store.messages(in: c.id, after: 0, limit: 1_000).map(\.text) == textsC)
        #expect(try await store.messages(in: c.id, after: 60, limit: 10).map(\.text) == Array(textsC[60..<70]))
        #expect(try await store.messages(in: c.id, before: 129, limit: 3).map(\.text) == ["old c126", "old c127", "old c128"])
        let database6 = try Self.outsideConnection(path)
        let blocks = try await database6.read { db in
            try Int64.fetchAll(db, sql: "SELECT block FROM message_blocks WHERE conversation_id = ? ORDER BY block", arguments: [c.id.rawValue])
        }
        try database6.close()
        #expect(blocks == [0, 1])
    }

    /// The sessions, blocks and reports migrations undone by hand as docs/OPERATIONS.md says,
    /// newest first, then applied again: the revocations they did not own survive, and sessions,
    /// password changes, blocks and suspensions work as before.
    @Test func theAccountMigrationsUndoneAsDocumentedApplyAgain() async throws {
        let path = Scratch.path("parley-undo", suffix: ".sqlite")
        let store = try SQLiteChatStore(path: path)
        try await store.migrate()
        let user = UserID.make()
        try await store.createUser(StoredUser(user: User(id: user, handle: "undo", displayName: "U", createdAt: Date()), passwordHash: "h1"))
        let session = StoredSession(tokenId: "t1", userId: user, createdAt: Date(), lastUsedAt: Date(), expiresAt: Date().addingTimeInterval(60), userAgent: nil)
        try await store.openSession(session)
        try await store.revokeToken("t1", expiresAt: session.expiresAt)
        let gone = UserID.make()
        try await store.createUser(StoredUser(user: User(id: gone, handle: "gone", displayName: "G", createdAt: Date()), passwordHash: "h1"))
        _ = try await store.beginDeletion(of: gone, erase: false, at: Date())
        let named = User(id: .make(), handle: "named", displayName: "Zed Quux", createdAt: Date())
        try await store.createUser(StoredUser(user: named, passwordHash: "h1"))
        let photo = try await ChatStoreContract.pictureAndMessage(of: named.id, to: user, in: store)
        let database = try Self.outsideConnection(path)
        try await database.write { db in
            try db.execute(sql: "DROP TABLE message_search; DELETE FROM grdb_migrations WHERE identifier LIKE 'v25:%';")
            try db.execute(sql: """
                ALTER TABLE users DROP COLUMN metadata; ALTER TABLE users DROP COLUMN private_metadata; ALTER TABLE conversations DROP COLUMN metadata; ALTER TABLE members DROP COLUMN metadata;
                ALTER TABLE message_log DROP COLUMN metadata; DELETE FROM grdb_migrations WHERE identifier LIKE 'v24:%';
                """)
            try db.execute(sql: """
                UPDATE media SET referenced = FALSE, created_at = 0 WHERE id IN (SELECT avatar_media_id FROM users UNION SELECT photo_media_id FROM conversations) AND id NOT IN (SELECT media_id FROM media_references);
                DROP INDEX users_by_avatar; DROP INDEX conversations_by_photo; DROP INDEX users_profile_untold; ALTER TABLE users DROP COLUMN avatar; ALTER TABLE users DROP COLUMN avatar_media_id; ALTER TABLE users DROP COLUMN profile_version;
                ALTER TABLE users DROP COLUMN profile_told; ALTER TABLE users DROP COLUMN profile_changed_at; ALTER TABLE conversations DROP COLUMN photo; ALTER TABLE conversations DROP COLUMN photo_media_id;
                DELETE FROM grdb_migrations WHERE identifier LIKE 'v23:%';
                """)
            try db.execute(sql: "DROP TABLE user_names; DELETE FROM grdb_migrations WHERE identifier LIKE 'v22:%';")
            try db.execute(sql: """
                DROP TABLE mentions; DROP INDEX message_log_replies; ALTER TABLE message_log DROP COLUMN reply_to; ALTER TABLE message_log DROP COLUMN reply_quote;
                ALTER TABLE message_log DROP COLUMN mentions; ALTER TABLE conversations DROP COLUMN pinned;
                """)
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier LIKE 'v21:%';")
            try db.execute(sql: """
                DROP TABLE message_changes; DROP TABLE reactions; DROP TABLE message_versions; ALTER TABLE conversations DROP COLUMN last_change_seq;
                DROP INDEX message_log_tombstones; ALTER TABLE message_log DROP COLUMN edited_at; ALTER TABLE message_log DROP COLUMN deleted_by; ALTER TABLE message_log DROP COLUMN reactions;
                """)
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier LIKE 'v20:%';")
            try db.execute(sql: """
                UPDATE users SET password_hash = '!' WHERE deleted_at IS NOT NULL;
                DROP INDEX removals_by_conversation; DROP INDEX users_deletions_unfinished; DROP INDEX users_deletions_owing_webhooks;
                ALTER TABLE users DROP COLUMN deleted_at; ALTER TABLE users DROP COLUMN deletion_erase;
                ALTER TABLE users DROP COLUMN deletion_finished_at; ALTER TABLE users DROP COLUMN deletion_webhooks_owed;
                DROP TABLE erasures; ALTER TABLE message_log DROP COLUMN erased_at;
                """)
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier LIKE 'v19:%';")
            try db.execute(sql: "DROP TABLE reports; ALTER TABLE users DROP COLUMN suspended_at;")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier LIKE 'v18:%';")
            try db.execute(sql: "DROP TABLE blocks;")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier LIKE 'v17:%';")
            try db.execute(sql: "DROP TABLE sessions; ALTER TABLE users DROP COLUMN password_changed_at;")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier LIKE 'v16:%';")
        }
        try database.close()
        try await store.migrate()
        #expect(try await store.isTokenRevoked("t1"), "a revocation outlived the undo")
        #expect(try await store.searchUsers(prefix: "quu", limit: 5).map(\.id) == [named.id], "the names stored before are found once it is applied again")
        #expect(try await store.user(id: named.id)?.user.avatar == nil, "the undo took the profile photo")
        #expect(try await store.searchMessages(of: user, terms: SearchText.terms(of: "elodie findable"), in: nil, window: 10, offset: 0, limit: 5).count == 1,
                "a message stored before is found once the search migration is applied again")
        #expect(try await store.removeUnattachedMedia(uploadedBefore: Date(), limit: 10).map(\.media.id) == [photo.media.id], "and handed its upload to the sweeper")
        let now = Date().millisecondPrecision
        let again = StoredSession(tokenId: "t2", userId: user, createdAt: now, lastUsedAt: now, expiresAt: now.addingTimeInterval(60), userAgent: nil)
        try await store.openSession(again)
        #expect(try await store.changePassword(of: user, from: "h1", to: "h2", keeping: "t3", at: Date()) == [again])
        #expect(try await store.block(Block(blocker: user, blocked: "u_other"), at: now))
        #expect(try await store.setSuspended(user, since: now))
        #expect(try await store.user(id: user)?.suspendedAt == now)
        #expect(try await store.user(id: gone)?.passwordHash == "!", "a deleted account cannot sign in after the undo")
        #expect(try await store.beginDeletion(of: user, erase: true, at: now)?.erase == true)
    }

    /// A searcher in more conversations than the index's conversation words serve is filtered
    /// through the members' table instead: still only their conversations, still the newest
    /// matches within the window.
    @Test func aSearcherInManyConversationsIsFilteredByMembership() async throws {
        let store = try await makeSQLiteStore()
        let (me, other): (UserID, UserID) = ("u_many", "u_other")
        var mine: [(ConversationID, Int64)] = []
        for _ in 0...SQLiteChatStore.scopedSearchMax {
            let record = Self.conversation([me, "u_b"])
            try await store.createConversation(record)
            mine.append((record.id, try await store.acquireOwnership(of: record.id)))
        }
        let elsewhere = Self.conversation([other, "u_b"])
        try await store.createConversation(elsewhere)
        let elsewhereEpoch = try await store.acquireOwnership(of: elsewhere.id)
        var sent: [Message] = []
        for (id, epoch) in mine.suffix(4) {
            guard case .appended(let message) = try await store.commit([Self.append(id, epoch, "lantern \(sent.count)")]).first else { Issue.record("not appended"); return }
            sent.append(message)
        }
        _ = try await store.commit([Self.append(elsewhere.id, elsewhereEpoch, "lantern elsewhere")])
        let found = try await store.searchMessages(of: me, terms: SearchText.terms(of: "lant"), in: nil, window: 1_000, offset: 0, limit: 50)
        #expect(Set(found.map(\.id)) == Set(sent.map(\.id)), "their four, not the other user's")
        let newest = try await store.searchMessages(of: me, terms: SearchText.terms(of: "lantern"), in: nil, window: 2, offset: 0, limit: 50)
        #expect(Set(newest.map(\.id)) == Set(sent.suffix(2).map(\.id)), "the window keeps the newest")
        #expect(try await store.searchMessages(of: other, terms: SearchText.terms(of: "lantern"), in: nil, window: 1_000, offset: 0, limit: 50).map(\.text) == ["lantern elsewhere"])
    }

    /// Reads agree with the messages committed wherever they start and end among the blocks of 64
    /// that `message_blocks` indexes: in the first block, across block boundaries, in the last
    /// (partly filled) block, past the end — in conversations whose commits were interleaved.
    @Test func readsAgreeAcrossTheBlocksOfTheIndex() async throws {
        let store = try await makeSQLiteStore()
        var conversations: [(ConversationID, Int64)] = []
        for _ in 0..<3 {
            let record = Self.conversation()
            try await store.createConversation(record)
            conversations.append((record.id, try await store.acquireOwnership(of: record.id)))
        }
        // 150 messages each (two full blocks and part of a third), in commits of 1 to 7 per
        // conversation, the conversations interleaved.
        var expected: [ConversationID: [String]] = [:]
        var size = 0
        while expected.values.map(\.count).min() ?? 0 < 150 {
            size = size % 7 + 1
            var batch: [AppendRequest] = []
            for (id, epoch) in conversations {
                for _ in 0..<min(size, 150 - expected[id, default: []].count) {
                    let text = "\(id.rawValue.suffix(4)) m\(expected[id, default: []].count + 1)"
                    batch.append(Self.append(id, epoch, text))
                    expected[id, default: []].append(text)
                }
            }
            _ = try await store.commit(batch)
        }
        try await checkReads(store, expected)
        // A block entry missing (none is, but a read must not depend on it): the walk starts higher.
        let (first, _) = conversations[0]
        let database = try Self.outsideConnection(store.path)
        try await database.write { db in
            try db.execute(sql: "DELETE FROM message_blocks WHERE conversation_id = ? AND block = 0", arguments: [first.rawValue])
        }
        try database.close()
        try await checkReads(store, expected)
    }

    private func checkReads(_ store: SQLiteChatStore, _ expected: [ConversationID: [String]]) async throws {
        for (id, texts) in expected {
            #expect(try await store.messages(in: id, after: 0, limit: 1_000).map(\.text) == texts)
            for after in [0, 1, 62, 63, 64, 65, 100, 127, 128, 129, 149, 150, 151, 10_000] {
                for limit in [1, 2, 64, 65, 200] {
                    let want = Array(texts.dropFirst(after).prefix(limit))
                    #expect(try await store.messages(in: id, after: Int64(after), limit: limit).map(\.text) == want, "after \(after) limit \(limit)")
                    let before = after + 1
                    let wantBefore = Array(texts.prefix(before - 1).suffix(limit))
                    #expect(
                        try await store.messages(in: id, before: Int64(before), limit: limit).map(\.text) == wantBefore,
                        "before \(before) limit \(limit)")
                }
            }
            #expect(try await store.messages(in: id, after: .max, limit: 10).isEmpty)
            #expect(try await store.messages(in: id, before: .min, limit: 10).isEmpty)
            #expect(try await store.messages(in: id, before: .max, limit: 2).map(\.text) == Array(texts.suffix(2)))
            #expect(try await store.lastMessages(in: [id])[id]?.text == texts.last)
        }
    }

    /// A commit writes the block entry of each message that fills a block of 64, no other.
    @Test func theCommitThatFillsABlockIndexesIt() async throws {
        let store = try await makeSQLiteStore()
        let record = Self.conversation()
        try await store.createConversation(record)
        let epoch = try await store.acquireOwnership(of: record.id)
        _ = try await store.commit((1...63).map { Self.append(record.id, epoch, "m\($0)") })
        let database = try Self.outsideConnection(store.path)
        let blocks = { @Sendable in
            try await database.read { db in
                try Row.fetchAll(
                    db, sql: "SELECT b.block, m.seq FROM message_blocks b JOIN message_log m ON m.id = b.message WHERE b.conversation_id = ? ORDER BY b.block",
                    arguments: [record.id.rawValue]
                ).map { [$0[0] as Int64, $0[1] as Int64] }
            }
        }
        #expect(try await blocks().isEmpty)
        _ = try await store.commit([Self.append(record.id, epoch, "m64")])
        #expect(try await blocks() == [[0, 64]])
        _ = try await store.commit((65...200).map { Self.append(record.id, epoch, "m\($0)") })
        #expect(try await blocks() == [[0, 64], [1, 128], [2, 192]])
        try database.close()
    }

    /// A row whose value is not of its column's type (written by another tool, a damaged file)
    /// is an error of the read, not a crash of the node.
    @Test func aRowOfTheWrongTypeIsAnErrorNotACrash() async throws {
        let store = try await makeSQLiteStore()
        let record = Self.conversation()
        try await store.createConversation(record)
        let database = try Self.outsideConnection(store.path)
        try await database.write { db in
            try db.execute(sql: "UPDATE members SET delivered_seq = 'many' WHERE conversation_id = ?", arguments: [record.id.rawValue])
        }
        try database.close()
        await #expect(throws: ChatStoreError.self) { try await store.conversation(record.id) }
    }

    /// Two connections pools on one file stand for two node processes sharing the database.
    @Test func twoOpenersOfOneFileShareItSafely() async throws {
        let path = Scratch.path("parley-shared", suffix: ".sqlite")
        async let first = SQLiteChatStore(path: path)
        async let second = SQLiteChatStore(path: path)
        let stores = try await [first, second]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for store in stores { group.addTask { try await store.migrate() } }
            try await group.waitForAll()
        }
        let record = Self.conversation()
        try await stores[0].createConversation(record)
        // Ownership moves from the first opener to the second: the first's writes are fenced off.
        let oldEpoch = try await stores[0].acquireOwnership(of: record.id)
        _ = try await stores[0].commit([Self.append(record.id, oldEpoch, "first owner")])
        let newEpoch = try await stores[1].acquireOwnership(of: record.id)
        let outcomes = try await withThrowingTaskGroup(of: [AppendOutcome].self) { group in
            for i in 0..<20 {
                let store = stores[i % 2]
                let epoch = i % 2 == 0 ? oldEpoch : newEpoch
                group.addTask { try await store.commit([Self.append(record.id, epoch, "write \(i)")]) }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        let stale = outcomes.filter { if case .staleEpoch = $0 { return true }; return false }
        #expect(stale.count == 10, "every write with the old epoch fails")
        let seqs = try await stores[0].messages(in: record.id, after: 0, limit: 100).map(\.seq)
        #expect(seqs == Array(1...11))
    }
}

@Suite struct SQLiteBackgroundCheckpointTests {
    static func fileSize(_ path: String) -> Int {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
    }

    /// The WAL header's checkpoint sequence number (bytes 12–15, big-endian): SQLite adds one each
    /// time the WAL is rewound.
    static func walRewinds(_ path: String) -> UInt32 {
        guard let handle = FileHandle(forReadingAtPath: path + "-wal"), let header = try? handle.read(upToCount: 16), header.count == 16 else { return 0 }
        try? handle.close()
        return header[12...15].reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// With automatic checkpoints off, the store's own checkpointer copies the WAL into the database
    /// file while commits go on, and rewinds the WAL so that it stays smaller than what was written
    /// through it; nothing committed is lost.
    @Test func checkpointsRunInTheBackgroundAndTheWALStaysBounded() async throws {
        var settings = SQLiteChatStore.Settings()
        settings.backgroundCheckpoint = .milliseconds(5)
        let checkpointed = try await Self.commitBurst(settings: settings)
        // The same commits with no checkpoint at all: the WAL then holds every frame written.
        settings.backgroundCheckpoint = nil
        settings.walAutocheckpointPages = 0
        let neverRewound = try await Self.commitBurst(settings: settings)
        #expect(neverRewound.rewinds == 0 && neverRewound.largestWAL > 15_000 * 1_000, "without checkpoints the WAL keeps everything")
        #expect(neverRewound.databaseBytes < 15_000 * 1_000 / 10, "without checkpoints the messages are only in the WAL")
        // How large the WAL gets in between depends on how far a busy machine lets the checkpointer
        // fall behind, so the bound is generous: rewound, and at most half of everything.
        #expect(checkpointed.rewinds >= 2, "the WAL was rewound \(checkpointed.rewinds) times")
        #expect(checkpointed.largestWAL < neverRewound.largestWAL / 2, "WAL reached \(checkpointed.largestWAL) bytes, \(neverRewound.largestWAL) without checkpoints")
        #expect(checkpointed.databaseBytes > 15_000 * 1_000 / 2, "the database file holds \(checkpointed.databaseBytes) bytes: checkpoints did not run")
    }

    /// The checkpointer looks at the WAL every round but begins a checkpoint only after a commit
    /// (or a second after the last): an idle store does next to no work. A commit by another
    /// connection, as another process's, counts.
    @Test func backgroundCheckpointsRunOnlyAfterCommits() async throws {
        let path = Scratch.path("parley-checkpoint-idle", suffix: ".sqlite")
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        var settings = SQLiteChatStore.Settings()
        settings.backgroundCheckpoint = .milliseconds(5)
        let store = try SQLiteChatStore(path: path, settings: settings)
        defer { store.stopBackgroundWork() }
        try await store.migrate()
        let record = SQLiteChatStoreTests.conversation()
        try await store.createConversation(record)
        let epoch = try await store.acquireOwnership(of: record.id)
        _ = try await store.commit([SQLiteChatStoreTests.append(record.id, epoch, "first")])
        // Caught up once the same count holds for 20 rounds in a row.
        var settled = store.backgroundCheckpoints
        for _ in 0..<200 {
            try await Task.sleep(for: .milliseconds(100))
            if store.backgroundCheckpoints == settled { break }
            settled = store.backgroundCheckpoints
        }
        #expect(settled >= 1, "no checkpoint ran after the first commit")
        try await Task.sleep(for: .milliseconds(200))
        #expect(store.backgroundCheckpoints - settled <= 1, "\(store.backgroundCheckpoints - settled) checkpoints in 200 ms with nothing committed")

        // Another connection's commit (another process's, in a local cluster) wakes it too.
        var otherSettings = SQLiteChatStore.Settings()
        otherSettings.backgroundCheckpoint = nil
        let other = try SQLiteChatStore(path: path, settings: otherSettings)
        _ = try await other.commit([SQLiteChatStoreTests.append(record.id, epoch, "second")])
        for _ in 0..<100 where store.backgroundCheckpoints == settled {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(store.backgroundCheckpoints > settled, "the other connection's commit was not checkpointed")
        other.stopBackgroundWork()
    }

    /// 300 commits of 50 messages of 1,000 bytes into one new file, 5 ms apart when `settings`
    /// checkpoint in the background; the largest the WAL got, how often it was rewound, and the
    /// database file's size after the last commit (the file is then reopened to check every
    /// message is there).
    static func commitBurst(settings: SQLiteChatStore.Settings) async throws -> (largestWAL: Int, rewinds: UInt32, databaseBytes: Int) {
        let path = Scratch.path("parley-checkpoint", suffix: ".sqlite")
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let record = SQLiteChatStoreTests.conversation()
        var committed = 0
        var largestWAL = 0
        var rewinds: UInt32 = 0
        var databaseBytes = 0
        do {
            let store = try SQLiteChatStore(path: path, settings: settings)
            try await store.migrate()
            try await store.createConversation(record)
            let epoch = try await store.acquireOwnership(of: record.id)
            let text = String(repeating: "x", count: 1_000)
            for _ in 0..<300 {
                let outcomes = try await store.commit((0..<50).map { _ in SQLiteChatStoreTests.append(record.id, epoch, text) })
                committed += outcomes.count { if case .appended = $0 { true } else { false } }
                largestWAL = max(largestWAL, fileSize(path + "-wal"))
                rewinds = max(rewinds, walRewinds(path))
                if settings.backgroundCheckpoint != nil { try await Task.sleep(for: .milliseconds(5)) }
            }
            databaseBytes = fileSize(path)  // before closing the store checkpoints what is left
            store.stopBackgroundWork()
        }
        #expect(committed == 15_000)
        let reopened = try SQLiteChatStore(path: path)
        #expect(try await reopened.conversation(record.id)?.lastSeq == 15_000)
        reopened.stopBackgroundWork()
        return (largestWAL, rewinds, databaseBytes)
    }
}
