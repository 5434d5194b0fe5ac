import GRDB
import GRDBSQLite

/// Binding and stepping a cached statement through SQLite's C API. The commit runs three or four
/// statements per append; GRDB's `StatementArguments` (an existential and a `DatabaseValue` per
/// value, an array per call) and `Row` cost more there than SQLite's own work on the statement.
/// Every use binds all of the statement's parameters, then steps it to the end, which resets it.
extension Statement {
    /// SQLite copies the bytes before `sqlite3_bind_text` returns (`SQLITE_TRANSIENT`).
    private static let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

    /// By length, never as a C string: a text is stored byte for byte as it was acknowledged.
    func bind(_ value: String, at index: Int32) {
        var value = value
        value.withUTF8 { bytes in
            guard let base = bytes.baseAddress, !bytes.isEmpty else {
                sqlite3_bind_text(sqliteStatement, index, "", 0, Self.transient)  // not a null pointer: that binds NULL
                return
            }
            base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                sqlite3_bind_text(sqliteStatement, index, $0, Int32(bytes.count), Self.transient)
            }
        }
    }

    func bind(_ value: Int64, at index: Int32) {
        sqlite3_bind_int64(sqliteStatement, index, value)
    }

    func bind(_ value: Int64?, at index: Int32) {
        if let value { sqlite3_bind_int64(sqliteStatement, index, value) } else { sqlite3_bind_null(sqliteStatement, index) }
    }

    func bind(_ value: String?, at index: Int32) {
        if let value { bind(value, at: index) } else { sqlite3_bind_null(sqliteStatement, index) }
    }

    /// Runs a statement that returns no rows.
    func run(in db: Database) throws {
        let code = sqlite3_step(sqliteStatement)
        sqlite3_reset(sqliteStatement)
        guard code == SQLITE_DONE else { throw error(code, in: db) }
    }

    /// Runs a statement that returns at most one row and hands that row's columns to `read` (nil
    /// when there is none).
    func runForOneRow<T>(in db: Database, _ read: (OpaquePointer) -> T) throws -> T? {
        defer { sqlite3_reset(sqliteStatement) }
        let code = sqlite3_step(sqliteStatement)
        switch code {
        case SQLITE_ROW: return read(sqliteStatement)
        case SQLITE_DONE: return nil
        default: throw error(code, in: db)
        }
    }

    /// Runs a query and hands each row's columns to `read`.
    func runForEachRow(in db: Database, _ read: (OpaquePointer) throws -> Void) throws {
        defer { sqlite3_reset(sqliteStatement) }
        while true {
            let code = sqlite3_step(sqliteStatement)
            switch code {
            case SQLITE_ROW: try read(sqliteStatement)
            case SQLITE_DONE: return
            default: throw error(code, in: db)
            }
        }
    }

    private func error(_ code: Int32, in db: Database) -> DatabaseError {
        let message = sqlite3_errmsg(db.sqliteConnection).map { String(cString: $0) }
        return DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: sql)
    }
}

extension Database {
    /// Runs `body` in an IMMEDIATE transaction begun and committed through cached statements, and
    /// rolls it back if `body` or the commit throws. GRDB's `write` parses and prepares `BEGIN` and
    /// `COMMIT` anew for every transaction: with one message per commit, cached statements took a
    /// message from 330 calls of malloc to 310 and from 1,002,000 instructions to 976,000
    /// (`Scripts/bench-instructions`).
    func immediateTransaction<T>(_ body: () throws -> T) throws -> T {
        try cachedStatement(sql: "BEGIN IMMEDIATE").run(in: self)
        do {
            let result = try body()
            try cachedStatement(sql: "COMMIT").run(in: self)
            return result
        } catch {
            try? rollback()  // GRDB's: rolls back only a transaction SQLite has not already ended
            throw error
        }
    }
}

/// The columns of a row that `runForOneRow` or `runForEachRow` hands over.
enum SQLiteColumn {
    static func int64(_ statement: OpaquePointer, _ index: Int32) -> Int64 { sqlite3_column_int64(statement, index) }

    /// By length, as it was bound (not up to a zero byte).
    static func string(_ statement: OpaquePointer, _ index: Int32) -> String {
        guard let text = sqlite3_column_text(statement, index) else { return "" }
        let count = Int(sqlite3_column_bytes(statement, index))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }

    static func optionalInt64(_ statement: OpaquePointer, _ index: Int32) -> Int64? {
        sqlite3_column_type(statement, index) == SQLITE_NULL ? nil : sqlite3_column_int64(statement, index)
    }

    static func optionalString(_ statement: OpaquePointer, _ index: Int32) -> String? {
        sqlite3_column_type(statement, index) == SQLITE_NULL ? nil : string(statement, index)
    }
}
