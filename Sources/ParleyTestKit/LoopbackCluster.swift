import Distributed
import Foundation
import Logging
import ParleyCluster
import ParleyTransport
import Synchronization

/// Several ClusterSystems in this process over real loopback TLS, with certificates from a
/// throwaway CA.
public final class LoopbackCluster: Sendable {
    public static let membership = MembershipSettings(
        heartbeatInterval: .milliseconds(100), suspectAfter: .milliseconds(500), downAfter: .milliseconds(1000),
        formClusterAfter: .milliseconds(300))

    /// The TLS directory: the throwaway CA and every node's certificate.
    public let directory: URL
    let systems: Mutex<[String: ClusterSystem]> = Mutex([:])
    /// Activations per actor ID, over every node (filled by ``recordActivation(_:on:)``).
    public let activations = Mutex<[ClusterActorID: [String]]>([:])
    /// The first node started: every later node's seed.
    let firstSeed = Mutex<NodeAddress?>(nil)
    /// Registers actor kinds on each node before it starts.
    let configure: @Sendable (ClusterSystem, LoopbackCluster) -> Void

    public init(configure: @escaping @Sendable (ClusterSystem, LoopbackCluster) -> Void) throws {
        self.configure = configure
        directory = URL(fileURLWithPath: Scratch.path("parley-test"))
        try ClusterCertificates.initAuthority(in: directory, now: Date())
    }

    deinit {
        try? FileManager.default.removeItem(at: directory)
    }

    /// Starts a node; the first node started is everybody's seed.
    @discardableResult
    public func start(
        _ name: String, roles: NodeRoles = .worker, seed: NodeAddress? = nil, incarnation: UInt64? = nil,
        callTimeout: Duration = .seconds(2), transportSettings: TransportSettings = .default,
        membership: MembershipSettings = LoopbackCluster.membership
    ) async throws -> ClusterSystem {
        if !FileManager.default.fileExists(atPath: directory.appendingPathComponent("\(name).pem").path) {
            try ClusterCertificates.issue(node: name, in: directory, now: Date())
        }
        let seedAddress = seed ?? firstSeed.withLock { $0 }
        let settings = ClusterSettings(
            name: name, roles: roles, bindAddress: NodeAddress(host: "127.0.0.1", port: 0),
            seeds: seedAddress.map { [$0] } ?? [], incarnations: WallClockIncarnations.of(ContinuousClock()), incarnation: incarnation, membership: membership, callTimeout: callTimeout)
        var logger = Logger(label: "test.\(name)")
        logger.logLevel = ProcessInfo.processInfo.environment["PARLEY_TEST_LOG"] == nil ? .critical : .debug
        let transport = NIOClusterTransport(
            bindAddress: settings.bindAddress, tls: try ClusterTLS.load(directory: directory, node: name),
            settings: transportSettings, logger: logger)
        let system = ClusterSystem(settings: settings, transport: transport, clock: ContinuousClock(), logger: logger)
        configure(system, self)
        try await system.start()
        systems.withLock { $0[name] = system }
        firstSeed.withLock { $0 = $0 ?? system.address }
        return system
    }

    /// Notes that `system` activated `id` (call it from a factory).
    public func recordActivation(_ id: ClusterActorID, on system: ClusterSystem) {
        activations.withLock { $0[id, default: []].append(system.settings.name) }
    }

    public subscript(name: String) -> ClusterSystem {
        systems.withLock { $0[name]! }
    }

    public func remove(_ name: String) {
        _ = systems.withLock { $0.removeValue(forKey: name) }
    }

    public func stopAll() async {
        for system in systems.withLock({ Array($0.values) }) { await system.stop() }
        systems.withLock { $0 = [:] }
    }

    /// Waits until every running node sees exactly `names` as up members.
    public func waitForUp(_ names: Set<String>, timeout: Duration = .seconds(15)) async throws {
        try await eventually(timeout: timeout, "every node sees \(names.sorted()) up") {
            systems.withLock { Array($0.values) }.allSatisfy { system in
                let up = system.members.filter { $0.status == .up }
                return Set(up.map(\.name)) == names && Set(system.ring.workers) == Set(up.filter { $0.roles.contains(.worker) }.map(\.name))
            }
        }
    }
}

/// A condition that did not come true in time.
public struct Timeout: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}

/// Polls `condition` every 20 ms until it holds; fails after `timeout` (a bound, never a speed check).
public func eventually(timeout: Duration, _ what: String, _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now.advanced(by: timeout)
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    if try await condition() { return }
    throw Timeout(description: "timed out after \(timeout) waiting until \(what)")
}
