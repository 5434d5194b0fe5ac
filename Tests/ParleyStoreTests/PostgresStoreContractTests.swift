import Foundation
import ParleyStore
import ParleyStorePostgres
import PostgresNIO
import ParleyTestKit
import Testing

/// The contract on a real PostgreSQL: `Scripts/test` starts a throwaway server and sets
/// PARLEY_TEST_POSTGRES_URL; without one, these tests are reported as skipped (and the script
/// prints a loud SKIPPED line saying why).
@Suite(.enabled(if: ProcessInfo.processInfo.environment["PARLEY_TEST_POSTGRES_URL"] != nil, "no PARLEY_TEST_POSTGRES_URL: no PostgreSQL to test against"))
struct PostgresStoreContractTests {
    @Test(arguments: ChatStoreContract.cases)
    func contract(_ contractCase: ChatStoreContract.Case) async throws {
        let store = try PostgresChatStore(url: ProcessInfo.processInfo.environment["PARLEY_TEST_POSTGRES_URL"] ?? "")
        defer { store.shutdown() }
        try await store.migrate()
        try await contractCase.run(store)
    }

    @Test func concurrentMigrationsApplyEachVersionOnce() async throws {
        let url = ProcessInfo.processInfo.environment["PARLEY_TEST_POSTGRES_URL"] ?? ""
        let stores = try (0..<4).map { _ in try PostgresChatStore(url: url) }
        defer { stores.forEach { $0.shutdown() } }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for store in stores { group.addTask { try await store.migrate() } }
            try await group.waitForAll()
        }
        var versions: [Int] = []
        for try await version in try await stores[0].client.query("SELECT version FROM parley_migrations ORDER BY version").decode(Int.self) {
            versions.append(version)
        }
        #expect(versions == PostgresChatStore.migrations.map(\.version), "each version once")
    }
}
