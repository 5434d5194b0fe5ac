import ArgumentParser
import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import Synchronization

/// Set once the first send fails: the others stop sending (the worker is gone).
final class StopFlag: Sendable {
    private let flag = Atomic(false)
    func set() { flag.store(true, ordering: .relaxed) }
    var isSet: Bool { flag.load(ordering: .relaxed) }
}

/// A test driver: joins a cluster as a gateway-only node, creates conversations through their
/// actors, sends appends, and at the end writes every acknowledged message to an ack log (one JSON
/// object per line), so that a test can check the store afterwards. Failed sends (a killed
/// worker) are counted, not fatal: after the first one, no new append is started.
struct ClusterAppend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cluster-append", abstract: "Send appends through a cluster and log every acknowledged one.")

    @OptionGroup var node: NodeOptions
    @Option(help: "Conversations to create and spread the appends over.")
    var conversations = 10
    @Option(help: "Appends to send.")
    var appends = 1000
    @Option(help: "Appends in flight.")
    var inFlight = 32
    @Option(help: "File to append acknowledged messages to (JSON lines: conversationId, seq, clientMessageId).")
    var ackLog: String

    struct Ack: Codable {
        var conversationId: String
        var seq: Int64
        var clientMessageId: String
    }

    func run() async throws {
        let system = try await node.startDriver()
        // Members must be registered users: a driver and a peer of their own for this run.
        let (driver, peer) = (UserID.make(), UserID.make())
        for user in [driver, peer] {
            _ = try await UserActor.resolve(user, using: system).create(
                NewUser(handle: "bench-\(user.rawValue.suffix(12))", displayName: "bench", passwordHash: "not-a-login"))
        }
        var ids: [ConversationID] = []
        for _ in 0..<conversations {
            let id = ConversationID.make()
            _ = try await ConversationActor.resolve(id, using: system).create(CreateConversation(creatorId: driver, memberIds: [peer], name: "durability"))
            ids.append(id)
        }
        let conversationIDs = ids
        let stop = StopFlag()
        let started = ContinuousClock.now
        let (acks, failed) = await withTaskGroup(of: ([Ack], Int).self) { group in
            for worker in 0..<inFlight {
                group.addTask {
                    var acks: [Ack] = []
                    var failed = 0
                    var i = worker
                    while i < appends, !stop.isSet {
                        let conversation = conversationIDs[i % conversationIDs.count]
                        let clientMessageId = UUID().uuidString.lowercased()
                        do {
                            let result = try await ConversationActor.resolve(conversation, using: system)
                                .send(SendMessage(senderId: driver, clientMessageId: clientMessageId, text: "durable \(i)"))
                            acks.append(Ack(conversationId: conversation.rawValue, seq: result.message.seq, clientMessageId: clientMessageId))
                        } catch {
                            failed += 1
                            stop.set()
                        }
                        i += inFlight
                    }
                    return (acks, failed)
                }
            }
            return await group.reduce(into: ([Ack](), 0)) { $0.0 += $1.0; $0.1 += $1.1 }
        }
        let elapsed = started.duration(to: .now)
        let encoder = JSONEncoder()
        let lines = try acks.map { String(decoding: try encoder.encode($0), as: UTF8.self) }
        try (lines.joined(separator: "\n") + "\n").write(toFile: ackLog, atomically: true, encoding: .utf8)
        let acked = acks.count
        print(String(format: "cluster-append: %d acknowledged, %d failed, in %.2f s (%.0f acks/s)", acked, failed, elapsed.seconds, Double(acked) / elapsed.seconds))
        await system.stop()
    }
}
