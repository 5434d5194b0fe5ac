import ArgumentParser
import Foundation
import Histogram
import ParleyClient
import ParleyLoad
import ParleyModel

/// `parley-load changes`: changes to messages (edits or reactions) at a fixed rate in groups,
/// or sends to the same groups, each through the same client path, so that the server CPU of
/// each kind is measured the same way.
struct Changes: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Edit or react to messages at a fixed rate in groups, or send to them: the server CPU each costs.",
        discussion: """
            Every member of every group (--groups of --group-size; every user's stream open) first \
            sends one message. Then, at --rate for --warmup + --duration, each operation is, by \
            --kind: `send`, a member sends to its group; `edit`, a member edits its own message; \
            `reaction`, a member adds 👍 to the next member's message, or takes it back on its next \
            turn, so that every call changes something. Reported: operations acknowledged and \
            failed, their latency, and (with --server-metrics) the server CPU per operation over \
            the measured part.
            """)

    enum Kind: String, ExpressibleByArgument, CaseIterable {
        case send, edit, reaction
    }

    @OptionGroup var options: WorkloadOptions
    @Option(help: "What each operation is: send, edit or reaction.") var kind: Kind = .reaction
    @Option(help: "Operations per second, all users together.") var rate = 1_000.0
    @Option(help: "How long to measure (e.g. 20s).") var duration = DurationOption(.seconds(20))
    @Option(help: "How long to run before measuring (e.g. 3s).") var warmup = DurationOption(.seconds(3))

    func validate() throws {
        guard rate > 0, duration.duration > .zero else { throw ValidationError("--rate and --duration must be positive") }
        guard options.groups > 0 else { throw ValidationError("--groups must be at least 1: the operations happen in groups") }
    }

    func run() async throws {
        options.configureEventLoops()
        let workload = try await Workload.prepare(options)
        let groups = Array(workload.conversations.dropFirst(workload.directCount))
        // Each member's own message in its group: what it edits, and what the member before it reacts to.
        let seeded = try await withThrowingTaskGroup(of: (Int, Int, Int64).self) { tasks in
            for (g, group) in groups.enumerated() {
                for (m, member) in group.members.enumerated() {
                    tasks.addTask {
                        let message = try await workload.clients[member].send("seed \(g).\(m)", to: group.id)
                        return (g, m, message.seq)
                    }
                }
            }
            var seqs = groups.map { [Int64](repeating: 0, count: $0.members.count) }
            for try await (g, m, seq) in tasks { seqs[g][m] = seq }
            return seqs
        }
        let total = Int((warmup.seconds + duration.seconds) * rate)
        let measuredFrom = Int(warmup.seconds * rate)
        print("parley-load changes: \(kind.rawValue) at \(rate)/s in \(groups.count) groups of \(options.groupSize) for \(warmup) + \(duration)")
        let clients = workload.clients
        let kind = self.kind
        let failures = Failures()
        let cpu = CPUWindow()
        let result = await OpenLoop(rate: rate, count: total).run { k, _ in
            if k == measuredFrom { await cpu.start(workload) }
            let g = k % groups.count
            let round = k / groups.count
            let members = groups[g].members
            let m = round % members.count
            let client = clients[members[m]]
            do {
                switch kind {
                case .send:
                    _ = try await client.send("load \(k)", to: groups[g].id)
                case .edit:
                    _ = try await client.edit(seeded[g][m], in: groups[g].id, text: "edit \(k)")
                case .reaction:
                    // Member m's turns on the next member's message alternate adding and taking back.
                    let adding = (round / members.count) % 2 == 0
                    _ = try await client.react("👍", to: seeded[g][(m + 1) % members.count], in: groups[g].id, adding: adding)
                }
                return true
            } catch {
                await failures.add("\((error as? ParleyError)?.code ?? "error")")
                return false
            }
        }
        let perOperation = await cpu.microsPerOperation(workload, operations: total - measuredFrom)
        let failed = await failures.counts
        print("  operations: \(total - failed.values.reduce(0, +)) acknowledged, \(failed.isEmpty ? "none failed" : "failed: \(failed.sorted { $0.key < $1.key })")")
        print(String(format: "  latency p50 %.1f ms, p99 %.1f ms", Double(result.latency.valueAtPercentile(50)) / 1000, Double(result.latency.valueAtPercentile(99)) / 1000))
        if let perOperation { print(String(format: "  server CPU per %@: %.0f µs", kind.rawValue, perOperation)) }
        _ = await workload.finish(drain: 1, readBack: false, timeline: nil)
        if !failed.isEmpty { throw ExitCode(1) }
    }

    actor Failures {
        var counts: [String: Int] = [:]
        func add(_ code: String) { counts[code, default: 0] += 1 }
    }

    /// The servers' CPU seconds from the start of the measured part to the end.
    actor CPUWindow {
        var before: [String: Double]?
        var started = false

        func start(_ workload: Workload) async {
            guard !started else { return }
            started = true
            before = await workload.serverCPUSeconds()
        }

        func microsPerOperation(_ workload: Workload, operations: Int) async -> Double? {
            guard let before, let after = await workload.serverCPUSeconds(), operations > 0 else { return nil }
            let seconds = after.reduce(0.0) { $0 + $1.value - (before[$1.key] ?? $1.value) }
            return seconds * 1e6 / Double(operations)
        }
    }
}
