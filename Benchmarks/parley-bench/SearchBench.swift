import ArgumentParser
import Foundation
import ParleyModel
import ParleyStore
import ParleyStorePostgres
import ParleyStoreSQLite
import PostgresNIO

/// Search latency over a large store: `--messages` messages in `--conversations` conversations,
/// texts of words drawn from a vocabulary as natural language draws them (a few words very
/// often, most rarely; one word in twenty Japanese; one message in fifty long), then searches
/// by one user who is in `--member-of` of the conversations.
struct SearchBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "search", abstract: "Time message searches over a large store.")

    @Option(help: "sqlite:PATH, postgres://USER@HOST:PORT/DB, or memory.")
    var store = "sqlite:/tmp/parley-search-\(UUID().uuidString).sqlite"
    @Option(help: "Messages written before the searches.")
    var messages = 1_000_000
    @Option(help: "Conversations they are spread over.")
    var conversations = 2_000
    @Option(help: "How many of them the searching user is a member of.")
    var memberOf = 50
    @Option(help: "Searches of each kind.")
    var searches = 1_000
    @Option(help: "Results asked per search.")
    var limit = 20
    @Option(help: "How many of the newest matches are ranked (the server ranks 1,000).")
    var window = 1_000
    @Flag(help: "With PostgreSQL, then also time the same kinds of searches through a pg_trgm index of the same text, for comparison.")
    var trigram = false
    @Flag(help: "Leave the store in place afterwards (its path, or the PostgreSQL database, and the searcher are printed), to look at its queries.")
    var keep = false

    /// Words of the vocabulary, the most common first.
    static let vocabulary: [String] = {
        var random = SeededRandom(seed: 7)
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        return (0..<20_000).map { _ in
            let length = 3 + Int(random.next() % 7)
            return String((0..<length).map { _ in letters[Int(random.next() % 26)] })
        }
    }()
    static let japanese: [String] = ["東京", "大阪", "会議", "明日", "写真", "ありがとう", "電車", "予定", "天気", "ご飯"]

    /// A word's index, drawn as Zipf's law (exponent 1) draws it: the r-th most common word r times
    /// rarer than the first.
    static func zipf(_ random: inout SeededRandom, count: Int) -> Int {
        let u = Double(random.next() % 1_000_000) / 1_000_000
        return min(count - 1, Int(pow(Double(count), u)) - 1)
    }

    func run() async throws {
        guard messages > 0, conversations > 0, (1...conversations).contains(memberOf), searches > 0 else {
            throw ValidationError("--messages, --conversations and --searches must be positive, --member-of within --conversations")
        }
        let (chatStore, path) = try openBenchmarkStore(store, sqlite: SQLiteChatStore.Settings())
        defer { if !keep { removeSQLiteFiles(path) } }
        try await chatStore.migrate()
        let searcher = UserID(rawValue: "u_searcher_\(UUID().uuidString.prefix(8).lowercased())")
        var owned: [(ConversationID, Int64)] = []
        for index in 0..<conversations {
            let id = ConversationID.make()
            let members = [index < memberOf ? searcher : "u_a", "u_b"]
            try await chatStore.createConversation(ConversationRecord(
                id: id, kind: .direct, name: nil, ownerId: members[0], createdAt: Date(),
                members: members.map { ConversationMember(userId: $0, role: .member) }))
            owned.append((id, try await chatStore.acquireOwnership(of: id)))
        }
        var random = SeededRandom(seed: 11)
        let started = ContinuousClock.now
        var written = 0
        while written < messages {
            let batch = (0..<min(1_000, messages - written)).map { _ in
                let (id, epoch) = owned[Int(random.next() % UInt64(owned.count))]
                // One message in fifty is long (60–119 words), as a pasted paragraph is.
                let count = random.next() % 50 == 0 ? 60 + Int(random.next() % 60) : 3 + Int(random.next() % 12)
                let words = (0..<count).map { _ in
                    random.next() % 20 == 0 ? Self.japanese[Int(random.next() % UInt64(Self.japanese.count))] : Self.vocabulary[Self.zipf(&random, count: Self.vocabulary.count)]
                }
                return AppendRequest(
                    conversationId: id, epoch: epoch, senderId: "u_b", clientMessageId: ClientMessageID.make(now: Date(), using: &random),
                    text: words.joined(separator: " "), sentAt: Date())
            }
            _ = try await chatStore.commit(batch)
            written += batch.count
        }
        let loading = started.duration(to: .now)
        print("\(messages) messages in \(conversations) conversations written in \(String(format: "%.1f", loading.seconds)) s (\(Int(Double(messages) / loading.seconds))/s, indexed as they commit); the searcher \(searcher) is in \(memberOf)\(keep ? "; the store is kept: \(path ?? store)" : "")")
        let kinds: [(String, () -> String)] = [
            ("a common word", { Self.vocabulary[Int(random.next() % 10)] }),
            ("a rare word", { Self.vocabulary[5_000 + Int(random.next() % 15_000)] }),
            ("two words", { "\(Self.vocabulary[Int(random.next() % 200)]) \(Self.vocabulary[Int(random.next() % 2_000)])" }),
            ("a word's first 3 letters", { String(Self.vocabulary[Int(random.next() % 1_000)].prefix(3)) }),
            ("Japanese", { Self.japanese[Int(random.next() % UInt64(Self.japanese.count))] }),
        ]
        func time(_ label: String, _ search: ([SearchText.Term]) async throws -> Int) async throws {
            for (kind, query) in kinds {
                var latencies = Latencies()
                var found = 0
                for _ in 0..<searches {
                    let terms = SearchText.terms(of: query())
                    let began = ContinuousClock.now
                    found += try await search(terms)
                    latencies.record(began.duration(to: .now))
                }
                print("\(searches) searches\(label) for \(kind), \(limit) asked (\(String(format: "%.1f", Double(found) / Double(searches))) found on average): " + latencies.summary([50, 99]))
            }
        }
        try await time("") { terms in
            try await chatStore.searchMessages(of: searcher, terms: terms, in: nil, window: window, offset: 0, limit: limit).count
        }
        guard trigram else { return }
        guard let postgres = chatStore as? PostgresChatStore else { throw ValidationError("--trigram needs a PostgreSQL store") }
        // The other index PostgreSQL offers for text: trigrams of the same folded text, each word
        // searched as a substring, a Japanese run as its characters with the spaces the text has.
        try await postgres.client.query("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        let building = ContinuousClock.now
        try await postgres.client.query("CREATE INDEX messages_trigrams ON messages USING GIN (search_text gin_trgm_ops)")
        try await postgres.client.query("ANALYZE messages")
        print("pg_trgm: the index built in \(String(format: "%.1f", building.duration(to: .now).seconds)) s")
        try await time(" through pg_trgm") { terms in
            let patterns = terms.map { term in
                switch term {
                case .word(let word): "%\(word)%"
                case .run(let characters): "%\(characters.joined(separator: " "))%"
                }
            }
            let text = terms.map { term in
                switch term {
                case .word(let word): word
                case .run(let characters): characters.joined(separator: " ")
                }
            }.joined(separator: " ")
            var count = 0
            for try await _ in try await postgres.client.query(
                """
                SELECT seq FROM messages
                WHERE conversation_id IN (SELECT conversation_id FROM members WHERE user_id = \(searcher.rawValue)) AND search_text LIKE ALL(\(patterns)::TEXT[])
                ORDER BY similarity(search_text, \(text)) DESC, sent_at DESC LIMIT \(limit)
                """
            ).decode(Int64.self) { count += 1 }
            return count
        }
    }
}
