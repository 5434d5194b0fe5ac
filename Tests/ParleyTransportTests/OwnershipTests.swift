import Distributed
import Foundation
@_spi(Testing) import ParleyCluster
import ParleyTransport
import Synchronization
import ParleyTestKit
import Testing

@Suite(.serialized) struct OwnershipTests {
    @Test func aCallThatReachesANonOwnerIsRetriedOnTheOwnerWithinTheDeadline() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b", "node-c"] { try await cluster.start(name) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b", "node-c"])
        let key = try probeKey(ownedBy: "node-c", on: cluster["node-a"])

        // node-a believes node-b owns everything; node-b knows better and answers not_owner.
        cluster["node-a"].forceRing(["node-b"])
        let call = Task { try await Probe.resolve(id: ClusterActorID(kind: "probe", key: key), using: cluster["node-a"]).whereAreYou() }
        try await Task.sleep(for: .milliseconds(300))
        cluster["node-a"].forceRing(nil)  // node-a's ring catches up while the call retries
        #expect(try await call.value == "node-c")
    }

    @Test func aCallWhoseRingNeverCatchesUpFailsWithNotOwnerAtTheDeadline() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b", "node-c"] { try await cluster.start(name, callTimeout: .milliseconds(800)) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b", "node-c"])
        let key = try probeKey(ownedBy: "node-c", on: cluster["node-a"])
        cluster["node-a"].forceRing(["node-b"])
        do {
            _ = try await Probe.resolve(id: ClusterActorID(kind: "probe", key: key), using: cluster["node-a"]).whereAreYou()
            Issue.record("the call must fail")
        } catch let error as ClusterCallError {
            // not_owner from the last answer, or deadline_exceeded if the deadline fell while the
            // last retry was in flight.
            #expect(error.code == .notOwner || error.code == .deadlineExceeded, "\(error)")
        }
        #expect(cluster.activations.withLock { $0[ClusterActorID(kind: "probe", key: key)] } == nil, "nobody activated it")
    }

    /// A caller with its own retry loop (a gateway's send) gets the first failure, so that its
    /// loop alone decides: where the call of the first test is retried until the ring catches up,
    /// this one fails with `not_owner`, although the ring catches up too.
    @Test func aCallRetriedByItsCallerIsAttemptedOnce() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b", "node-c"] { try await cluster.start(name, callTimeout: .seconds(30)) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b", "node-c"])
        let key = try probeKey(ownedBy: "node-c", on: cluster["node-a"])
        cluster["node-a"].forceRing(["node-b"])
        let call = Task {
            try await ClusterSystem.retriedByCaller {
                try await Probe.resolve(id: ClusterActorID(kind: "probe", key: key), using: cluster["node-a"]).whereAreYou()
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        cluster["node-a"].forceRing(nil)
        do {
            let answer = try await call.value
            Issue.record("the call must fail at its one attempt; it was retried and reached \(answer)")
        } catch let error as ClusterCallError {
            #expect(error.code == .notOwner, "\(error)")
        }
    }

    @Test func anActorMovedAwayIsDeactivatedAndReactivatedOnItsNewOwner() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b"] { try await cluster.start(name) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])
        let key = try probeKey(ownedBy: "node-a", on: cluster["node-a"])
        let id = ClusterActorID(kind: "probe", key: key)
        #expect(try await Probe.resolve(id: id, using: cluster["node-b"]).count() == 1)
        #expect(cluster["node-a"].activeActorIDs.contains(id))
        // Both nodes move the key to node-b (as a ring change would).
        cluster["node-a"].forceRing(["node-b"])
        cluster["node-b"].forceRing(["node-b"])
        #expect(!cluster["node-a"].activeActorIDs.contains(id), "the old owner let go of it")
        #expect(try await Probe.resolve(id: id, using: cluster["node-a"]).count() == 1, "a fresh activation on the new owner")
        #expect(cluster.activations.withLock { $0[id] } == ["node-a", "node-b"])
    }

    @Test func callsWaitForRoomWhenTheOutboundQueueIsFullAndAllComplete() async throws {
        let cluster = try makeTestCluster()
        var tiny = TransportSettings()
        tiny.outboundBytesMax = 1  // every frame waits until the one before it reached the channel
        // 200 calls queued one frame at a time: under the parallel test run a debug build takes
        // seconds for them, which is not what this test is about.
        try await cluster.start("node-a", callTimeout: .seconds(60), transportSettings: tiny)
        try await cluster.start("node-b", callTimeout: .seconds(60))
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])
        let key = try probeKey(ownedBy: "node-b", on: cluster["node-a"])
        let probe = try Probe.resolve(id: ClusterActorID(kind: "probe", key: key), using: cluster["node-a"])
        let answers = try await withThrowingTaskGroup(of: [String].self) { group in
            for i in 0..<200 { group.addTask { try await probe.echo("m\(i)", times: 50) } }
            return try await group.reduce(into: 0) { $0 += $1.count }
        }
        #expect(answers == 200 * 50)
    }
}
