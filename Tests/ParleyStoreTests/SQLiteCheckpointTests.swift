import Foundation
import GRDB
@testable import ParleyStoreSQLite
import ParleyTestKit
import Synchronization
import Testing

/// SQLite before 3.51.3 can lose a commit that rewinds the WAL while a checkpoint runs on another
/// connection (``BackgroundCheckpointer``): the store's checkpoints run while its writer holds the
/// write lock.
@Suite struct SQLiteCheckpointTests {
    /// Seen from another connection, as another process would see it: when the checkpoint
    /// statement starts, no write can begin. The same look at a checkpoint run without the lock
    /// finds a write can, so the check can fail.
    @Test func aBackgroundCheckpointRunsWhileNoOtherConnectionCanWrite() throws {
        let path = Scratch.path("parley-checkpoint-lock", suffix: ".sqlite")
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let writer = try DatabasePool(path: path)
        try writer.write { db in
            try db.execute(sql: "CREATE TABLE t (x INTEGER)")
            for x in 0..<100 { try db.execute(sql: "INSERT INTO t (x) VALUES (?)", arguments: [x]) }
        }
        // No busy handler: a write that cannot begin at once fails with SQLITE_BUSY.
        let other = try DatabaseQueue(path: path)
        let couldBeginWrite = Mutex<[Bool]>([])
        var configuration = Configuration()
        configuration.prepareDatabase { (db: Database) in
            db.trace { (event: Database.TraceEvent) -> Void in
                guard case .statement(let statement) = event, statement.sql.contains("wal_checkpoint") else { return }
                var began = true
                do {
                    try other.writeWithoutTransaction { db in
                        try db.execute(sql: "BEGIN IMMEDIATE")
                        try db.execute(sql: "ROLLBACK")
                    }
                } catch {
                    began = false
                }
                couldBeginWrite.withLock { $0.append(began) }
            }
        }
        let checkpointer = try DatabaseQueue(path: path, configuration: configuration)

        let pass = try BackgroundCheckpointer.pass(writer: writer, checkpointer: checkpointer)
        #expect(couldBeginWrite.withLock { $0 } == [false], "another connection could begin a write during the checkpoint")
        #expect(pass.frames > 0 && pass.copied == pass.frames, "the pass copied \(pass.copied) of \(pass.frames) frames")

        try writer.write { db in try db.execute(sql: "INSERT INTO t (x) VALUES (100)") }
        try checkpointer.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)") }
        #expect(couldBeginWrite.withLock { $0 } == [false, true], "without the lock, the look found no write could begin either")
        #expect(try writer.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM t") } == 101)
    }
}
