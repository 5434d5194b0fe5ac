import Foundation
import GRDB
import Observation
@testable import ParleyClient
import ParleyModel
import Testing

/// The store and the outbox without a server: what an app shows and keeps while offline.
@Suite struct ClientStoreTests {
    static let conversation = ConversationID(rawValue: "c1")

    /// A client whose only gateway refuses connections (loopback port 1): offline.
    static func offlineClient(store: ClientStore) throws -> OfflineClient {
        OfflineClient(client: try ParleyClient(configuration: .init(gateways: [URL(string: "https://127.0.0.1:1")!]), token: "token"), store: store)
    }

    static func message(_ seq: Int64, in conversation: ConversationID = conversation) -> Message {
        Message(conversationId: conversation, seq: seq, senderId: UserID(rawValue: "u1"), clientMessageId: "m\(seq)", text: "text \(seq)", sentAt: Date())
    }

    @Test func aConversationKeepsItsLatestMessagesOnly() throws {
        let store = try ClientStore.inMemory(recentMessages: 3)
        try store.database.write { db in
            for seq in Int64(1)...5 { try store.put(db, Self.message(seq)) }
            try store.put(db, Self.message(1, in: ConversationID(rawValue: "other")))
        }
        #expect(try store.messages(in: Self.conversation).map(\.seq) == [3, 4, 5])
        #expect(try store.messages(in: ConversationID(rawValue: "other")).map(\.seq) == [1])
        #expect(throws: ParleyError.self) { try ClientStore.inMemory(recentMessages: 0) }
    }

    /// A store signed into by another user forgets the first one's data, outbox included; a
    /// store no user had keeps the outbox written before the user was known.
    @Test func anotherUsersStoreIsEmptiedButANewOnesOutboxIsKept() async throws {
        let store = try ClientStore.inMemory()
        let offline = try Self.offlineClient(store: store)
        try offline.send("typed before sign-in was known", to: Self.conversation)
        #expect(try store.bind(to: UserID(rawValue: "alice")) == false)
        #expect(try store.outbox().count == 1)
        #expect(try store.bind(to: UserID(rawValue: "alice")) == false)
        try await store.database.write { db in try store.put(db, Self.message(1)) }
        #expect(try store.bind(to: UserID(rawValue: "bob")) == true)
        #expect(try store.outbox().isEmpty)
        #expect(try store.messages(in: Self.conversation).isEmpty)
        #expect(try store.account()?.user == UserID(rawValue: "bob"))
        try await offline.client.shutdown()
    }

    /// What is written is in the store, in order, before any network; an observer sees it at
    /// once; a failed entry can be retried or discarded.
    @Test func theOutboxIsWrittenFirstAndObservedAtOnce() async throws {
        let store = try ClientStore.inMemory()
        let offline = try Self.offlineClient(store: store)
        let snapshots = offline.conversation(Self.conversation)
        var iterator = snapshots.makeAsyncIterator()
        #expect(await iterator.next()?.outbox.isEmpty == true)
        let first = try offline.send("one", to: Self.conversation)
        try offline.send("two", to: Self.conversation)
        var seen = await iterator.next()
        while seen?.outbox.count != 2 { seen = await iterator.next() }
        #expect(seen?.outbox.map(\.text) == ["one", "two"])
        #expect(seen?.messages.isEmpty == true)

        _ = try offline.changeEntry(first.clientMessageId) { $0.failure = .init(status: 400, code: "invalid_request", message: "no") }
        #expect(try offline.chatSummaries().isEmpty, "the conversation is not held until synchronized")
        #expect(try store.outbox().map(\.failure?.status) == [400, nil])
        try offline.retry(first.clientMessageId)
        #expect(try store.outbox().allSatisfy { $0.failure == nil })
        try offline.discard(first.clientMessageId)
        #expect(try store.outbox().map(\.text) == ["two"])
        await offline.close()
        try await offline.client.shutdown()
    }

