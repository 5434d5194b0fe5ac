import Foundation
import Logging
import ParleyStore
import ParleyStorePostgres
import ParleyStoreSQLite

/// Where a worker's store is, from `--store`.
enum StoreLocation: CustomStringConvertible {
    /// `sqlite:PATH`: the embedded store.
    case sqlite(path: String)
    /// `postgres://USER@HOST:PORT/DATABASE`: for nodes on several machines.
    case postgres(url: String)

    init?(parsing text: String) {
        if text.hasPrefix("sqlite:") {
            let path = String(text.dropFirst("sqlite:".count))
            guard !path.isEmpty else { return nil }
            self = .sqlite(path: path)
        } else if text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") {
            self = .postgres(url: text)
        } else {
            return nil
        }
    }

    var description: String {
        switch self {
        case .sqlite(let path): "sqlite:\(path)"
        case .postgres(let url): url.replacingOccurrences(of: #"://([^:@/]+):[^@/]*@"#, with: "://$1:***@", options: .regularExpression)
        }
    }

    /// The least time between the starts of two commits, unless `--commit-interval` says.
    /// SQLite: 5 ms — a commit costs a worker about as much for one message as for several (each
    /// re-reads the pages other processes changed and writes a WAL frame per page it dirtied), and
    /// without an interval a worker at ~700 appends/s committed them one by one (1.04 a commit).
    /// PostgreSQL: none (not measured there; its two commits at once batch already).
    var defaultCommitInterval: Duration {
        switch self {
        case .sqlite: .milliseconds(5)
        case .postgres: .zero
        }
    }

    /// Opens the store and applies its migrations.
    func open(logger: Logger) async throws -> any ChatStore {
        switch self {
        case .sqlite(let path):
            let store = try SQLiteChatStore(path: path, logger: logger)
            try await store.migrate()
            return store
        case .postgres(let url):
            let store = try PostgresChatStore(url: url, logger: logger)
            // As long as a failover may take, with room: the node waits rather than exits.
            try await store.migrate(waitingForServer: .seconds(60))
            return store
        }
    }
}
