import Distributed
import Synchronization
import Foundation
import NIOPosix
import ParleyCluster
import ParleyTestKit
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

    distributed func twice(_ text: String) -> String {
        text + text
    }

    /// The value it was given, as it arrived.
    distributed func handBack(_ value: Tallied) -> Tallied {
        value
    }

    /// Whether this call runs on one of NIO's event loops (the transport's loop executor).
    distributed func runsOnAnEventLoop() -> Bool {
        MultiThreadedEventLoopGroup.currentEventLoop != nil
    }
}


/// A value that counts how often it was encoded, in a tally that only the original holds (a
/// decoded copy gets a fresh one).
struct Tallied: Codable, Sendable {
    final class Tally: Sendable {
        let encodes = Mutex(0)
    }

    var text: String
    let tally: Tally

    init(_ text: String) {
        self.text = text
        tally = Tally()
    }

    init(from decoder: any Decoder) throws {
        text = try decoder.singleValueContainer().decode(String.self)
        tally = Tally()
    }

    func encode(to encoder: any Encoder) throws {
        tally.encodes.withLock { $0 += 1 }
        var container = encoder.singleValueContainer()
        try container.encode(text)
    }
}

/// A probe key that `system`'s ring gives to `owner`.
func probeKey(ownedBy owner: String, on system: ClusterSystem) throws -> String {
    try #require((0..<500).map { "key-\($0)" }.first { system.owner(of: ClusterActorID(kind: "probe", key: $0)) == owner })
}

/// The loopback cluster of these tests: every node can activate `Probe`s.
func makeTestCluster() throws -> LoopbackCluster {
    try LoopbackCluster { system, cluster in
        system.register(kind: "probe") { id, system in
            cluster.recordActivation(id, on: system)
            return Probe(actorSystem: system)
        }
    }
}
