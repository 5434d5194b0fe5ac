import ArgumentParser
import Foundation
import ParleyChat
import ParleyCluster
import ParleySimulation
import Synchronization

/// Runs the delivery simulation (``DeliverySimulation``) — or, with `--cluster`, the whole-cluster
/// simulation (``ClusterSimulation``) — for one seed or many, and prints what failed with its seed
/// and the trace that concerns it.
@main
struct ParleySimulate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley-simulate",
        abstract: "Seeded simulation of message delivery under node kills, lost packets and broken streams.",
        discussion: """
            Each seed is one deterministic run: workers owning conversations, gateways holding every member's \
            event stream, clients sending and resuming, a network that delays, drops, duplicates and reorders, \
            and faults (kills, restarts, cut links, broken streams, a burst that kills every worker in turn). \
            A run fails when a stream writes out of order, twice or past a gap, or when a connected client \
            lacks a committed message at the end. The same seed reproduces the same run.

            With --cluster, whole nodes instead: workers running the real chat actors over one in-memory store and \
            gateways with their real inboxes, on one stepped clock over a simulated network, with clients that send \
            with retries (or give up, as a closed app does) and resume their streams while nodes are killed and \
            restarted, links cut and nodes paused, and a conversation's last message dies with its owner as it commits. \
            The nodes' tasks run one at a time on one thread (Swift's global executor replaced), so with \
            SWIFT_DETERMINISTIC_HASHING=1 (Scripts/simulate sets it) the same seed is the same run.
            """)

    @Option(help: "Run this one seed and print its trace on failure.") var seed: UInt64?
    @Option(help: "Run seeds 1…N (or from --first) and print a summary.") var seeds: UInt64 = 100
    @Option(help: "The first seed of --seeds.") var first: UInt64 = 1
    @Option(help: """
        Remove one guard, to see the simulation catch it: \(DeliverySimulation.Guard.allCases.map(\.rawValue).joined(separator: ", ")); \
        with --cluster, \(ClusterSimulation.Guard.allCases.map(\.rawValue).joined(separator: ", ")).
        """)
    var without: String?
    @Flag(help: "Print the whole trace of --seed, not only the lines that concern a failure.") var trace = false
    @Flag(help: "Print the ring's balance and key movement and the membership protocol's convergence at scale, instead of the delivery simulation.")
    var scale = false
    @Option(help: "--scale: keys placed on the ring.") var keys = 10_000_000
    @Option(help: "--scale: workers on the ring, comma-separated.") var ringWorkers = "10,100,1000"
    @Option(help: "--scale: nodes gossiping, comma-separated.") var gossipNodes = "10,100,1000"
    @Flag(help: "For each guard, run without it from seed --first until a seed fails (at most --seeds): every guard must be caught. With --cluster, the nodes' guards.")
    var checkGuards = false
    @Flag(help: "Run the whole-cluster simulation (real actors over a simulated network and clock) for --seed or --seeds.")
    var cluster = false

    func run() async throws {
        if cluster { return try await runCluster() }
        if checkGuards { return try await checkEveryGuard() }
        if scale { return printScale() }
        var options = DeliverySimulation.Options()
        if let without {
            guard let removed = DeliverySimulation.Guard(rawValue: without) else {
                throw ValidationError("the delivery simulation's guards are \(DeliverySimulation.Guard.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            removed.remove(from: &options)
        }
        if let seed {
            var simulation = DeliverySimulation(seed: seed, options: options)
            simulation.run()
            print("seed \(seed): \(simulation.summary)")
            guard !simulation.failures.isEmpty else { return }
            for line in trace ? simulation.trace : simulation.failureTrace { print("  " + line) }
            throw ExitCode(1)
        }
        var failed: [UInt64] = []
        var totals = (committed: 0, written: 0, changes: 0, changesWritten: 0, ended: 0, reads: 0)
        for seed in first..<(first + seeds) {
            var simulation = DeliverySimulation(seed: seed, options: options)
            simulation.run()
            totals.committed += simulation.committed
            totals.written += simulation.written
            totals.changes += simulation.changesCommitted
            totals.changesWritten += simulation.changesWritten
            totals.ended += simulation.streamsEnded
            totals.reads += simulation.storeReads
            if !simulation.failures.isEmpty {
                failed.append(seed)
                print("seed \(seed) FAILED: \(simulation.failures[0])\(simulation.failures.count > 1 ? " (and \(simulation.failures.count - 1) more)" : "")")
            }
        }
        print("\(seeds) seeds from \(first)\(without.map { " without \($0)" } ?? ""): \(failed.count) failed; "
            + "\(totals.committed) messages committed, \(totals.written) written to streams, "
            + "\(totals.changes) changes to messages committed, \(totals.changesWritten) written, \(totals.ended) streams ended on a gap, "
            + "\(totals.reads) store reads of held-back seqs")
        if !failed.isEmpty {
            print("reproduce one: parley-simulate --seed \(failed[0])\(without.map { " --without \($0)" } ?? "")")
            throw ExitCode(1)
        }
    }

    func runCluster() async throws {
        var options = ClusterSimulation.Options()
        if let without {
            guard let removed = ClusterSimulation.Guard(rawValue: without) else {
                throw ValidationError("the cluster simulation's guards are \(ClusterSimulation.Guard.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            removed.remove(from: &options)
        }
        // One thread, one queue: the same seed is the same run.
        let deterministic = SimulationExecutor.install()
        if !deterministic {
            print("warning: the runtime's global executor could not be replaced; the nodes' tasks interleave as the thread pool has them")
        } else if ProcessInfo.processInfo.environment["SWIFT_DETERMINISTIC_HASHING"] == nil {
            print("warning: SWIFT_DETERMINISTIC_HASHING is not set (Scripts/simulate sets it): dictionaries iterate differently from run to run")
        }
        if checkGuards { return try await checkEveryClusterGuard(deterministic: deterministic) }
        let range = seed.map { $0...$0 } ?? first...(first + seeds - 1)
        var failed: [UInt64] = []
        for seed in range {
            let simulation = try await runClusterSeed(seed, options: options, deterministic: deterministic)
            print("cluster seed \(seed): \(simulation.summary)")
            if trace { for line in simulation.trace { print("  " + line) } }
            guard let failure = simulation.failures.first else { continue }
            failed.append(seed)
            if self.seed != nil, !trace {
                let named = Set(simulation.failures.flatMap { $0.split(separator: " ").filter { $0.hasPrefix("c_") || $0.hasPrefix("d_") } }.map(String.init))
                let lines = simulation.trace.filter { line in
                    ["FAILURE", "killed", "restarted", "rejoined", "cut", "paused"].contains { line.contains($0) } || named.contains { line.contains($0) }
                }
                for line in lines { print("  " + line) }
            } else if !trace {
                print("  \(failure)")
            }
        }
        if range.count > 1 { print("\(range.count) cluster seeds from \(range.lowerBound): \(failed.count) failed") }
        if !failed.isEmpty {
            print("run one again: parley-simulate --cluster --seed \(failed[0])\(without.map { " --without \($0)" } ?? "")")
            throw ExitCode(1)
        }
    }

    /// One seed of the whole-cluster simulation, run on the ``SimulationExecutor`` when it is
    /// installed.
    func runClusterSeed(_ seed: UInt64, options: ClusterSimulation.Options, deterministic: Bool) async throws -> ClusterSimulation {
        guard deterministic else {
            let simulation = ClusterSimulation(seed: seed, options: options)
            try await simulation.run()
            return simulation
        }
        let simulation = ClusterSimulation(seed: seed, options: options, settle: { await SimulationExecutor.shared.settled() })
        let outcome = Outcome()
        Task {
            do { try await simulation.run() } catch { outcome.set(error) }
            outcome.finish()
        }
        guard SimulationExecutor.shared.run(until: { outcome.finished }) else {
            print("cluster seed \(seed): STUCK: every task waits and nothing moves the clock")
            throw ExitCode(1)
        }
        if let error = outcome.error { throw error }
        return simulation
    }

    /// Each of the nodes' guards removed must make some seed of the whole-cluster simulation fail.
    func checkEveryClusterGuard(deterministic: Bool) async throws {
        try await checkGuards(ClusterSimulation.Guard.checked.map(\.rawValue), label: "cluster without") { name, seed in
            var options = ClusterSimulation.Options()
            ClusterSimulation.Guard(rawValue: name)?.remove(from: &options)
            return try await runClusterSeed(seed, options: options, deterministic: deterministic).failures.first
        }
    }

    /// Each guard removed must make some seed fail within the budget: otherwise the simulation
    /// could not tell the contract from its breach.
    func checkEveryGuard() async throws {
        try await checkGuards(DeliverySimulation.Guard.allCases.map(\.rawValue), label: "without") { name, seed in
            var options = DeliverySimulation.Options()
            DeliverySimulation.Guard(rawValue: name)?.remove(from: &options)
            var simulation = DeliverySimulation(seed: seed, options: options)
            simulation.run()
            return simulation.failures.first
        }
    }

    /// For each guard (by name), runs seeds from --first without it until one fails (at most
    /// --seeds) and says which; fails if a guard's removal went unnoticed.
    func checkGuards(_ names: [String], label: String, firstFailure: (String, UInt64) async throws -> String?) async throws {
        var missed: [String] = []
        for name in names {
            var caught: (seed: UInt64, failure: String)?
            for seed in first..<(first + seeds) {
                if let failure = try await firstFailure(name, seed) {
                    caught = (seed, failure)
                    break
                }
            }
            if let caught {
                print("\(label) \(name): caught by seed \(caught.seed): \(caught.failure)")
            } else {
                print("\(label) \(name): NOT caught in seeds \(first)…\(first + seeds - 1)")
                missed.append(name)
            }
        }
        if !missed.isEmpty { throw ExitCode(1) }
    }

    func printScale() {
        print("ring: \(keys) keys, \(HashRing.Settings.default.virtualNodes) points per worker, \(HashRing.Settings.default.probes) probes per key")
        for workers in ringWorkers.split(separator: ",").compactMap({ Int($0) }) {
            let figures = ScaleSimulation.ring(workers: workers, keys: keys)
            print("  \(workers) workers: busiest \(percent(figures.maxOverMean)) of the mean, idlest \(percent(figures.minOverMean)); "
                + "a join moves \(percent(figures.joinMoved)) of the keys (ideal \(percent(figures.joinIdeal)))\(figures.joinOnlyToNew ? ", all to the new worker" : ", SOME BETWEEN OLD WORKERS"); "
                + "a leave moves \(percent(figures.leaveMoved)) (ideal \(percent(figures.leaveIdeal)))\(figures.leaveOnlyFromDeparted ? ", all the departed worker's" : ", SOME NOT THE DEPARTED WORKER'S")")
        }
        let membership = MembershipSettings.default
        print("gossip: each node to \(membership.gossipPeersPerRound) peers in turn each heartbeat (\(membership.heartbeatInterval)), "
            + "suspect after \(membership.suspectAfter) and down after \(membership.downAfter) without a rising heartbeat")
        for nodes in gossipNodes.split(separator: ",").compactMap({ Int($0) }) {
            let figures = ScaleSimulation.gossip(nodes: nodes, settings: membership)
            func text(_ duration: Duration?) -> String { duration.map { "\($0)" } ?? "not within 30 s" }
            print("  \(nodes) nodes: a join seen by all after \(text(figures.join)), a crash after \(text(figures.crash)), "
                + "a 5 s partition healed after \(text(figures.partitionHeal)); quiet for 10 s, each node sends "
                + "\(Int(figures.messagesPerNodePerSecond.rounded())) messages/s of \(Int(figures.entriesPerNodePerSecond.rounded())) member entries, "
                + "and \(figures.falseSuspicions) suspicions and \(figures.falseDowns) downs of running nodes")
        }
    }

    /// `value` as a percentage with two decimals.
    func percent(_ value: Double) -> String {
        let hundredths = Int((value * 10_000).rounded())
        return "\(hundredths / 100).\(String(100 + hundredths % 100).dropFirst()) %"
    }
}

extension DeliverySimulation.Guard: ExpressibleByArgument {}

/// How a simulation run on the ``SimulationExecutor`` ended.
final class Outcome: Sendable {
    private let state = Mutex<(finished: Bool, error: (any Error)?)>((false, nil))
    func set(_ error: any Error) { state.withLock { $0.error = error } }
    func finish() { state.withLock { $0.finished = true } }
    var finished: Bool { state.withLock { $0.finished } }
    var error: (any Error)? { state.withLock { $0.error } }
}
