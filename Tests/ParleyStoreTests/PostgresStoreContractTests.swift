import Foundation
import ParleyModel
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

    /// The sessions, blocks, reports and deletions migrations undone by hand as docs/OPERATIONS.md says,
    /// newest first, then applied again: the revocations they did not own survive, and sessions,
    /// blocks and reports work as before.
    @Test func theAccountMigrationsUndoneAsDocumentedApplyAgain() async throws {
        let store = try PostgresChatStore(url: ProcessInfo.processInfo.environment["PARLEY_TEST_POSTGRES_URL"] ?? "")
        defer { store.shutdown() }
        try await store.migrate()
        let user = UserID.make()
        let session = StoredSession(tokenId: UUID().uuidString, userId: user, createdAt: Date(), lastUsedAt: Date(), expiresAt: Date().addingTimeInterval(60), userAgent: nil)
        try await store.openSession(session)
        try await store.revokeToken(session.tokenId, expiresAt: session.expiresAt)
        let gone = UserID.make()
        try await store.createUser(StoredUser(user: User(id: gone, handle: "gone-\(gone.rawValue.suffix(8))", displayName: "G", createdAt: Date()), passwordHash: "h1"))
        _ = try await store.beginDeletion(of: gone, erase: false, at: Date())
        let named = User(id: .make(), handle: "named-\(gone.rawValue.suffix(8).lowercased())", displayName: "Zed Quux\(gone.rawValue.suffix(6))", createdAt: Date())
        try await store.createUser(StoredUser(user: named, passwordHash: "h1"))
        let photo = try await ChatStoreContract.pictureAndMessage(of: named.id, to: user, in: store)
        var commits = 0
        for try await count in try await store.client.query("SELECT count(*) FROM pg_proc WHERE proname = 'parley_commit'").decode(Int.self) { commits = count }
        #expect(commits == 4, "each commit before stays beside the one after it, for a release from before")
        for statement in [
            "DROP INDEX messages_words", "DROP INDEX messages_long_words", "ALTER TABLE messages DROP COLUMN search_vector",
            "CREATE INDEX messages_search ON messages USING GIN (to_tsvector('simple', search_text))",
            "DELETE FROM parley_migrations WHERE version = 26",
            "DROP INDEX messages_search", "ALTER TABLE messages DROP COLUMN search_text",
            "DROP FUNCTION parley_commit(TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[])",
            "DELETE FROM parley_migrations WHERE version = 25",
            "ALTER TABLE users DROP COLUMN metadata", "ALTER TABLE users DROP COLUMN private_metadata", "ALTER TABLE conversations DROP COLUMN metadata", "ALTER TABLE members DROP COLUMN metadata",
            "ALTER TABLE messages DROP COLUMN metadata",
            "DROP FUNCTION parley_commit(TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[])",
            "DELETE FROM parley_migrations WHERE version = 24",
            "UPDATE media SET referenced = FALSE, created_at = 0 WHERE id IN (SELECT avatar_media_id FROM users UNION SELECT photo_media_id FROM conversations) AND id NOT IN (SELECT media_id FROM media_references)",
            "DROP INDEX users_by_avatar", "DROP INDEX conversations_by_photo", "DROP INDEX users_profile_untold", "ALTER TABLE users DROP COLUMN avatar", "ALTER TABLE users DROP COLUMN avatar_media_id",
            "ALTER TABLE users DROP COLUMN profile_version", "ALTER TABLE users DROP COLUMN profile_told", "ALTER TABLE users DROP COLUMN profile_changed_at", "ALTER TABLE conversations DROP COLUMN photo", "ALTER TABLE conversations DROP COLUMN photo_media_id",
            "DELETE FROM parley_migrations WHERE version = 23",
            "DROP TABLE user_names", "DELETE FROM parley_migrations WHERE version = 22",
            "DROP TABLE mentions", "DROP INDEX messages_replies", "ALTER TABLE messages DROP COLUMN reply_to", "ALTER TABLE messages DROP COLUMN reply_quote",
            "ALTER TABLE messages DROP COLUMN mentions", "ALTER TABLE conversations DROP COLUMN pinned",
            "DROP FUNCTION parley_commit(TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[], TEXT[])",
            "DELETE FROM parley_migrations WHERE version = 21",
            "DROP TABLE message_changes", "DROP TABLE reactions", "DROP TABLE message_versions", "ALTER TABLE conversations DROP COLUMN last_change_seq",
            "DROP INDEX messages_tombstones", "ALTER TABLE messages DROP COLUMN edited_at", "ALTER TABLE messages DROP COLUMN deleted_by", "ALTER TABLE messages DROP COLUMN reactions",
            "DELETE FROM parley_migrations WHERE version = 20",
            "UPDATE users SET password_hash = '!' WHERE deleted_at IS NOT NULL",
            "DROP INDEX removals_by_conversation", "DROP INDEX users_deletions_unfinished", "DROP INDEX users_deletions_owing_webhooks",
            "ALTER TABLE users DROP COLUMN deleted_at", "ALTER TABLE users DROP COLUMN deletion_erase",
            "ALTER TABLE users DROP COLUMN deletion_finished_at", "ALTER TABLE users DROP COLUMN deletion_webhooks_owed",
            "DROP TABLE erasures", "ALTER TABLE messages DROP COLUMN erased_at", "DELETE FROM parley_migrations WHERE version = 19",
            "DROP TABLE reports", "ALTER TABLE users DROP COLUMN suspended_at", "DELETE FROM parley_migrations WHERE version = 18",
            "DROP TABLE blocks", "DELETE FROM parley_migrations WHERE version = 17",
            "DROP TABLE sessions", "ALTER TABLE users DROP COLUMN password_changed_at", "DELETE FROM parley_migrations WHERE version = 16",
        ] {
            try await store.client.query(PostgresQuery(unsafeSQL: statement))
        }
        try await store.migrate()
        #expect(try await store.isTokenRevoked(session.tokenId), "a revocation outlived the undo")
        #expect(try await store.searchUsers(prefix: "quux\(gone.rawValue.suffix(6))", limit: 5).map(\.id) == [named.id], "the names stored before are found once it is applied again")
        #expect(try await store.user(id: named.id)?.user.avatar == nil, "the undo took the profile photo")
        #expect(try await store.searchMessages(of: user, terms: SearchText.terms(of: "elodie findable"), in: nil, window: 10, offset: 0, limit: 5).count == 1,
                "a message stored before is found once the search migration is applied again")
        #expect(try await store.removeUnattachedMedia(uploadedBefore: Date(), limit: 10_000).contains { $0.media.id == photo.media.id }, "and handed its upload to the sweeper")
        let again = StoredSession(tokenId: UUID().uuidString, userId: user, createdAt: Date(), lastUsedAt: Date(), expiresAt: Date().addingTimeInterval(60), userAgent: "x")
        try await store.openSession(again)
        #expect(try await store.session(again.tokenId)?.userAgent == "x")
        #expect(try await store.block(Block(blocker: user, blocked: .make()), at: Date()))
        let report = Report(id: .make(), reporterId: user, userId: .make(), conversationId: nil, seq: nil, reason: .spam, note: nil, message: nil, createdAt: Date())
        #expect(try await store.fileReport(report).created)
        #expect(try await store.user(id: gone)?.passwordHash == "!", "a deleted account cannot sign in after the undo")
        #expect(try await store.beginDeletion(of: gone, erase: true, at: Date())?.erase == true)
    }
}
