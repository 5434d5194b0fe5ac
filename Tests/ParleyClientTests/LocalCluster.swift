import Foundation
import ParleyClient
import ParleyModel
import Testing

/// A cluster of real `parley-node` processes (this build's debug binaries), started by
/// `Scripts/cluster` in a folder of its own, on ports of its own: the nodes talk over TLS and the
/// clients reach the gateways over HTTPS, as an app's do. ``down()`` stops exactly the processes
/// it recorded.
final class LocalCluster: Sendable {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let binaries = root.appendingPathComponent(".build/debug")

    let state: URL
    let environment: [String: String]
    let gateways: [URL]
    let ca: String

    /// Starts `workers` workers and `gateways` gateways; `settings` go to every node's
    /// environment (e.g. `PARLEY_REPLAY_MAX`).
    static func start(workers: Int, gateways: Int, settings: [String: String] = [:]) throws -> LocalCluster {
        guard FileManager.default.isExecutableFile(atPath: binaries.appendingPathComponent("parley-node").path) else {
            throw Failure("no parley-node at \(binaries.path): build it first (swift build)")
        }
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("parley-client-cluster-\(UUID().uuidString.prefix(8))")
        var lastError = ""
        // A port range another program holds is refused by Scripts/cluster: try another.
        for _ in 0..<5 {
            let base = Int.random(in: 200...580) * 100
            var environment = ProcessInfo.processInfo.environment.merging(settings) { $1 }
            environment["PARLEY_STATE"] = state.path
            environment["PARLEY_BIN"] = binaries.path
            environment["PARLEY_CLUSTER_BASE"] = "\(base)"
            environment["PARLEY_OPS_BASE"] = "\(base + 30)"
            environment["PARLEY_CLIENT_BASE"] = "\(base + 60)"
            let (status, output) = try run(["up", "--workers", "\(workers)", "--gateways", "\(gateways)"], environment: environment)
            guard status == 0 else {
                lastError = output
                _ = try? run(["down"], environment: environment)
                if output.contains("is in use") { continue }
                break
            }
            let (_, env) = try run(["env"], environment: environment)
            var values: [String: String] = [:]
            for line in env.split(separator: "\n") where line.hasPrefix("export ") {
                let pair = line.dropFirst("export ".count).split(separator: "=", maxSplits: 1).map(String.init)
                if pair.count == 2 { values[pair[0]] = pair[1] }
            }
            guard let urls = values["PARLEY_URLS"], let ca = values["PARLEY_CA"] else { throw Failure("Scripts/cluster env printed no URLs: \(env)") }
            return LocalCluster(state: state, environment: environment, gateways: urls.split(separator: ",").compactMap { URL(string: String($0)) }, ca: ca)
        }
        throw Failure("Scripts/cluster up failed: \(lastError)")
    }

    private init(state: URL, environment: [String: String], gateways: [URL], ca: String) {
        self.state = state
        self.environment = environment
        self.gateways = gateways
        self.ca = ca
    }

    /// `Scripts/cluster ARGUMENTS` with this cluster's settings; throws unless it succeeds.
    @discardableResult
    func cluster(_ arguments: String...) throws -> String {
        let (status, output) = try Self.run(arguments, environment: environment)
        guard status == 0 else { throw Failure("Scripts/cluster \(arguments.joined(separator: " ")) failed: \(output)") }
        return output
    }

    /// Stops every node it recorded and removes its folder.
    func down() {
        _ = try? Self.run(["down"], environment: environment)
        try? FileManager.default.removeItem(at: state)
    }

    /// A client of the gateways, in `order` (indexes into ``gateways``; default: all, first first).
    func client(gateways order: [Int]? = nil, token: String? = nil) throws -> ParleyClient {
        var configuration = ParleyClient.Configuration(gateways: (order ?? Array(gateways.indices)).map { gateways[$0] }, caCertificatePath: ca)
        configuration.requestTimeout = .seconds(10)
        return try ParleyClient(configuration: configuration, token: token)
    }

    /// A new user, signed in.
    func user(_ handle: String, gateways order: [Int]? = nil) async throws -> (ParleyClient, User) {
        let client = try client(gateways: order)
        let user = try await client.register(handle: "\(handle)\(UInt16.random(in: 1000...9999))", password: "correct horse battery", displayName: handle)
        return (client, user)
    }

    static func run(_ arguments: [String], environment: [String: String]) throws -> (Int32, String) {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("parley-cluster-output-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: log) }
        let child = try ChildProcess(root.appendingPathComponent("Scripts/cluster").path, arguments, environment: environment, output: log.path)
        let status = child.wait()
        return (status, String(decoding: (try? Data(contentsOf: log)) ?? Data(), as: UTF8.self))
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}

/// A process started with `posix_spawn`, its output (both streams) into a file, waited for with
/// `waitpid`. Not Foundation's `Process`: on Linux it learns of the exit through a descriptor the
/// child inherits, and the nodes `Scripts/cluster` starts in the background inherit it too, so
/// `up` was never seen to end.
struct ChildProcess {
    let pid: pid_t

    init(_ path: String, _ arguments: [String], environment: [String: String], output: String) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, path, &actions, nil, argv, envp)
        guard result == 0 else { throw LocalCluster.Failure("cannot start \(path): \(String(cString: strerror(result)))") }
        self.pid = pid
    }

    /// Its exit status (128 + N when signal N ended it).
    func wait() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1, errno == EINTR {}
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}

/// Polls `condition` every 50 ms until it holds or `timeout` passes; answers whether it held.
func eventually(within timeout: Duration = .seconds(30), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now.advanced(by: timeout)
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(50))
    }
    return try await condition()
}

/// Every message of a conversation as the server holds it, ascending.
func history(of conversation: ConversationID, with client: ParleyClient) async throws -> [Message] {
    var all: [Message] = []
    while true {
        let page = try await client.messages(in: conversation, after: all.last?.seq ?? 0, limit: 200)
        if page.isEmpty { return all }
        all += page
    }
}
