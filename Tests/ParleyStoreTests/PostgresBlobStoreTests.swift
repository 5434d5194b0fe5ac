import Foundation
import NIOCore
import ParleyMedia
import ParleyStorePostgres
import PostgresNIO
import ParleyTestKit
import Testing

/// The blob store contract on a real PostgreSQL (PARLEY_TEST_POSTGRES_URL, as the chat store's),
/// with small chunks so that every read and write crosses chunk boundaries.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["PARLEY_TEST_POSTGRES_URL"] != nil, "no PARLEY_TEST_POSTGRES_URL: no PostgreSQL to test against"))
struct PostgresBlobStoreTests {
    static var url: String { ProcessInfo.processInfo.environment["PARLEY_TEST_POSTGRES_URL"] ?? "" }

    @Test(arguments: BlobStoreContract.cases)
    func contract(_ contractCase: BlobStoreContract.Case) async throws {
        let store = try PostgresChatStore(url: Self.url)
        defer { store.shutdown() }
        try await store.migrate()
        try await contractCase.run(PostgresBlobStore(store: store, chunkBytes: 10_000, wallClock: { Date() }))
    }

    @Test func anUploadLeftByADeadGatewayIsRemovedOnceOld() async throws {
        let store = try PostgresChatStore(url: Self.url)
        defer { store.shutdown() }
        try await store.migrate()
        let blobs = PostgresBlobStore(store: store, chunkBytes: 1_000, wallClock: { Date() })
        let upload = try await blobs.beginUpload()
        try await upload.write(ByteBuffer(repeating: 7, count: 3_500))
        // The gateway dies here: three chunks stay under the upload's name, no blob.
        func leftover() async throws -> Int {
            var count = 0
            for try await _ in try await store.client.query("SELECT part FROM media_chunks WHERE blob LIKE 'upload:%'").decode(Int32.self) { count += 1 }
            return count
        }
        #expect(try await leftover() >= 3)
        #expect(try await blobs.removeLeftovers(olderThan: .seconds(3600)) == 0, "not old yet: its gateway may still be writing")
        try await store.client.query("UPDATE media_chunks SET written_at = written_at - 7200000 WHERE blob LIKE 'upload:%'")
        #expect(try await blobs.removeLeftovers(olderThan: .seconds(3600)) >= 3)
        #expect(try await leftover() == 0)
    }
}
