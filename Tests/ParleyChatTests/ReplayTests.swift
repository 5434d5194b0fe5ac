import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Testing

/// A resume's replay, read from the user's actor page by page.
@Suite(.serialized) struct ReplayTests {
    static let base = Date(millisecondsSince1970: 1_800_000_000_000)
    static let reader: UserID = "u_reader"
    static let writer: UserID = "u_writer"

    /// A store with conversations whose messages were sent one a second from `base` on, `counts`
    /// messages each, and a user actor for `reader` on one node.
    static func start(counts: [Int]) async throws -> (LoopbackCluster, [ConversationID]) {
        let store = InMemoryChatStore()
        try await registerUsers([reader, writer], in: store)
        var conversations: [ConversationID] = []
        for (index, count) in counts.enumerated() {
            let id = ConversationID(rawValue: "c_\(index)")
            try await store.createConversation(ConversationRecord(
                id: id, kind: .group, name: "g\(index)", ownerId: writer, createdAt: base.addingTimeInterval(-3_600),
                members: [ConversationMember(userId: writer, role: .owner), ConversationMember(userId: reader, role: .member)]))
            let epoch = try await store.acquireOwnership(of: id)
            let appends = (0..<count).map { seq in
                AppendRequest(conversationId: id, epoch: epoch, senderId: writer, clientMessageId: "\(id.rawValue)-\(seq)", text: String(repeating: "x", count: 100), sentAt: base.addingTimeInterval(Double(seq)))
            }
            for chunk in stride(from: 0, to: appends.count, by: 500) { _ = try await store.commit(Array(appends[chunk..<min(chunk + 500, appends.count)])) }
            conversations.append(id)
        }
        let services = ChatServices(store: store, clock: ContinuousClock())
        let cluster = try LoopbackCluster { system, _ in UserActor.register(on: system, services: services) }
        try await cluster.start("node-a")
        try await cluster.waitForUp(["node-a"])
        return (cluster, conversations)
    }

    /// Every page of a replay from `since`: the pages' events in order, and how many pages.
    static func replayAll(_ cluster: LoopbackCluster, since: Date, cursor: Date, messagesMax: Int = 5_000) async throws -> (events: [ChatEvent], pages: Int) {
        let actor = try UserActor.resolve(reader, using: cluster["node-a"])
        var page = try await actor.replay(since: since, cursor: cursor, messagesMax: messagesMax)
        var events = page.events
        var pages = 1
        while let next = page.next {
            page = try await actor.replay(continuing: next)
            events += page.events
            pages += 1
            #expect(page.events.count <= 1_100, "a page is bounded")
        }
        return (events, pages)
    }

    /// Everything after the replay's start and nothing before, each conversation in seq order and
    /// once, over as many pages as it takes, whatever the number of messages: the messages before
    /// the start are found by bisection, not read.
    @Test(arguments: [[0, 10, 3_000], [70, 65, 64, 63], [2_500, 2_500]])
    func aReplayHasEveryMessageAfterItsStartOnceInSeqOrder(counts: [Int]) async throws {
        let (cluster, conversations) = try await Self.start(counts: counts)
        defer { Task { await cluster.stopAll() } }
        // From 60.5 s in: messages of seq 62 on (seq n was sent at n − 1 s).
        let since = Self.base.addingTimeInterval(60.5)
        let (events, pages) = try await Self.replayAll(cluster, since: since, cursor: since)
        let messages = events.compactMap { if case .message(let message) = $0 { message } else { nil } }
        for (conversation, count) in zip(conversations, counts) {
            let seqs = messages.filter { $0.conversationId == conversation }.map(\.seq)
            #expect(seqs == (count >= 62 ? Array(62...Int64(count)) : []), "\(conversation)")
        }
        #expect(messages.allSatisfy { $0.sentAt > since })
        #expect(pages >= messages.count / 1_000 + 1)
    }

    /// A resume from long ago is refused (the client reloads instead) by the messages after its
    /// cursor, not by those of the window before it: a client that reconnects at once resumes
    /// however busy its conversations were in the last minute.
    @Test func onlyMessagesAfterTheCursorCountAgainstTheLimit() async throws {
        let (cluster, _) = try await Self.start(counts: [3_000, 3_000])
        defer { Task { await cluster.stopAll() } }
        let cursor = Self.base.addingTimeInterval(2_989.5)  // seqs 2991…3000 after it, in each
        let (events, _) = try await Self.replayAll(cluster, since: cursor.addingTimeInterval(-60), cursor: cursor, messagesMax: 100)
        #expect(events.count { if case .message = $0 { true } else { false } } == 2 * 70)
        await #expect(throws: ClusterCallError.self) {
            _ = try await Self.replayAll(cluster, since: cursor.addingTimeInterval(-60), cursor: cursor.addingTimeInterval(-60), messagesMax: 100)
        }
    }
}
