import GRDB
import Logging
import ParleyModel

/// Builds `message_index` (conversation, seq → message) behind the commits.
///
/// A commit appends its messages to `message_log` in commit order and links each to its
/// conversation's previous message; it writes no page of its own per conversation. A pass of the
/// indexer reads the messages committed since the last pass (ids above `indexed_through`), sorts
/// them by conversation and seq, and inserts them into the index 500 at a time, so a
/// conversation's index page is written once per pass instead of once per commit; then it moves
/// `indexed_through` up.
///
/// The rule reads depend on: the entries of one conversation in the index are always its seqs
/// 1…k for some k (a pass takes the lowest unindexed ids, and a conversation's ids grow with its
/// seqs; its entries go in seq order). So a conversation's messages are the indexed ones plus
/// those reached by following the links back from its last message while the seq is above k.
/// Passes may run at once in several processes sharing the file: entries are inserted or ignored,
/// and `indexed_through` only moves up after everything below it is in.
enum MessageIndexer {
    /// Entries per write transaction: each holds the write lock for about a millisecond, so
    /// commits queued behind it wait no longer than that.
    static let entriesPerCommit = 500
    /// Messages read per pass; a pass that reads this many is followed by another at once.
    static let messagesPerPass = 200_000
    /// Messages read per read transaction (a millisecond or two).
    static let messagesPerRead = 2_000

    /// A task that runs a pass every `interval` until cancelled.
    static func start(pool: DatabasePool, every interval: Duration, logger: Logger) -> Task<Void, Never> {
        Task.detached(priority: .utility) {
            while !Task.isCancelled {
                do {
                    try await Task.sleep(for: interval)
                } catch {
                    return
                }
                do {
                    while try await indexCommitted(pool: pool) >= messagesPerPass, !Task.isCancelled {}
                } catch is CancellationError {
                    return
                } catch {
                    logger.warning("indexing messages failed (the next pass tries again): \(error)")
                }
            }
        }
    }

    /// One pass; returns the messages it read. `entriesMax` stops the pass part-way (tests use it
    /// to read with a partly built index): it then leaves `indexed_through` where it was.
    @discardableResult
    static func indexCommitted(pool: DatabasePool, entriesMax: Int? = nil) async throws -> Int {
        // Read on a reader connection in short transactions (a long one would hold up the
        // checkpointer's RESTART, which blocks every commit until the readers of the old WAL are
        // gone), grouped by conversation: each conversation's messages come in id order, which is
        // its seq order. Messages never change once committed, so the pieces add up.
        var byConversation: [String: [(seq: Int64, message: Int64)]] = [:]
        var read = 0
        // A file not migrated yet (the store starts its indexer when it opens, and another process
        // may be applying the migrations) has nothing to index.
        let progress = try await pool.read { db -> Int64? in
            guard try db.tableExists("message_index_progress") else { return nil }
            return try Int64.fetchOne(db, sql: "SELECT indexed_through FROM message_index_progress") ?? 0
        }
        guard var through = progress else { return 0 }
        while read < messagesPerPass {
            let (rows, last) = try await pool.read { [through] db -> ([(String, Int64, Int64)], Int64) in
                let select = try db.cachedStatement(sql: "SELECT id, conversation_id, seq FROM message_log WHERE id > ? ORDER BY id LIMIT ?")
                select.bind(through, at: 1)
                select.bind(Int64(messagesPerRead), at: 2)
                var rows: [(String, Int64, Int64)] = []
                var last = through
                try select.runForEachRow(in: db) { row in
                    last = SQLiteColumn.int64(row, 0)
                    rows.append((SQLiteColumn.string(row, 1), SQLiteColumn.int64(row, 2), last))
                }
                return (rows, last)
            }
            for (conversation, seq, message) in rows { byConversation[conversation, default: []].append((seq, message)) }
            read += rows.count
            through = last
            if rows.count < messagesPerRead { break }
        }
        guard read > 0 else { return 0 }
        var budget = entriesMax ?? Int.max
        var stoppedEarly = false
        var pending: [(conversation: String, seq: Int64, message: Int64)] = []
        pending.reserveCapacity(entriesPerCommit)
        func flush() async throws {
            guard !pending.isEmpty else { return }
            let chunk = pending
            pending.removeAll(keepingCapacity: true)
            try await pool.write { db in
                let insert = try db.cachedStatement(sql: """
                    INSERT INTO message_index (conversation_id, seq, message) VALUES (?, ?, ?)
                    ON CONFLICT (conversation_id, seq) DO NOTHING
                    """)
                for entry in chunk {
                    insert.bind(entry.conversation, at: 1)
                    insert.bind(entry.seq, at: 2)
                    insert.bind(entry.message, at: 3)
                    try insert.run(in: db)
                }
            }
        }
        // Conversations in key order, so that consecutive writes land on neighbouring pages.
        passes: for conversation in byConversation.keys.sorted() {
            for entry in byConversation[conversation] ?? [] {
                guard budget > 0 else {
                    stoppedEarly = true
                    break passes
                }
                budget -= 1
                pending.append((conversation, entry.seq, entry.message))
                if pending.count == entriesPerCommit { try await flush() }
            }
        }
        try await flush()
        if !stoppedEarly {
            try await pool.write { [through] db in
                try db.execute(sql: "UPDATE message_index_progress SET indexed_through = max(indexed_through, ?)", arguments: [through])
            }
        }
        return read
    }

    // MARK: Reads over the index and the unindexed messages

    /// The first `limit` messages after `seq`: `indexed` holds the first of them from the index
    /// (fewer than `limit`), `unindexed` the conversation's messages above the index, newest first.
    static func readAfter(_ seq: Int64, limit: Int, indexed: [Message], unindexed: [Message]) -> [Message] {
        Array((indexed + unindexed.reversed().filter { $0.seq > seq }).prefix(limit))
    }

    /// The last `limit` messages before `seq`, oldest first: `indexedNewestFirst` from the index,
    /// `unindexed` the conversation's messages above the index, newest first.
    static func readBefore(_ seq: Int64, limit: Int, indexedNewestFirst: [Message], unindexed: [Message]) -> [Message] {
        Array((unindexed.filter { $0.seq < seq } + indexedNewestFirst).prefix(limit).reversed())
    }
}
