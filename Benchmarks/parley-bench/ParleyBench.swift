import ArgumentParser

@main
struct ParleyBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley-bench",
        abstract: "Parley's benchmarks and test drivers (they print numbers; tests never assert on them).",
        subcommands: [RPCServe.self, RPCDrive.self, StoreBench.self, StoreRaw.self, StoreReads.self, SearchBench.self, SeedAccount.self, ClusterAppend.self, LimiterBench.self])
}
