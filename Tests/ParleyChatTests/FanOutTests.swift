import Foundation
import ParleyChat
@_spi(Testing) import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

final class RecordedDeliveries: Sendable {
    let deliveries = Mutex<[EventDelivery]>([])
    func record(_ batch: [EventDelivery]) { deliveries.withLock { $0 += batch } }
    var messages: [Message] {
        deliveries.withLock { $0.compactMap { if case .message(let message) = $0.event { message } else { nil } } }
    }
}

@Suite(.serialized) struct FanOutTests {
    @Test func aConversationsEventsReachEachGatewayOnceInSeqOrder() async throws {
        let cluster = try await startChatCluster(
            users: (0..<10).map { UserID(rawValue: "u_\($0)") } + ["u_reader"], workers: ["node-a", "node-b"], gateways: ["node-g"])
        defer { Task { await cluster.stopAll() } }
        let received = RecordedDeliveries()
        let inbox = GatewayInbox.open(on: cluster["node-g"]) { received.record($0) }
        defer { _ = inbox }

        let members = (0..<10).map { UserID(rawValue: "u_\($0)") }
        // Past the shards' first session lease: a shard that just started names every live gateway.
        for user in members + ["u_reader"] { _ = try await PresenceShard.resolve(for: user, using: cluster["node-b"]).presence(of: [user]) }
        try await Task.sleep(for: PresenceShard.sessionLease)
        let conversation = ConversationID.make()
        _ = try await ConversationActor.resolve(conversation, using: cluster["node-a"])
            .create(CreateConversation(creatorId: members[0], memberIds: members + ["u_reader"], name: "fan-out"))
        // Six members stream from node-g; two from a gateway that is gone; two are offline.
        for (index, user) in members.prefix(8).enumerated() {
            _ = try await PresenceShard.resolve(for: user, using: cluster["node-b"])
                .openSession(.init(userId: user, sessionID: "s\(index)"), gateway: index < 6 ? "node-g" : "gateway-gone")
        }
        let perSender = 5
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, sender) in members.enumerated() {
                let system = cluster[index % 2 == 0 ? "node-a" : "node-g"]
                group.addTask {
                    for i in 0..<perSender {
                        _ = try await ConversationActor.resolve(conversation, using: system)
                            .send(SendMessage(senderId: sender, clientMessageId: UUID().uuidString, text: "\(sender) \(i)"))
                    }
                }
            }
            try await group.waitForAll()
        }
        let total = members.count * perSender
        try await eventually(timeout: .seconds(10), "node-g received all \(total) messages") { received.messages.count >= total }
        let created = received.deliveries.withLock { deliveries in
            deliveries.first { if case .conversation(let change) = $0.event { change.change == .created } else { false } }
        }
        // The creation raced the streams opening: it may or may not have reached node-g, but only
        // ever for members streaming there.
        #expect(created.map { Set($0.recipients).isSubset(of: Set(members.prefix(6))) } ?? true)
        let second = ConversationID.make()
        _ = try await ConversationActor.resolve(second, using: cluster["node-b"])
            .create(CreateConversation(creatorId: members[1], memberIds: [members[2], members[9]], name: "second"))
        try await eventually(timeout: .seconds(10), "the second creation reaches node-g") {
            received.deliveries.withLock { deliveries in
                deliveries.contains {
                    if case .conversation(let change) = $0.event { change.change == .created && change.conversation.id == second && Set($0.recipients) == [members[1], members[2]] } else { false }
                }
            }
        }
        let messages = received.messages
        #expect(messages.map(\.seq) == Array(1...Int64(total)), "once each, in seq order")
        // Every send and every delivery went the direct way (the registered names are the calls' own).
        let directSends = ["node-a", "node-b"].map { cluster[$0].directCalls(to: ConversationActor.sendTarget) ?? 0 }.reduce(0, +)
        #expect(directSends == total, "sends run directly: \(directSends) of \(total)")
        #expect(cluster["node-g"].directCalls(to: GatewayInbox.deliverTarget) ?? 0 > 0, "deliveries run directly")
        let directQuestions = ["node-a", "node-b"].map { cluster[$0].directCalls(to: PresenceShard.gatewaysHeldByTarget) ?? 0 }.reduce(0, +)
        #expect(directQuestions > 0, "the directory's questions to the shards run directly")
        let recipients = received.deliveries.withLock { deliveries in
            Set(deliveries.filter { if case .message = $0.event { true } else { false } }.map { Set($0.recipients) })
        }
        // (u_reader has no stream, so it is in no delivery.)
        #expect(recipients == [Set(members.prefix(6))], "only the members streaming from node-g")

        // Typing reaches the others; a receipt reaches everyone on the gateway.
        _ = try await ConversationActor.resolve(conversation, using: cluster["node-b"]).setTyping(for: members[1], true)
        _ = try await ConversationActor.resolve(conversation, using: cluster["node-b"]).markReceipts(for: "u_reader", deliveredSeq: nil, readSeq: 7)
        try await eventually(timeout: .seconds(10), "typing and receipt arrive") {
            received.deliveries.withLock { deliveries in
                deliveries.contains { if case .typing(let typing) = $0.event { typing.userId == members[1] && !$0.recipients.contains(members[1]) } else { false } }
                    && deliveries.contains { if case .receipt(let receipt) = $0.event { receipt.userId == "u_reader" && receipt.readSeq == 7 && receipt.deliveredSeq == 7 } else { false } }
            }
        }
    
        // A removed member hears of its removal, then nothing more.
        try await ConversationActor.resolve(conversation, using: cluster["node-a"]).removeMember(members[5], by: members[0])
        _ = try await ConversationActor.resolve(conversation, using: cluster["node-a"])
            .send(SendMessage(senderId: members[0], clientMessageId: UUID().uuidString, text: "after the removal"))
        try await eventually(timeout: .seconds(10), "the last message arrives") { received.messages.count == total + 1 }
        let tail = received.deliveries.withLock { Array($0.suffix(2)) }
        guard case .conversation(let removal) = tail.first?.event, case .message = tail.last?.event else {
            Issue.record("expected member_removed then the message, got \(tail.map(\.event))")
            return
        }
        #expect(removal.change == .memberRemoved && tail.first?.recipients.contains(members[5]) == true)
        #expect(tail.last?.recipients.contains(members[5]) == false)
    }
}
