import Foundation
import ParleyModel
import ParleyStore
import ParleyStoreSQLite
import Testing

/// A fresh SQLite database in a temporary folder.
func makeSQLiteStore() async throws -> SQLiteChatStore {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-store-\(UUID().uuidString)")
    let store = try SQLiteChatStore(path: directory.appendingPathComponent("parley.sqlite").path)
    try await store.migrate()
    return store
}

@Suite struct InMemoryStoreContractTests {
    @Test(arguments: ChatStoreContract.cases)
    func contract(_ contractCase: ChatStoreContract.Case) async throws {
        try await contractCase.run(InMemoryChatStore())
    }
}

@Suite struct SQLiteStoreContractTests {
    @Test(arguments: ChatStoreContract.cases)
    func contract(_ contractCase: ChatStoreContract.Case) async throws {
        try await contractCase.run(try await makeSQLiteStore())
    }
}
