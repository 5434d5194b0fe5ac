import ArgumentParser
import Distributed
import Foundation
import Logging
import ParleyCluster
import ParleyTransport

/// The actor the benchmark calls: as little work as a call can carry.
distributed actor BenchEcho {
    typealias ActorSystem = ClusterSystem

    distributed func ping(_ value: Int) -> Int { value &+ 1 }
}

/// Options every benchmark node shares: how it joins a cluster.
struct NodeOptions: ParsableArguments {
    @Option(help: "TLS directory with ca.pem and this node's certificate.")
    var tlsDir: String
    @Option(help: "This node's name.")
    var name: String
    @Option(help: "Cluster port.")
    var port: Int
    @Option(help: "Seed host:port.")
    var seed: String?

    func system(roles: NodeRoles) throws -> ClusterSystem {
        let settings = ClusterSettings(
            name: name, roles: roles, bindAddress: NodeAddress(host: "127.0.0.1", port: port),
            seeds: seed.flatMap(NodeAddress.init(parsing:)).map { [$0] } ?? [], incarnations: WallClockIncarnations.of(ContinuousClock()))
        var logger = Logger(label: "bench.\(name)")
        logger.logLevel = .warning
        let transport = NIOClusterTransport(
            bindAddress: settings.bindAddress, tls: try ClusterTLS.load(directory: URL(fileURLWithPath: tlsDir), node: name), logger: logger)
        return ClusterSystem(settings: settings, transport: transport, clock: ContinuousClock(), logger: logger)
    }

    /// Starts a gateway-only node (never on the ring) and waits until a worker is.
    func startDriver() async throws -> ClusterSystem {
        let system = try system(roles: .gateway)
        try await system.start()
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while system.ring.workers.isEmpty || !system.isUp {
            guard ContinuousClock.now < deadline else { throw ValidationError("no worker joined within 30 s") }
            try await Task.sleep(for: .milliseconds(20))
        }
        return system
    }
}

/// Remote-call benchmark, server side: a worker hosting `BenchEcho` actors. `Scripts/bench-rpc`
/// runs it with ``RPCDrive``.
struct RPCServe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rpc-serve", abstract: "Host BenchEcho actors for rpc-drive.")
    @OptionGroup var node: NodeOptions
    @Option(help: "Exit after this many seconds.")
    var seconds = 120

    func run() async throws {
        let system = try node.system(roles: .worker)
        system.register(kind: "echo") { _, system in BenchEcho(actorSystem: system) }
        try await system.start()
        try await Task.sleep(for: .seconds(seconds))
        await system.stop()
    }
}

/// Remote-call benchmark, client side: a gateway-only node (never on the ring, so every call
/// crosses to the worker) measures sequential round trips, then calls/s with a fixed number of
/// calls in flight.
struct RPCDrive: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rpc-drive", abstract: "Measure remote calls to an rpc-serve node.")
    @OptionGroup var node: NodeOptions
    @Option(help: "Sequential calls to time.")
    var sequential = 20_000
    @Option(help: "Calls in flight for the throughput run.")
    var inFlight = 100
    @Option(help: "Seconds of the throughput run.")
    var seconds = 5

    func run() async throws {
        let system = try await node.startDriver()
        let actors = try (0..<64).map { try BenchEcho.resolve(id: ClusterActorID(kind: "echo", key: "k\($0)"), using: system) }
        for actor in actors { _ = try await actor.ping(0) }  // activate
        for i in 0..<2_000 { _ = try await actors[i % actors.count].ping(i) }  // warm up

        var sequentialLatencies = Latencies()
        let clock = ContinuousClock()
        for i in 0..<sequential {
            let started = clock.now
            _ = try await actors[i % actors.count].ping(i)
            sequentialLatencies.record(started.duration(to: clock.now))
        }
        print("sequential: \(sequential) calls  \(sequentialLatencies.summary())")

        let runFor = Duration.seconds(seconds)
        let started = clock.now
        let (count, latencies) = try await withThrowingTaskGroup(of: (Int, Latencies).self) { group in
            for worker in 0..<inFlight {
                group.addTask {
                    var count = 0
                    var latencies = Latencies()
                    let actor = actors[worker % actors.count]
                    while started.duration(to: clock.now) < runFor {
                        let t0 = clock.now
                        _ = try await actor.ping(count)
                        if count % 16 == 0 { latencies.record(t0.duration(to: clock.now)) }
                        count += 1
                    }
                    return (count, latencies)
                }
            }
            return try await group.reduce(into: (0, Latencies())) { $0.0 += $1.0; $0.1.merge($1.1) }
        }
        let elapsed = started.duration(to: clock.now)
        print(String(format: "concurrent: %d in flight  %.0f calls/s  ", inFlight, Double(count) / elapsed.seconds)
            + latencies.summary([50, 99]) + String(format: "  (%d calls in %.1f s)", count, elapsed.seconds))
        await system.stop()
    }
}
