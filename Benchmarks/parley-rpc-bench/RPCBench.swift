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

/// Remote-call benchmark between two processes over loopback mutual TLS.
///
/// `serve` runs a worker that hosts `BenchEcho` actors; `drive` runs a gateway-only node (never on
/// the ring, so every call crosses to the worker), measures sequential round trips, then calls/s
/// with a fixed number of calls in flight, and prints the numbers. `Scripts/bench-rpc` runs both.
@main
struct RPCBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley-rpc-bench",
        abstract: "Measure Parley remote calls between two processes over loopback TLS.",
        subcommands: [Serve.self, Drive.self])

    struct Common: ParsableArguments {
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
                seeds: seed.flatMap(NodeAddress.init(parsing:)).map { [$0] } ?? [])
            var logger = Logger(label: "bench.\(name)")
            logger.logLevel = .warning
            let transport = NIOClusterTransport(
                bindAddress: settings.bindAddress, tls: try ClusterTLS.load(directory: URL(fileURLWithPath: tlsDir), node: name), logger: logger)
            let system = ClusterSystem(settings: settings, transport: transport, logger: logger)
            system.register(kind: "echo") { _, system in BenchEcho(actorSystem: system) }
            return system
        }
    }

    struct Serve: AsyncParsableCommand {
        @OptionGroup var common: Common
        @Option(help: "Exit after this many seconds.")
        var seconds = 120

        func run() async throws {
            let system = try common.system(roles: .worker)
            try await system.start()
            try await Task.sleep(for: .seconds(seconds))
            await system.stop()
        }
    }

    struct Drive: AsyncParsableCommand {
        @OptionGroup var common: Common
        @Option(help: "Sequential calls to time.")
        var sequential = 20_000
        @Option(help: "Calls in flight for the throughput run.")
        var inFlight = 100
        @Option(help: "Seconds of the throughput run.")
        var seconds = 5

        func run() async throws {
            let system = try common.system(roles: .gateway)
            try await system.start()
            let deadline = ContinuousClock.now.advanced(by: .seconds(30))
            while system.ring.workers.isEmpty || !system.isUp {
                guard ContinuousClock.now < deadline else { throw ValidationError("no worker joined within 30 s") }
                try await Task.sleep(for: .milliseconds(20))
            }
            let actors = try (0..<64).map { try BenchEcho.resolve(id: ClusterActorID(kind: "echo", key: "k\($0)"), using: system) }
            for actor in actors { _ = try await actor.ping(0) }  // activate
            for i in 0..<2_000 { _ = try await actors[i % actors.count].ping(i) }  // warm up

            var samples: [Duration] = []
            samples.reserveCapacity(sequential)
            let clock = ContinuousClock()
            for i in 0..<sequential {
                let started = clock.now
                _ = try await actors[i % actors.count].ping(i)
                samples.append(started.duration(to: clock.now))
            }
            samples.sort()
            print(String(format: "sequential: %d calls  p50 %.0f µs  p90 %.0f µs  p99 %.0f µs  max %.0f µs",
                sequential, micros(samples[samples.count / 2]), micros(samples[samples.count * 9 / 10]),
                micros(samples[samples.count * 99 / 100]), micros(samples[samples.count - 1])))

            let runFor = Duration.seconds(seconds)
            let started = clock.now
            let (count, latencies) = try await withThrowingTaskGroup(of: (Int, [Duration]).self) { group in
                for worker in 0..<inFlight {
                    group.addTask {
                        var count = 0
                        var latencies: [Duration] = []
                        let actor = actors[worker % actors.count]
                        while started.duration(to: clock.now) < runFor {
                            let t0 = clock.now
                            _ = try await actor.ping(count)
                            if count % 16 == 0 { latencies.append(t0.duration(to: clock.now)) }
                            count += 1
                        }
                        return (count, latencies)
                    }
                }
                var total = 0
                var all: [Duration] = []
                for try await (count, latencies) in group {
                    total += count
                    all += latencies
                }
                return (total, all.sorted())
            }
            let elapsed = started.duration(to: clock.now)
            let rate = Double(count) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
            print(String(format: "concurrent: %d in flight  %.0f calls/s  p50 %.0f µs  p99 %.0f µs  (%d calls in %.1f s)",
                inFlight, rate, micros(latencies[latencies.count / 2]), micros(latencies[latencies.count * 99 / 100]),
                count, Double(elapsed.components.seconds)))
            await system.stop()
        }

        func micros(_ duration: Duration) -> Double {
            Double(duration.components.seconds) * 1e6 + Double(duration.components.attoseconds) / 1e12
        }
    }
}
