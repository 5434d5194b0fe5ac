import Foundation
import ParleyChat
import ParleyCluster
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
}
