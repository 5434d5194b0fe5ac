import ParleyCluster
import ParleyModel

/// The ring and the membership protocol at sizes no test machine runs as processes: how evenly
/// the ring spreads keys, how many move when a worker joins or leaves, and how long gossip takes
/// to agree after a join, a crash and a partition.
public enum ScaleSimulation {
    public struct RingFigures: Sendable {
        public var workers: Int
        public var keys: Int
        /// The busiest and the idlest worker's keys over the mean.
        public var maxOverMean: Double
        public var minOverMean: Double
        /// The share of keys that moved when one worker joined, against the ideal 1 / (workers + 1),
        /// and whether every moved key went to the new worker.
        public var joinMoved: Double
        public var joinIdeal: Double
        public var joinOnlyToNew: Bool
        /// The same for one worker leaving: ideal 1 / workers, every moved key the departed one's.
        public var leaveMoved: Double
        public var leaveIdeal: Double
        public var leaveOnlyFromDeparted: Bool
    }

    /// Places `keys` keys (conversation IDs as the cluster names them) on a ring of `workers`.
    public static func ring(workers count: Int, keys: Int, settings: HashRing.Settings = .default) -> RingFigures {
        let names = (0..<count).map { "worker-\($0)" }
        let ring = HashRing(workers: names, settings: settings)
        let joined = HashRing(workers: names + ["worker-new"], settings: settings)
        let departed = names[count / 2]
        let left = HashRing(workers: names.filter { $0 != departed }, settings: settings)
        var perWorker: [String: Int] = [:]
        var joinMoved = 0, leaveMoved = 0
        var joinOnlyToNew = true, leaveOnlyFromDeparted = true
        var random = SeededRandom(seed: 1)
        for _ in 0..<keys {
            // A conversation's key: 128 random bits as hex, as IDs are made.
            let hash = StableHash.hash("conversation/c_\(String(random.next(), radix: 16))\(String(random.next(), radix: 16))")
            guard let owner = ring.owner(ofHash: hash), let afterJoin = joined.owner(ofHash: hash),
                  let afterLeave = left.owner(ofHash: hash) else { continue }
            perWorker[owner, default: 0] += 1
            if afterJoin != owner {
                joinMoved += 1
                if afterJoin != "worker-new" { joinOnlyToNew = false }
            }
            if afterLeave != owner {
                leaveMoved += 1
                if owner != departed { leaveOnlyFromDeparted = false }
            }
        }
        let mean = Double(keys) / Double(count)
        let counts = names.map { perWorker[$0, default: 0] }
        return RingFigures(
            workers: count, keys: keys,
            maxOverMean: Double(counts.max() ?? 0) / mean, minOverMean: Double(counts.min() ?? 0) / mean,
            joinMoved: Double(joinMoved) / Double(keys), joinIdeal: 1 / Double(count + 1), joinOnlyToNew: joinOnlyToNew,
            leaveMoved: Double(leaveMoved) / Double(keys), leaveIdeal: 1 / Double(count), leaveOnlyFromDeparted: leaveOnlyFromDeparted)
    }

    public struct GossipFigures: Sendable {
        public var nodes: Int
        /// From a new node's start until every node sees it `up`.
        public var join: Duration?
        /// From a node's crash until every running node sees it `down`.
        public var crash: Duration?
        /// From healing a node cut off for 5 s until every node sees it `up` again (as a new incarnation).
        public var partitionHeal: Duration?
        /// Over 10 s of a quiet cluster: the gossip messages each node sent per second, and the
        /// member entries in them.
        public var messagesPerNodePerSecond: Double
        public var entriesPerNodePerSecond: Double
        /// Over those 10 s: how often a node suspected or downed a peer that was running all along.
        public var falseSuspicions: Int
        public var falseDowns: Int
    }

    /// Runs the membership protocol among `nodes` simulated nodes (pure state machines over a
    /// simulated network, ``MembershipSimulation``).
    public static func gossip(nodes count: Int, seed: UInt64 = 1, settings: MembershipSettings = MembershipSettings()) -> GossipFigures {
        var simulation = MembershipSimulation(seed: seed, settings: settings)
        let names = (0..<count).map { "node-\($0)" }
        let seeds = Array(names.prefix(3))
        for name in names { simulation.start(name, seeds: seeds) }
        _ = waitUntil(&simulation, within: .seconds(60)) { sim in allSee(sim, names, as: .up) }

        // A quiet cluster: what gossip costs, and whether it blames anyone.
        let quietFrom = simulation.elapsed, quietLog = simulation.log.count
        let messagesBefore = simulation.gossipSent, entriesBefore = simulation.entriesSent
        simulation.run(for: .seconds(10))
        let perNodeSecond = Double(count) * 10
        let messages = Double(simulation.gossipSent - messagesBefore) / perNodeSecond
        let entries = Double(simulation.entriesSent - entriesBefore) / perNodeSecond
        var falseSuspicions = 0, falseDowns = 0
        for entry in simulation.log[quietLog...] where entry.at >= quietFrom {
            switch entry.directive {
            case .memberSuspected: falseSuspicions += 1
            case .memberDowned: falseDowns += 1
            default: break
            }
        }

        simulation.start("node-new", seeds: seeds)
        let join = waitUntil(&simulation, within: .seconds(30)) { sim in allSee(sim, ["node-new"], as: .up) }

        let victim = names[count / 2]
        simulation.kill(victim)
        let crash = waitUntil(&simulation, within: .seconds(30)) { sim in allSee(sim, [victim], as: .down) }

        let isolated = names[count / 3]
        simulation.isolate(isolated)
        simulation.run(for: .seconds(5))
        simulation.healAll()
        let heal = waitUntil(&simulation, within: .seconds(30)) { sim in allSee(sim, [isolated], as: .up) }

        return GossipFigures(
            nodes: count, join: join, crash: crash, partitionHeal: heal,
            messagesPerNodePerSecond: messages, entriesPerNodePerSecond: entries,
            falseSuspicions: falseSuspicions, falseDowns: falseDowns)
    }

    /// Whether every running node sees each of `subjects` with `status` (for `up`, also each
    /// subject itself).
    static func allSee(_ simulation: MembershipSimulation, _ subjects: [String], as status: MemberStatus) -> Bool {
        simulation.running.allSatisfy { observer in
            subjects.allSatisfy { subject in
                guard observer != subject || status == .up else { return true }
                return simulation.nodes[observer]?.machine.member(named: subject)?.status == status
            }
        }
    }

    /// Runs until `done`, in steps of 50 ms, and says how long it took (nil: not within `limit`).
    static func waitUntil(_ simulation: inout MembershipSimulation, within limit: Duration, _ done: (MembershipSimulation) -> Bool) -> Duration? {
        var waited = Duration.zero
        while waited < limit {
            if done(simulation) { return waited }
            simulation.run(for: .milliseconds(50))
            waited += .milliseconds(50)
        }
        return done(simulation) ? waited : nil
    }
}
