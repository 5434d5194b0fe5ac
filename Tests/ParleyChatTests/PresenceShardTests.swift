import Foundation
import ParleyChat
@_spi(Testing) import ParleyCluster
import ParleyModel
import ParleyTestKit
import Testing

@Suite(.serialized) struct PresenceShardTests {
    @Test func presenceIsTheSameFromEveryNodeAndExpiresWithTheLease() async throws {
        let cluster = try LoopbackCluster { system, _ in PresenceShard.register(on: system, lease: .milliseconds(600)) }
        for node in ["node-a", "node-b"] { try await cluster.start(node) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])
        let ann: UserID = "u_ann"
        let session = PresenceShard.SessionRef(userId: ann, sessionID: "s1")
        #expect(try await PresenceShard.resolve(for: ann, using: cluster["node-a"]).openSession(session, gateway: "gateway-1").status == .online)
        let shardFromB = try PresenceShard.resolve(for: ann, using: cluster["node-b"])
        #expect(try await shardFromB.presence(of: [ann]) == [Presence(userId: ann, status: .online)])
        #expect(try await shardFromB.gateways(of: [ann, "u_nobody"]) == ["gateway-1": [ann]])
        // The gateway stops renewing (it died): within the lease the user reads as offline.
        try await eventually(timeout: .seconds(5), "ann is offline") {
            try await shardFromB.presence(of: [ann]).first?.status == .offline
        }
        #expect(try await shardFromB.presence(of: [ann]).first?.lastSeenAt != nil)
    }

    /// A gateway's calls for the streams it holds (open, renew, close) run through direct targets,
    /// from the owner's node and from another: the registered names are the calls' own.
    @Test func aGatewaysCallsForItsStreamsRunDirectly() async throws {
        let cluster = try LoopbackCluster { system, _ in PresenceShard.register(on: system) }
        for node in ["node-a", "node-b"] { try await cluster.start(node) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])
        let users = (0..<8).map { UserID(rawValue: "u_direct\($0)") }
        for (index, user) in users.enumerated() {
            let shard = try PresenceShard.resolve(for: user, using: cluster[index % 2 == 0 ? "node-a" : "node-b"])
            let session = PresenceShard.SessionRef(userId: user, sessionID: "s\(index)")
            #expect(try await shard.openSession(session, gateway: "gateway-1").status == .online)
            #expect(try await shard.renewSessions([session], gateway: "gateway-1").isEmpty)
            #expect(try await shard.closeSession(session).status == .offline)
        }
        for target in [PresenceShard.openSessionTarget, PresenceShard.renewSessionsTarget, PresenceShard.closeSessionTarget] {
            let direct = ["node-a", "node-b"].map { cluster[$0].directCalls(to: target) ?? 0 }.reduce(0, +)
            #expect(direct == users.count, "\(target): \(direct) of \(users.count) calls ran directly")
        }
    }
}
