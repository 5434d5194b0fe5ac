import ParleySimulation
import ParleyModel
import ParleyCluster
import ParleyTestKit
import Testing

/// Whole-cluster membership runs on a simulated network, seeded; each failure names its seed.
@Suite struct MembershipSimulationTests {
    static let settings = MembershipSettings.default

    static func formed(seed: UInt64, nodes count: Int) -> MembershipSimulation {
        var sim = MembershipSimulation(seed: seed, settings: settings)
        for i in 1...count { sim.start("n\(i)", seeds: ["n1", "n2"]) }
        sim.run(for: .seconds(4))
        return sim
    }

    /// Every running node sees exactly the running nodes up, and all rings are identical.
    static func converged(_ sim: MembershipSimulation) -> Bool {
        let running = sim.running
        return running.allSatisfy { sim.ringWorkers(at: $0) == running }
    }

    @Test(arguments: Array(UInt64(1)...12))
    func aClusterFormsAndAgreesOnOneRing(seed: UInt64) {
        var sim = Self.formed(seed: seed, nodes: 5)
        #expect(Self.converged(sim), "seed \(seed): rings \(sim.names.map { sim.ringWorkers(at: $0) })")
        // With a healthy network nobody is ever suspected or downed.
        sim.run(for: .seconds(20))
        let alarms = sim.log.filter {
            if case .memberSuspected = $0.directive { return true }
            if case .memberDowned = $0.directive { return true }
            return false
        }
        #expect(alarms.isEmpty, "seed \(seed): false alarms \(alarms.map { "\($0.at) \($0.node): \($0.directive)" })")
    }

    @Test(arguments: Array(UInt64(1)...12))
    func aCrashedNodeIsDownEverywhereWithinTheDetectionTimeAndTheRestAgree(seed: UInt64) {
        var sim = Self.formed(seed: seed, nodes: 5)
        var random = SeededRandom(seed: seed)
        let victim = sim.names.randomElement(using: &random)!
        sim.kill(victim)
        let killedAt = sim.elapsed
        sim.run(for: Self.settings.downAfter + Self.settings.heartbeatInterval * 2)
        for survivor in sim.running {
            let down = sim.log.first {
                if case .memberDowned(let member, _) = $0.directive, member.name == victim, $0.node == survivor { return true }
                return false
            }
            #expect(down != nil, "seed \(seed): \(survivor) never downed \(victim)")
            if let down { #expect(down.at - killedAt <= Self.settings.downAfter + Self.settings.heartbeatInterval * 2, "seed \(seed)") }
        }
        #expect(Self.converged(sim), "seed \(seed)")
        // The victim restarts: it rejoins and everyone agrees again.
        sim.start(victim, seeds: ["n1", "n2"])
        sim.run(for: .seconds(3))
        #expect(Self.converged(sim), "seed \(seed): after restart \(sim.names.map { sim.ringWorkers(at: $0) })")
    }

    @Test(arguments: Array(UInt64(1)...12))
    func aPausedNodeIsDownedThenComesBackAsANewIncarnation(seed: UInt64) {
        var sim = Self.formed(seed: seed, nodes: 4)
        let victim = "n3"
        let before = sim.nodes[victim]!.machine.me.id.incarnation
        sim.pause(victim, for: .seconds(6))
        sim.run(for: .seconds(5))
        #expect(sim.running.allSatisfy { sim.nodes[$0]!.machine.member(named: victim)?.status == .down }, "seed \(seed)")
        sim.run(for: .seconds(5))
        #expect(sim.nodes[victim]!.machine.me.id.incarnation > before, "seed \(seed): the paused node must rejoin as a new incarnation")
        #expect(Self.converged(sim), "seed \(seed): \(sim.names.map { sim.ringWorkers(at: $0) })")
        // The pause must not have cost anyone else their membership.
        let othersDowned = sim.log.filter {
            if case .memberDowned(let member, _) = $0.directive, member.name != victim { return true }
            return false
        }
        #expect(othersDowned.isEmpty, "seed \(seed): \(othersDowned.map { "\($0.node) downed \($0.directive)" })")
    }

    @Test(arguments: Array(UInt64(1)...12))
    func aNodeCutOffAloneIsDownedByTheMajorityAndRejoinsAfterTheHeal(seed: UInt64) {
        var sim = Self.formed(seed: seed, nodes: 5)
        sim.isolate("n4")
        sim.run(for: .seconds(5))
        let majority = sim.names.filter { $0 != "n4" }
        #expect(majority.allSatisfy { sim.ringWorkers(at: $0) == majority }, "seed \(seed)")
        #expect(sim.ringWorkers(at: "n4").count == 5, "seed \(seed): alone, n4 downs nobody (no quorum)")
        sim.healAll()
        sim.run(for: .seconds(5))
        #expect(Self.converged(sim), "seed \(seed): \(sim.names.map { sim.ringWorkers(at: $0) })")
        let majorityRestarts = sim.log.filter { if case .selfDowned = $0.directive { return $0.node != "n4" }; return false }
        #expect(majorityRestarts.isEmpty, "seed \(seed): the minority's stale view restarted majority nodes")
    }

    @Test(arguments: Array(UInt64(1)...12))
    func seedsStartedTogetherFormOneClusterWithoutWaiting(seed: UInt64) {
        var sim = MembershipSimulation(seed: seed, settings: Self.settings)
        let seeds = ["n1", "n2", "n3"]
        for name in seeds { sim.start(name, seeds: seeds) }
        sim.run(for: .milliseconds(600))
        #expect(Self.converged(sim), "seed \(seed): \(sim.names.map { sim.ringWorkers(at: $0) })")
        let formers = sim.log.filter { if case .selfUp(true) = $0.directive { return true }; return false }.map(\.node)
        #expect(formers == ["n1"], "seed \(seed): exactly the smallest seed forms the cluster, not \(formers)")
    }

    @Test(arguments: Array(UInt64(1)...12))
    func aSeedRestartingIntoARunningClusterJoinsIt(seed: UInt64) {
        var sim = Self.formed(seed: seed, nodes: 4)
        sim.kill("n1")
        sim.run(for: .seconds(4))
        sim.start("n1", seeds: ["n1", "n2"])
        sim.run(for: .seconds(2))
        #expect(Self.converged(sim), "seed \(seed)")
        let formedAgain = sim.log.filter { if case .selfUp(true) = $0.directive { return $0.at > .seconds(4) }; return false }
        #expect(formedAgain.isEmpty, "seed \(seed): n1 must join the running cluster, not form a second one")
    }

    @Test(arguments: Array(UInt64(1)...8))
    func lossyNetworksStillConverge(seed: UInt64) {
        var sim = MembershipSimulation(seed: seed, settings: Self.settings)
        sim.lossRate = 0.2
        sim.delay = .milliseconds(1)...(.milliseconds(80))
        for i in 1...6 { sim.start("n\(i)", seeds: ["n1"]) }
        sim.run(for: .seconds(6))
        #expect(Self.converged(sim), "seed \(seed): \(sim.names.map { sim.ringWorkers(at: $0) })")
    }
}
