import Distributed
import Foundation
import Logging
import ParleyCluster
import ParleyTransport
import Synchronization
import Testing

/// A virtual actor for tests: says where it runs, counts its calls, throws typed errors.
distributed actor Probe {
    typealias ActorSystem = ClusterSystem

    private var calls = 0

    distributed func whereAreYou() -> String {
        actorSystem.settings.name
    }

    /// Calls on this activation so far, this one included.
    distributed func count() -> Int {
        calls += 1
        return calls
    }

    distributed func echo(_ text: String, times: Int) -> [String] {
        Array(repeating: text, count: times)
    }

    distributed func fail(code: String) throws {
        throw ClusterCallError(code: .init(rawValue: code), message: "failed on purpose on \(actorSystem.settings.name)")
    }

    distributed func doNothing() {}
}

/// Several ClusterSystems in this process over real loopback TLS, with certificates from a
/// throwaway CA.
final class TestCluster: Sendable {
    static let membership = MembershipSettings(
        heartbeatInterval: .milliseconds(100), suspectAfter: .milliseconds(500), downAfter: .milliseconds(1000),
        formClusterAfter: .milliseconds(300))

    let directory: URL
    let systems: Mutex<[String: ClusterSystem]> = Mutex([:])
    /// Activations per actor ID, over every node.
    let activations = Mutex<[ClusterActorID: [String]]>([:])
    /// The first node started: every later node's seed.
    let firstSeed = Mutex<NodeAddress?>(nil)

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-test-\(UUID().uuidString)")
        try ClusterCertificates.initAuthority(in: directory)
    }

    deinit {
        try? FileManager.default.removeItem(at: directory)
    }

    /// Starts a node; the first node started is everybody's seed.
    @discardableResult
    func start(
        _ name: String, roles: NodeRoles = .worker, seed: NodeAddress? = nil, incarnation: UInt64 = ClusterSettings.incarnationNow(),
        callTimeout: Duration = .seconds(2), transportSettings: TransportSettings = .default
    ) async throws -> ClusterSystem {
        if !FileManager.default.fileExists(atPath: directory.appendingPathComponent("\(name).pem").path) {
            try ClusterCertificates.issue(node: name, in: directory)
        }
        let seedAddress = seed ?? firstSeed.withLock { $0 }
        let settings = ClusterSettings(
            name: name, roles: roles, bindAddress: NodeAddress(host: "127.0.0.1", port: 0),
            seeds: seedAddress.map { [$0] } ?? [], incarnation: incarnation, membership: Self.membership, callTimeout: callTimeout)
        var logger = Logger(label: "test.\(name)")
        logger.logLevel = ProcessInfo.processInfo.environment["PARLEY_TEST_LOG"] == nil ? .critical : .debug
        let transport = NIOClusterTransport(
            bindAddress: settings.bindAddress, tls: try ClusterTLS.load(directory: directory, node: name),
            settings: transportSettings, logger: logger)
        let system = ClusterSystem(settings: settings, transport: transport, logger: logger)
        system.register(kind: "probe") { [self] id, system in
            self.activations.withLock { $0[id, default: []].append(system.settings.name) }
            return Probe(actorSystem: system)
        }
        try await system.start()
        systems.withLock { $0[name] = system }
        firstSeed.withLock { $0 = $0 ?? system.address }
        return system
    }

    subscript(name: String) -> ClusterSystem {
        systems.withLock { $0[name]! }
    }

    func remove(_ name: String) {
        _ = systems.withLock { $0.removeValue(forKey: name) }
    }

    func stopAll() async {
        for system in systems.withLock({ Array($0.values) }) { await system.stop() }
        systems.withLock { $0 = [:] }
    }

    /// Waits until every running node sees exactly `names` as up members.
    func waitForUp(_ names: Set<String>, timeout: Duration = .seconds(15)) async throws {
        try await eventually(timeout: timeout, "every node sees \(names.sorted()) up") {
            systems.withLock { Array($0.values) }.allSatisfy { system in
                Set(system.members.filter { $0.status == .up }.map(\.name)) == names && system.ring.workers.count == names.count
            }
        }
    }
}

struct Timeout: Error, CustomStringConvertible {
    var description: String
}

/// Polls `condition` every 20 ms until it holds; fails after `timeout` (a bound, never a speed check).
func eventually(timeout: Duration, _ what: String, _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now.advanced(by: timeout)
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    if try await condition() { return }
    throw Timeout(description: "timed out after \(timeout) waiting until \(what)")
}