    /// The outbox keeps its own copy of an attachment (the app's file may be temporary) and
    /// removes it with the entry; the type is read from the file's first bytes.
    @Test func anAttachmentIsCopiedIntoTheStoreAndRemovedWithItsEntry() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("parley-store-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try ClientStore(directory: folder)
        let offline = try Self.offlineClient(store: store)
        let photo = folder.appendingPathComponent("photo.jpg")
        try FileManager.default.copyItem(at: LocalCluster.root.appendingPathComponent("Tests/ParleyMetadataTests/Fixtures/plain.jpg"), to: photo)
        let entry = try offline.send("look", attachments: [NewOutboxAttachment(file: photo)], to: Self.conversation)
        let copy = try #require(entry.attachments.first)
        #expect(copy.contentType == "image/jpeg")
        #expect(copy.file.deletingLastPathComponent().lastPathComponent == "outbox-files")
        try FileManager.default.removeItem(at: photo)
        #expect(FileManager.default.fileExists(atPath: copy.file.path), "the copy outlives the app's file")
        let text = folder.appendingPathComponent("notes.txt")
        try Data("plain words".utf8).write(to: text)
        #expect(throws: ParleyError.self) { try offline.send("no", attachments: [NewOutboxAttachment(file: text)], to: Self.conversation) }
        try offline.discard(entry.clientMessageId)
        #expect(!FileManager.default.fileExists(atPath: copy.file.path))
        #expect(try store.outbox().isEmpty)
        await offline.close()
        try await offline.client.shutdown()
    }

    @Test func whatTheOutboxRetriesAndWhatItMarksFailed() {
        func error(_ status: Int, _ code: String = "x", retryable: Bool = false) -> ParleyError {
            ParleyError(status: status, code: code, message: "", retryable: retryable)
        }
        for permanent in [error(400), error(403), error(404), error(409), error(413), error(0, "unreadable_file")] {
            #expect(OfflineClient.isPermanent(permanent), "\(permanent)")
        }
        for retried in [error(401), error(408), error(429), error(500), error(503, retryable: true), error(400, retryable: true), .unreachable("down")] {
            #expect(!OfflineClient.isPermanent(retried), "\(retried)")
        }
    }

    /// A sender waiting after a failure goes at once when woken (the network came back): woken
    /// until it returns, which without the wake-up would take the 60 s it was asked to wait.
    @Test func aWaitEndsWhenWoken() async {
        let wakeup = Wakeup()
        let ended = Counter()
        let waiting = Task {
            await wakeup.pause(for: .seconds(60))
            ended.add()
        }
        let returned = await eventually(within: .seconds(30)) {
            wakeup.wakeAll()
            return ended.value == 1
        }
        #expect(returned)
        waiting.cancel()
    }

    /// The observation API in an `@Observable` model, as a SwiftUI view would hold it.
    @Test func anObservableModelFollowsTheChatList() async throws {
        let store = try ClientStore.inMemory()
        let offline = try Self.offlineClient(store: store)
        let conversation = API.Conversation(
            ConversationRecord(
                id: Self.conversation, kind: .direct, name: nil, ownerId: UserID(rawValue: "u1"), createdAt: Date(),
                members: [ConversationMember(userId: UserID(rawValue: "u1"), role: .member)]),
            for: UserID(rawValue: "u1"))
        try await store.database.write { db in try ClientStore.put(db, conversation) }
        let model = await ChatListModel()
        let following = Task { await model.follow(offline) }
        #expect(await eventually { await MainActor.run { model.chats.map(\.id) } == [Self.conversation] })
        try offline.send("hello", to: Self.conversation)
        #expect(await eventually { await MainActor.run { model.chats.first?.waiting } == 1 })
        following.cancel()
        await offline.close()
        try await offline.client.shutdown()
    }
}

@MainActor @Observable final class ChatListModel {
    var chats: [ChatSummary] = []

    func follow(_ client: OfflineClient) async {
        for await chats in client.chatList() { self.chats = chats }
    }
}
