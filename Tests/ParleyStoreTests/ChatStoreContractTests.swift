import Foundation
import ParleyModel
import ParleyStore
import ParleyStoreSQLite
import ParleyTestKit
import Testing

/// A fresh SQLite database in a temporary folder.
func makeSQLiteStore(settings: SQLiteChatStore.Settings = SQLiteChatStore.Settings()) async throws -> SQLiteChatStore {
    let store = try SQLiteChatStore(path: Scratch.path("parley-store", suffix: ".sqlite"), settings: settings)
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
