import ArgumentParser

@main
struct ParleyNode: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley-node",
        abstract: "A node of a Parley chat cluster.",
        discussion: """
            Every node runs this binary. `run` starts a node (a worker hosting actors, a gateway \
            serving clients, or both); `certs` makes the cluster CA and node certificates that \
            nodes use to authenticate each other.
            """,
        subcommands: [Run.self, Certs.self])
}
