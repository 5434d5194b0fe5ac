import Foundation
import ParleyModel
import ParleyStore
import ParleyStorePostgres
import Testing

/// The PostgreSQL store through what a failover does to its road to the server (a
/// ``FaultyLink`` in front of PARLEY_TEST_POSTGRES_URL's server): operations fail as
/// `unavailable` instead of waiting for the server, work again once it is back, and a commit
/// whose answer was lost is found in the store and answered as the duplicate when retried.
@Suite(
    .enabled(if: ProcessInfo.processInfo.environment["PARLEY_TEST_POSTGRES_URL"] != nil, "no PARLEY_TEST_POSTGRES_URL: no PostgreSQL to test against"),
    .serialized, .timeLimit(.minutes(2)))
struct PostgresFailoverTests {
    /// Far beyond what the store takes to notice (a second of no progress, a probe of at most 4 s)
    /// and far below what postgres-nio alone waits (60 s): an operation still waiting then hangs.
    static let patience: Duration = .seconds(30)

    /// A store on a link to the test server, migrated, with a conversation it owns.
    private static func storeBehindLink(maxConnections: Int = 8) async throws -> (FaultyLink, PostgresChatStore, ConversationID, Int64) {
        let url = try #require(URLComponents(string: ProcessInfo.processInfo.environment["PARLEY_TEST_POSTGRES_URL"] ?? ""))
        let link = try await FaultyLink(toHost: try #require(url.host), port: url.port ?? 5432)
        var linked = url
        linked.host = "127.0.0.1"
        linked.port = link.port
        let store = try PostgresChatStore(url: try #require(linked.string), maxConnections: maxConnections, concurrentCommits: min(2, maxConnections))
        try await store.migrate()
        let id = ConversationID.make()
        let alice = UserID(rawValue: "alice"), bob = UserID(rawValue: "bob")
        try await store.createConversation(ConversationRecord(
            id: id, kind: .direct, name: nil, ownerId: alice, createdAt: Date(),
            members: [ConversationMember(userId: alice, role: .owner), ConversationMember(userId: bob, role: .member)]))
        return (link, store, id, try await store.acquireOwnership(of: id))
    }

    private static func append(_ text: String, to id: ConversationID, epoch: Int64, cmid: String = UUID().uuidString.lowercased()) -> AppendRequest {
        AppendRequest(conversationId: id, epoch: epoch, senderId: UserID(rawValue: "alice"), clientMessageId: cmid, text: text, sentAt: Date())
    }

    /// `body`'s error, or nil if it succeeded; a test failure if it is still running after ``patience``.
    private static func failure(of body: @escaping @Sendable () async throws -> Void) async -> (any Error)? {
        await withTaskGroup(of: (any Error)??.self) { group in
            group.addTask {
                do { try await body(); return .some(nil) } catch { return .some(error) }
            }
            group.addTask {
                try? await Task.sleep(for: patience)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            guard let outcome = first else {
                Issue.record("still waiting after \(patience)")
                return nil
            }
            return outcome
        }
    }

    /// Retries `body` every 100 ms while the store says `unavailable`, for up to ``patience``.
    private static func onceBack<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        let deadline = ContinuousClock.now.advanced(by: patience)
        while true {
            do {
                return try await body()
            } catch let error as ChatStoreError where error.kind == .unavailable && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    @Test func aServerThatGoesFailsOperationsAtOnceAndTheyWorkWhenItIsBack() async throws {
        let (link, store, id, epoch) = try await Self.storeBehindLink()
        defer { store.shutdown() }
        let first = try await store.commit([Self.append("before", to: id, epoch: epoch)])
        guard case .appended(let before) = first.first else { Issue.record("the first commit answered \(first)"); return }

        await link.set(.refusing)
        let during = Self.append("during", to: id, epoch: epoch)
        let error = await Self.failure { _ = try await store.commit([during]) }
        #expect((error as? ChatStoreError)?.kind == .unavailable, "a commit while the server is away: \(String(describing: error))")
        // Known away now: refused without a try.
        let refused = await Self.failure { _ = try await store.messages(in: id, after: 0, limit: 10) }
        #expect((refused as? ChatStoreError)?.message.contains("has not accepted writes") == true, "\(String(describing: refused))")

        // Long enough for postgres-nio's own backoff to have grown past a second.
        try await Task.sleep(for: .seconds(4))
        await link.set(.open)
        let cameBack = ContinuousClock.now
        let retried = try await Self.onceBack { try await store.commit([during]) }
        print("commits flowed again \(cameBack.duration(to: .now)) after the server came back")
        guard case .appended(let message) = retried.first else { Issue.record("the retry answered \(retried)"); return }
        #expect(message.seq == before.seq + 1)
        #expect(try await store.messages(in: id, after: 0, limit: 10).map(\.text) == ["before", "during"])
        try await link.close()
    }

    @Test func aCommitWhoseAnswerWasLostIsFoundAndItsRetryIsTheDuplicate() async throws {
        // One connection, warmed before the answers go: with more, the commit could be handed to
        // a connection the pool opens while answers are swallowed, whose handshake never ends, and
        // the commit would never leave.
        let (link, store, id, epoch) = try await Self.storeBehindLink(maxConnections: 1)
        defer { store.shutdown() }
        _ = try await store.commit([Self.append("warm the pool", to: id, epoch: epoch)])

        await link.set(.swallowingAnswers)
        let lost = Self.append("answer lost", to: id, epoch: epoch)
        let error = await Self.failure { _ = try await store.commit([lost]) }
        #expect((error as? ChatStoreError)?.kind == .unavailable, "a commit whose answer never came: \(String(describing: error))")

        await link.set(.open)
        let found = try await Self.onceBack { try await store.message(in: id, clientMessageId: lost.clientMessageId) }
        #expect(found?.text == "answer lost", "the commit reached the server before its answer was lost")
        let retried = try await store.commit([lost])
        guard case .duplicate(let original) = retried.first else { Issue.record("the retry answered \(retried)"); return }
        #expect(original.seq == found?.seq)
        #expect(try await store.messages(in: id, after: 0, limit: 10).map(\.text) == ["warm the pool", "answer lost"])
        try await link.close()
    }
}
