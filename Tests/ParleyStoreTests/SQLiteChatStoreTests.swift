import Foundation
import ParleyModel
import ParleyStore
import ParleyStoreSQLite
import Testing

@Suite struct SQLiteChatStoreTests {
    static func conversation(_ members: [UserID] = ["u_a", "u_b"]) -> ConversationRecord {
        ConversationRecord(
            id: .make(), kind: .direct, name: nil, ownerId: members[0], createdAt: Date(),
            members: members.map { ConversationMember(userId: $0, role: .member) })
    }

    static func append(_ id: ConversationID, _ epoch: Int64, _ text: String) -> AppendRequest {
        AppendRequest(conversationId: id, epoch: epoch, senderId: "u_a", clientMessageId: UUID().uuidString.lowercased(), text: text, sentAt: Date())
    }

    @Test func committedMessagesSurviveReopeningTheFile() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("parley-reopen-\(UUID().uuidString).sqlite").path
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

    /// Messages stored under schema v3 (idempotency unique on conversation, then clientMessageId)
    /// are all there after v4 rebuilt the table, and a retried clientMessageId is still one message.
    @Test func messagesAndTheirIdempotencySurviveTheV4Migration() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("parley-v4-\(UUID().uuidString).sqlite").path
        let store = try SQLiteChatStore(path: path)
        try await store.migrate(upTo: SQLiteChatStore.migrationNames[2])
        let record = Self.conversation()
        try await store.createConversation(record)
        let epoch = try await store.acquireOwnership(of: record.id)
        let before = (1...3).map { Self.append(record.id, epoch, "old \($0)") }
        _ = try await store.commit(before)
        try await store.migrate()
        #expect(try await store.messages(in: record.id, after: 0, limit: 10).map(\.text) == ["old 1", "old 2", "old 3"])
        let outcomes = try await store.commit([before[1], Self.append(record.id, epoch, "new")])
        guard case .duplicate(let original) = outcomes.first else {
            Issue.record("a clientMessageId stored before the migration is a duplicate after it: \(outcomes)")
            return
        }
        #expect(original.seq == 2 && original.text == "old 2")
        #expect(outcomes.last?.message?.seq == 4)
        #expect(try await store.message(in: record.id, clientMessageId: before[0].clientMessageId)?.seq == 1)
    }

    /// Two connections pools on one file stand for two node processes sharing the database.
    @Test func twoOpenersOfOneFileShareItSafely() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("parley-shared-\(UUID().uuidString).sqlite").path
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
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("parley-checkpoint-\(UUID().uuidString).sqlite").path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        var settings = SQLiteChatStore.Settings()
        settings.backgroundCheckpoint = .milliseconds(5)
        settings.checkpointRestartFrames = 100
        let record = SQLiteChatStoreTests.conversation()
        var committed = 0
        var largestWAL = 0
        var rewinds: UInt32 = 0
        do {
            let store = try SQLiteChatStore(path: path, settings: settings)
            try await store.migrate()
            try await store.createConversation(record)
            let epoch = try await store.acquireOwnership(of: record.id)
            let text = String(repeating: "x", count: 1_000)
            for _ in 0..<300 {
                let outcomes = try await store.commit((0..<50).map { _ in SQLiteChatStoreTests.append(record.id, epoch, text) })
                committed += outcomes.count { if case .appended = $0 { true } else { false } }
                largestWAL = max(largestWAL, Self.fileSize(path + "-wal"))
                rewinds = max(rewinds, Self.walRewinds(path))
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        // 15,000 messages of 1,000+ bytes went through the WAL; a WAL never rewound would hold them
        // all (how large it gets in between depends on how far a busy machine lets the checkpointer
        // fall behind, so only "rewound, and smaller than everything" is asserted).
        let written = committed * 1_000
        #expect(committed == 15_000)
        #expect(rewinds >= 2, "the WAL was rewound \(rewinds) times")
        #expect(largestWAL < written, "WAL reached \(largestWAL) bytes for \(written) bytes written")
        #expect(Self.fileSize(path) > written / 2, "the database file holds \(Self.fileSize(path)) bytes: checkpoints did not run")
        let reopened = try SQLiteChatStore(path: path)
        let head = try await reopened.conversation(record.id)
        #expect(head?.lastSeq == 15_000)
    }
}
