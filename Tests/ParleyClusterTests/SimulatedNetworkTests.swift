import Distributed
import ParleyCluster
import ParleySimulation
import ParleyTestKit
import Testing

distributed actor Tally {
    typealias ActorSystem = ClusterSystem
    private var count = 0
    distributed func next() -> Int {
        count += 1
        return count
    }
}

/// Answers after 10 s on its system's clock: longer than any call waits.
distributed actor Sloth {
    typealias ActorSystem = ClusterSystem
    distributed func answer() async -> Int {
        try? await actorSystem.clock.sleep(for: .seconds(10))
        return 42
    }
}

/// Nodes on one stepped clock over a simulated network: the membership, the calls and their
/// deadlines all run on the clock the nodes were given, and nothing waits for real time — what a
/// later whole-cluster simulation runs on.
@Suite struct SimulatedNetworkTests {
    final class Cluster: Sendable {
        let clock = SteppedClock()
        let network: SimulatedNetwork
        let nodes: [String: ClusterSystem]

        init(_ names: [String]) {
            network = SimulatedNetwork(clock: clock)
            var nodes: [String: ClusterSystem] = [:]
            for name in names {
                let settings = ClusterSettings(
                    name: name, roles: .worker, bindAddress: SimulatedNetwork.address(of: name),
                    seeds: [SimulatedNetwork.address(of: names[0])], incarnations: { 1 }, membership: LoopbackCluster.membership,
                    callTimeout: .seconds(2))
                let system = ClusterSystem(settings: settings, transport: network.transport(for: name), clock: clock)
                system.register(kind: "tally") { _, system in Tally(actorSystem: system) }
                system.register(kind: "sloth") { _, system in Sloth(actorSystem: system) }
                nodes[name] = system
            }
            self.nodes = nodes
        }

        subscript(name: String) -> ClusterSystem { nodes[name]! }

        func start() async throws {
            for name in nodes.keys.sorted() { try await self[name].start() }
        }

        func stop() async {
            for system in nodes.values { await system.stop() }
        }

        func advance(until condition: () -> Bool) async throws -> Duration? {
            try await clock.advance(until: condition, step: .milliseconds(20), limit: .seconds(60))
        }

        func run<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> (Result<T, any Error>, Duration) {
            try await clock.advance(step: .milliseconds(20), while: body)
        }

        func status(of name: String, seenFrom viewer: String) -> MemberStatus? {
            self[viewer].members.first { $0.id.name == name }?.status
        }

        /// Starts node-a and node-b and advances the clock until each sees the other up; how long
        /// that took on the clock (nil: not within the limit).
        func startAndMeet() async throws -> Duration? {
            try await start()
            return try await advance(until: {
                self.status(of: "node-a", seenFrom: "node-b") == .up && self.status(of: "node-b", seenFrom: "node-a") == .up
            })
        }

        /// The node of node-a and node-b that owns `key`, and the other.
        func ownerAndOther(of key: ClusterActorID) throws -> (owner: String, other: String) {
            let owner = try #require(self["node-a"].owner(of: key))
            return (owner, owner == "node-a" ? "node-b" : "node-a")
        }
    }

    @Test func nodesOnASteppedClockMeetAndCallEachOther() async throws {
        let cluster = Cluster(["node-a", "node-b"])
        let met = try await cluster.startAndMeet()
        #expect(met != nil, "the nodes met on the clock")
        let id = ClusterActorID(kind: "tally", key: "k")
        var answers: [Int] = []
        for caller in ["node-a", "node-b", "node-a", "node-b"] {
            let (result, _) = try await cluster.run { try await Tally.resolve(id: id, using: cluster[caller]).next() }
            answers.append(try result.get())
        }
        #expect(answers == [1, 2, 3, 4], "one activation serves both nodes")
        await cluster.stop()
    }

    /// A paused node answers nothing: the other declares it down by failure detection (1 s of
    /// silence on the clock), which fails the call waiting for it before the call's own timeout (2 s).
    @Test func aPausedNodeIsDeclaredDownOnTheClockAndTheCallToItFails() async throws {
        let cluster = Cluster(["node-a", "node-b"])
        _ = try await cluster.startAndMeet()
        let key = ClusterActorID(kind: "tally", key: "paused")
        let (owner, other) = try cluster.ownerAndOther(of: key)
        cluster.network.pause(owner)
        let (result, moved) = try await cluster.run { try await Tally.resolve(id: key, using: cluster[other]).next() }
        guard case .failure(let error as ClusterCallError) = result else {
            Issue.record("a call to a paused node must fail: \(result)")
            return
        }
        #expect(error.code == .connectionLost, "\(error)")
        // Silence counts from the last heartbeat heard, up to one interval before the pause.
        let membership = LoopbackCluster.membership
        #expect(moved >= membership.downAfter - membership.heartbeatInterval && moved < .seconds(2),
                "on the clock, between failure detection and the call timeout: \(moved)")
        #expect(cluster.status(of: owner, seenFrom: other) != .up)
        await cluster.stop()
    }

    /// A call that gets no reply fails at its deadline, also when the caller had made no call for
    /// a while before it (the deadline sweep then waits for a call rather than ticking).
    @Test func aCallWithNoReplyFailsAtItsDeadlineAfterAnIdleWhile() async throws {
        let cluster = Cluster(["node-a", "node-b"])
        _ = try await cluster.startAndMeet()
        let key = ClusterActorID(kind: "sloth", key: "slow")
        let (_, caller) = try cluster.ownerAndOther(of: key)
        for round in 1...2 {
            let idleUntil = cluster.clock.now.advanced(by: .seconds(3))
            _ = try await cluster.advance(until: { cluster.clock.now >= idleUntil })
            let (result, waited) = try await cluster.run { try await Sloth.resolve(id: key, using: cluster[caller]).answer() }
            guard case .failure(let error as ClusterCallError) = result else {
                Issue.record("round \(round): a call with no reply within its timeout must fail: \(result)")
                break
            }
            #expect(error.code == .deadlineExceeded, "round \(round): \(error)")
            #expect(waited >= .seconds(2) && waited < .milliseconds(2_200), "round \(round): failed after \(waited) on the clock, the timeout is 2 s")
        }
        await cluster.stop()
    }

    /// A cut link closes both ends at once; once healed, the nodes meet again.
    @Test func aCutLinkClosesBothEndsAndHealingReconnects() async throws {
        let cluster = Cluster(["node-a", "node-b"])
        try await cluster.start()
        _ = try await cluster.advance(until: {
            cluster.network.connectedPeers(of: "node-a") == ["node-b"] && cluster.status(of: "node-b", seenFrom: "node-a") == .up
        })
        cluster.network.cut("node-a", "node-b")
        #expect(cluster.network.connectedPeers(of: "node-a").isEmpty && cluster.network.connectedPeers(of: "node-b").isEmpty)
        let apart = try await cluster.advance(until: { cluster.status(of: "node-b", seenFrom: "node-a") == .down })
        #expect(apart != nil, "node-a declares node-b down")
        #expect(cluster.network.connectedPeers(of: "node-a").isEmpty, "no connection while cut")
        cluster.network.heal("node-a", "node-b")
        let healed = try await cluster.advance(until: { cluster.network.connectedPeers(of: "node-a") == ["node-b"] })
        #expect(healed != nil, "they connect again")
        await cluster.stop()
    }
}
