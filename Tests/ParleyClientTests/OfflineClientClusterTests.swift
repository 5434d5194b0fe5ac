import Foundation
@testable import ParleyClient
import ParleyModel
import Synchronization
import Testing

/// ``OfflineClient`` against real clusters (Scripts/cluster, real processes, TLS): messages typed
/// into the outbox survive a gateway's SIGKILL and the app being killed, and a store offline
/// past the replay window reloads to the server's history.
@Suite(.serialized) struct OfflineClientClusterTests {
    /// Alice writes 50 messages into her outbox while the gateway she uses is SIGKILLed (after
    /// the 15th), her app is "killed" (after the 30th: the client and store torn down with
    /// messages still waiting, and rebuilt on the same store folder), and then no gateway answers
    /// at all (31…40, until the first is restarted). Every other member (one in a direct
    /// conversation; two in a group, each streaming, their streams moving between gateways)
    /// receives the 50 once each, in the order typed, and the server holds exactly those 50.
    @Test(arguments: [1, 2]) func messagesTypedThroughAGatewayKillAndAnAppKillArriveOnceInOrder(receivers: Int) async throws {
        let cluster = try LocalCluster.start(workers: 1, gateways: 2)
        defer { cluster.down() }
        let (alice, aliceUser) = try await cluster.user("alice")
        var others: [(ParleyClient, User)] = []
        // The receivers use the second gateway: only Alice's goes down.
        for index in 0..<receivers { others.append(try await cluster.user("member\(index)", gateways: [1, 0])) }
        let conversation = try await alice.createConversation(with: others.map(\.1.id), name: receivers > 1 ? "group" : nil).id
        let connected = Counter()
        let streams = others.map { client, _ in
            Task {
                var texts: [String] = []
                do {
                    for try await event in client.events() {
                        if case .ready = event { connected.add() }
                        if case .message(let message) = event, message.conversationId == conversation { texts.append(message.text) }
                        if texts.count >= 50 { break }
                    }
                } catch {}
                return texts
            }
        }
        // A stream without a cursor starts from now: every member listens before Alice writes.
        #expect(await eventually { connected.value == receivers })
        let typed = (1...50).map { String(format: "message %02d", $0) }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("parley-outbox-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: folder) }

        var offline = OfflineClient(client: alice, store: try ClientStore(directory: folder))
        // The first message's answer was lost: the server stored it, the outbox still holds it.
        // Sent again with its clientMessageId, it is the same message, not a second one.
        let first = try offline.send(typed[0], to: conversation)
        _ = try await alice.send(typed[0], to: conversation, clientMessageId: first.clientMessageId)
        offline.start()
        var waitingAtTheAppKill = 0
        var waitingOffline: [String] = []
        for (index, text) in typed.enumerated().dropFirst() {
            let number = index + 1
            if number == 31 {
                // No gateway at all: the phone in the underground. 31…40 wait in the outbox.
                try cluster.cluster("kill", "gateway-2")
            }
            try offline.send(text, to: conversation)
            switch number {
            case 15:
                try cluster.cluster("kill", "gateway-1")
            case 30:
                // Killed with messages waiting: 16…30 were written in one burst.
                waitingAtTheAppKill = try offline.store.outbox().count
                await offline.close()
                try await offline.client.shutdown()
                let client = try cluster.client(token: alice.token)
                offline = OfflineClient(client: client, store: try ClientStore(directory: folder))
                offline.start()
            case 40:
                try await Task.sleep(for: .seconds(1))
                waitingOffline = try offline.store.outbox().map(\.text)
                // Back: nothing tells the outbox but its own stream reconnecting.
                try cluster.cluster("restart", "gateway-1")
            default:
                if number < 15 || number > 30 { try await Task.sleep(for: .milliseconds(30)) }
            }
        }
        #expect(Array(typed[30..<40]).allSatisfy(waitingOffline.contains), "while no gateway answered, 31…40 waited: \(waitingOffline)")
        #expect(waitingAtTheAppKill > 0, "the app was killed with messages still in its outbox")
        let drained = try await eventually(within: .seconds(60)) { try offline.store.outbox().isEmpty }
        let left = try offline.store.outbox().count
        #expect(drained, "the outbox still holds \(left) messages")
        #expect(offline.client.sendStream.answered.load(ordering: .relaxed) > 0, "the sends went on the gateway's send stream")

        // Each stream has 60 s to receive the 50 (it ends early once it has them).
        let deadline = Task {
            try await Task.sleep(for: .seconds(60))
            for stream in streams { stream.cancel() }
        }
        for stream in streams {
            let received = await stream.value
            #expect(received == typed, "a member's stream received \(received.count) messages")
        }
        deadline.cancel()
        let held = try await history(of: conversation, with: others[0].0)
        #expect(held.map(\.text) == typed)
        #expect(held.map(\.seq) == Array(1...50))
        #expect(Set(held.map(\.clientMessageId)).count == 50)
        #expect(held.allSatisfy { $0.senderId == aliceUser.id })
        // The store holds them as the server does, and says they are Alice's own (read).
        #expect(try offline.store.messages(in: conversation).map(\.text) == typed)
        await offline.close()
        try await offline.client.shutdown()
        for (client, _) in others { try await client.shutdown() }
    }

    /// Bob's app holds a conversation and goes offline twice. Back after a few messages and an
    /// edit, its stream resumes from the stored cursor and the replay brings them. Back after more
    /// changes than the cluster replays (`PARLEY_REPLAY_MAX=20`), its stream answers `410`, it
    /// reloads, and its store then equals the server's history: the messages sent meanwhile, and
    /// the edits and deletions of messages it already held.
    @Test func aStoreOfflinePastTheReplayWindowReloadsToTheServersHistory() async throws {
        let cluster = try LocalCluster.start(workers: 1, gateways: 1, settings: ["PARLEY_REPLAY_MAX": "20"])
        defer { cluster.down() }
        let (alice, _) = try await cluster.user("alice")
        let (bob, bobUser) = try await cluster.user("bob")
        let conversation = try await alice.createConversation(with: [bobUser.id]).id
        for index in 1...5 { _ = try await alice.send("before \(index)", to: conversation) }

        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("parley-store-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: folder) }
        var offline = OfflineClient(client: bob, store: try ClientStore(directory: folder))
        offline.start()
        // Held: the messages and the cursor the stream will resume from (stored after the reload
        // that brought the messages; closed between the two, the next start would reload again).
        #expect(try await eventually { try offline.store.messages(in: conversation).count == 5 && offline.store.account()?.cursor != nil })
        await offline.close()

        // Offline briefly (within the replay window): the stream resumes from the stored cursor
        // and its replay brings what was missed, an edit of a held message included.
        for index in 6...8 { _ = try await alice.send("before \(index)", to: conversation) }
        _ = try await alice.edit(1, in: conversation, text: "before 1, edited")
        offline = OfflineClient(client: bob, store: try ClientStore(directory: folder))
        let resumed = offline.events()
        // An event is published once the store applied it: the last one may come just after the
        // store is seen caught up, so the events are collected as they come.
        let replayed = Mutex<[ParleyEvent]>([])
        let collecting = Task { for await event in resumed { replayed.withLock { $0.append(event) } } }
        offline.start()
        let caughtUp = try await history(of: conversation, with: bob)
        #expect(try await eventually { try offline.store.messages(in: conversation) == caughtUp })
        #expect(
            await eventually { replayed.withLock { $0.contains { if case .message(let message) = $0 { message.text == "before 8" } else { false } } } },
            "the replay carried what was missed")
        await offline.close()
        await collecting.value
        #expect(!replayed.withLock { $0.contains(.cursorExpired) }, "a resume within the window replays; it does not reload")

        // Offline: 40 messages, an edit and a deletion of messages Bob's store holds.
        for index in 1...40 { _ = try await alice.send("while away \(index)", to: conversation) }
        _ = try await alice.edit(2, in: conversation, text: "before 2, edited")
        _ = try await alice.deleteMessage(3, in: conversation)

        offline = OfflineClient(client: bob, store: try ClientStore(directory: folder))
        let events = offline.events()
        // At once, before the network: what the store held.
        #expect(try offline.store.messages(in: conversation).map(\.text) == ["before 1, edited"] + (2...8).map { "before \($0)" })
        offline.start()
        let expired = Task {
            for await event in events { if case .cursorExpired = event { return true } }
            return false
        }
        let server = try await history(of: conversation, with: bob)
        #expect(server.count == 48)
        let converged = try await eventually { try offline.store.messages(in: conversation) == server }
        let stored = try offline.store.messages(in: conversation)
        #expect(converged, "the store holds \(stored.count) messages, unlike the server's history")
        let held = try #require(try offline.store.conversation(conversation))
        let listed = try await bob.conversation(conversation)
        #expect(held.lastSeq == listed.lastSeq)
        #expect(held.unreadCount == listed.unreadCount)
        #expect(try offline.store.user(bobUser.id) != nil)
        await offline.close()
        #expect(await expired.value, "the stream answered 410 cursor_expired")
        try await alice.shutdown()
        try await bob.shutdown()
    }

    /// `parley send --outbox` writes a message with a photo to the store and is SIGKILLed before
    /// it could send it (its only gateway refuses connections); an OfflineClient on the same
    /// folder uploads the photo and sends the message, once. A refused message in the same conversation (empty: `400`) is marked failed and
    /// does not hold back the message after it.
    @Test func aMessageWrittenBeforeACrashIsSentOnceAfterIt() async throws {
        let cluster = try LocalCluster.start(workers: 1, gateways: 1)
        defer { cluster.down() }
        let (alice, aliceUser) = try await cluster.user("alice")
        let (bob, bobUser) = try await cluster.user("bob")
        let conversation = try await alice.createConversation(with: [bobUser.id]).id
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("parley-crash-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: folder) }
        let config = folder.appendingPathComponent("cli.json")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        // A gateway nobody listens on (loopback port 1 refuses): the CLI retries until killed.
        let dead = "https://127.0.0.1:1"
        try JSONSerialization.data(withJSONObject: ["servers": [dead], "ca": cluster.ca, "token": alice.token ?? "", "userId": aliceUser.id.rawValue])
            .write(to: config)
        let outbox = folder.appendingPathComponent("outbox")

        let said = folder.appendingPathComponent("parley.out")
        let process = try ChildProcess(
            LocalCluster.binaries.appendingPathComponent("parley").path, [
                "send", conversation.rawValue, "written", "before", "the", "crash", "--outbox", outbox.path,
                "--attach", LocalCluster.root.appendingPathComponent("Tests/ParleyMetadataTests/Fixtures/plain.jpg").path,
            ],
            environment: ["PARLEY_CONFIG": config.path, "HOME": folder.path], output: said.path)
        // It says so once the message is in the store; then it only retries.
        let queued = await eventually(within: .seconds(20)) { ((try? String(contentsOf: said, encoding: .utf8)) ?? "").contains("queued") }
        #expect(queued, "parley said: \((try? String(contentsOf: said, encoding: .utf8)) ?? "")")
        try await Task.sleep(for: .milliseconds(500))
        #expect(kill(process.pid, SIGKILL) == 0, "parley send still waits for the network")
        #expect(process.wait() == 128 + SIGKILL)
        #expect(try await history(of: conversation, with: bob).isEmpty, "nothing was sent before the crash")

        let offline = OfflineClient(client: alice, store: try ClientStore(directory: outbox))
        let waiting = try offline.store.outbox()
        #expect(waiting.map(\.text) == ["written before the crash"])
        // Two more behind it: one the server refuses, one it takes.
        try offline.send("", to: conversation)
        try offline.send("after the refused one", to: conversation)
        offline.start()
        let settled = try await eventually { try offline.store.outbox().allSatisfy { $0.failure != nil } }
        #expect(settled)
        let server = try await history(of: conversation, with: bob)
        #expect(server.map(\.text) == ["written before the crash", "after the refused one"])
        #expect(server.first?.clientMessageId == waiting.first?.clientMessageId)
        // Its photo was uploaded from the outbox's own copy, which is gone once it was sent.
        #expect(server.first?.attachments?.count == 1)
        #expect(server.first?.attachments?.first?.media.contentType == "image/jpeg")
        #expect(try FileManager.default.contentsOfDirectory(atPath: outbox.appendingPathComponent("outbox-files").path).isEmpty)
        let failed = try offline.store.outbox()
        #expect(failed.count == 1)
        #expect(failed.first?.text == "")
        #expect(failed.first?.failure?.status == 400)
        await offline.close()
        try await alice.shutdown()
        try await bob.shutdown()
    }
}

/// A count several tasks add to.
final class Counter: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
