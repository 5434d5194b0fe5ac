import ParleySimulation
import Testing

/// The whole-cluster simulation: real workers and gateways on one stepped clock over a simulated
/// network, under kills (a burst of every worker in turn among them), cut links, pauses and broken
/// streams. A few seeds here; `Scripts/tests/simulate.sh` runs more in release.
@Suite(.serialized) struct ClusterSimulationTests {
    @Test(arguments: [UInt64(1), 2, 3])
    func seedsPass(seed: UInt64) async throws {
        let simulation = ClusterSimulation(seed: seed)
        try await simulation.run()
        let failureTrace = simulation.trace.filter { $0.contains("FAILURE") || $0.contains("killed") || $0.contains("paused") || $0.contains("cut") }
        #expect(simulation.failures.isEmpty, "seed \(seed): \(simulation.summary)\n\(failureTrace.joined(separator: "\n"))")
        #expect(simulation.acknowledgedCount > 150 && simulation.writtenCount > simulation.acknowledgedCount, "seed \(seed) did work: \(simulation.summary)")
        #expect(simulation.trace.contains { $0.contains("worker-0 killed") } && simulation.trace.contains { $0.contains("worker-2 killed") },
                "the burst killed every worker")
    }
}
