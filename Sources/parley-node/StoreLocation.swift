import Logging
import ParleyStore
import ParleyStoreSQLite

/// Where a worker's store is, from `--store`.
enum StoreLocation: CustomStringConvertible {
    /// `sqlite:PATH`: the embedded store.
    case sqlite(path: String)

    init?(parsing text: String) {
        if text.hasPrefix("sqlite:") {
            let path = String(text.dropFirst("sqlite:".count))
            guard !path.isEmpty else { return nil }
            self = .sqlite(path: path)
        } else {
            return nil
        }
    }

    var description: String {
        switch self {
        case .sqlite(let path): "sqlite:\(path)"
        }
    }

    /// Opens the store and applies its migrations.
    func open(logger: Logger) async throws -> any ChatStore {
        switch self {
        case .sqlite(let path):
            let store = try SQLiteChatStore(path: path, logger: logger)
            try await store.migrate()
            return store
        }
    }
}
