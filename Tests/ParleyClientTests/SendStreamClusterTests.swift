import Foundation
@testable import ParleyClient
import ParleyModel
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// ``ParleyClient``'s sends on the gateways' send stream, against a real cluster (Scripts/cluster,
/// real processes, TLS).
@Suite(.serialized) struct SendStreamClusterTests {
    /// A gateway that hangs (SIGSTOP) while a send waits on its send stream: no answer comes and
    /// the stream does not end. The send gives the stream up after its request timeout and goes
    /// again, with its `clientMessageId`, on a stream to the other gateway, and is stored once, in
    /// order. (Without the send's own timeout it waits for good: the HTTP client's read timeout
    /// does not end a response whose request is still sending.)
    @Test(.timeLimit(.minutes(2))) func aSendWaitingOnAHungGatewayGoesToTheOtherGatewayOnce() async throws {
        let cluster = try LocalCluster.start(workers: 1, gateways: 2)
        defer { cluster.down() }
        var configuration = ParleyClient.Configuration(gateways: cluster.gateways, caCertificatePath: cluster.ca)
        configuration.requestTimeout = .seconds(2)
        configuration.sendRetryWindow = .seconds(20)
        let alice = try ParleyClient(configuration: configuration)
        defer { Task { try? await alice.shutdown() } }
        _ = try await alice.register(handle: "alice\(UInt16.random(in: 1000...9999))", password: "correct horse battery", displayName: "Alice")
        let (bob, bobUser) = try await cluster.user("bob", gateways: [1, 0])
        defer { Task { try? await bob.shutdown() } }
        let conversation = try await alice.createConversation(with: [bobUser.id]).id

        let before = try await alice.send("before the hang", to: conversation)
        #expect(alice.sendStream.answered.load(ordering: .relaxed) == 1, "the first send went on the send stream")

        let pidText = try String(contentsOf: cluster.state.appendingPathComponent("gateway-1.pid"), encoding: .utf8)
        let pid = try #require(pid_t(pidText.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(kill(pid, SIGSTOP) == 0)
        let during: Message
        do {
            during = try await alice.send("while it hangs", to: conversation)
        } catch {
            kill(pid, SIGCONT)
            throw error
        }
        kill(pid, SIGCONT)
        #expect(during.seq == before.seq + 1)
        #expect(alice.sendStream.answered.load(ordering: .relaxed) == 2, "the send went on a send stream to the other gateway")
        let held = try await bob.messages(in: conversation, after: 0)
        #expect(held.map(\.text) == ["before the hang", "while it hangs"], "stored once each, in order")
    }

    /// The gateway ends a send stream whose body is still open (the token it was opened with was
    /// revoked: the next line is answered `401` and the stream ends, then reset with NO_ERROR, as
    /// RFC 9113 section 8.1 allows). Each such send gets its answer, the client goes on — a new
    /// login's sends go on a new stream — and nothing else fails. Repeated: the reset can come in
    /// the same read as the response's end, or after.
    @Test(.timeLimit(.minutes(2))) func aSendStreamTheGatewayEndsWhileItsBodyIsOpenFailsOnlyItsSend() async throws {
        let cluster = try LocalCluster.start(workers: 1, gateways: 1)
        defer { cluster.down() }
        let handle = "alice\(UInt16.random(in: 1000...9999))"
        let alice = try cluster.client()
        defer { Task { try? await alice.shutdown() } }
        _ = try await alice.register(handle: handle, password: "correct horse battery", displayName: "Alice")
        let (bob, bobUser) = try await cluster.user("bob")
        defer { Task { try? await bob.shutdown() } }
        let conversation = try await alice.createConversation(with: [bobUser.id]).id

        var sent: [String] = []
        for round in 1...5 {
            let text = "round \(round)"
            _ = try await alice.send(text, to: conversation)
            sent.append(text)
            // The same session, revoked from elsewhere: alice's open stream still has its token.
            let elsewhere = try cluster.client(token: alice.token)
            try await elsewhere.logout()
            try? await elsewhere.shutdown()
            let refused = await #expect(throws: ParleyError.self) { _ = try await alice.send("after the logout", to: conversation) }
            #expect(refused?.status == 401, "\(String(describing: refused))")
            _ = try await alice.login(handle: handle, password: "correct horse battery")
        }
        _ = try await alice.send("last", to: conversation)
        sent.append("last")
        #expect(alice.sendStream.answered.load(ordering: .relaxed) == sent.count * 2 - 1, "every send went on a send stream, the refused ones too")
        let held = try await history(of: conversation, with: bob)
        #expect(held.map(\.text) == sent, "the sends after each logout were refused, the others stored once, in order")
    }

    /// Many sends at once from one client share its send stream: each gets its own answer (the
    /// message with its own `clientMessageId` and text), whatever order the lines and the answers
    /// take, and each is stored once.
    @Test(.timeLimit(.minutes(2))) func sendsAtOnceOnOneStreamEachGetTheirOwnAnswer() async throws {
        let cluster = try LocalCluster.start(workers: 1, gateways: 1)
        defer { cluster.down() }
        let (alice, _) = try await cluster.user("alice")
        defer { Task { try? await alice.shutdown() } }
        let (bob, bobUser) = try await cluster.user("bob")
        defer { Task { try? await bob.shutdown() } }
        let (carol, carolUser) = try await cluster.user("carol")
        defer { Task { try? await carol.shutdown() } }
        let conversations = [try await alice.createConversation(with: [bobUser.id]).id, try await alice.createConversation(with: [carolUser.id]).id]

        let count = 40
        let sent = try await withThrowingTaskGroup(of: (text: String, clientMessageId: String, message: Message).self) { group in
            for index in 0..<count {
                group.addTask {
                    let clientMessageId = ClientMessageID.make()
                    let text = "at once \(index)"
                    return (text, clientMessageId, try await alice.send(text, to: conversations[index % 2], clientMessageId: clientMessageId))
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        for (text, clientMessageId, message) in sent {
            #expect(message.clientMessageId == clientMessageId && message.text == text, "\(text): answered with \(message.text)")
        }
        // At least: a line past the send rate is answered 429 on the stream and sent again.
        #expect(alice.sendStream.answered.load(ordering: .relaxed) >= count, "every send went on the send stream")
        let held = try await history(of: conversations[0], with: bob) + history(of: conversations[1], with: carol)
        #expect(held.map(\.text).sorted() == sent.map(\.text).sorted(), "each stored once")
    }
}
