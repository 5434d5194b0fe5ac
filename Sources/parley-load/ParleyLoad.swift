import ArgumentParser
import Foundation
import Histogram
import NIOCore
import NIOSSL
import ParleyClient
import ParleyImaging
import ParleyLoad
import ParleyModel
import Synchronization

@main
struct ParleyLoadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley-load",
        abstract: "Load a Parley cluster like real apps do, measure honestly, and verify every message.",
        subcommands: [Run.self, Ramp.self, Idle.self, Changes.self])
}

/// Who takes part: the options every subcommand shares.
struct WorkloadOptions: ParsableArguments {
    @Option(help: "Gateway URLs, comma-separated (env PARLEY_URLS).") var gateways: String?
    @Option(help: "CA PEM of the gateways' certificates (env PARLEY_CA).") var ca: String?
    @Option(help: "Users (an even number is used).") var users = 100
    @Option(help: "Group conversations.") var groups = 0
    @Option(help: "Members per group.") var groupSize = 10
    @Option(help: "Share of sends that go to groups (0–1).") var groupShare = 0.0
    @Option(help: "Seed of the random choices (who sends where).") var seed: UInt64 = 1
    @Option(help: """
        Share of sends that carry a photo (0–1). Each user first uploads one of 8 JPEGs parley-load \
        makes (640×480 to 1600×1200, 100–600 KB), and those sends attach it; every delivery is \
        checked to carry it.
        """)
    var attachShare = 0.0
    @Option(help: "Handle prefix of the users (reused when they exist).") var prefix = "load"
    @Option(help: "Write the JSON report here.") var report: String?
    @Option(help: "How long to wait for the last deliveries after the last send (e.g. 10s; a plain number is seconds).") var drain = DurationOption(.seconds(10))
    @Option(help: "Every node's /metrics URL, comma-separated: reports server CPU per delivered message (process_cpu_seconds_total).")
    var serverMetrics: String?
    @Option(help: "Write every acknowledged send here, one JSON object per line: conversation, scheduled and acknowledged wall-clock milliseconds.")
    var timeline: String?
    @Flag(inversion: .prefixedNo, help: "Read every conversation's history back at the end and check it against what was acknowledged.")
    var readBack = true
    @Option(help: """
        How users send and receive: 'client' (ParleyClient, as apps do: reconnects, resumes, retries \
        sends), 'frames' (one HTTP/2 connection per user driven frame by frame: about two thirds of the \
        client engine's CPU, for throughput runs; a failed connection is reported, never resumed) or \
        'stream' (as 'frames', each user's sends as lines of one send stream, POST /v1/sends, instead \
        of a request each) or 'websocket' (as 'stream', the send stream as a WebSocket over HTTP/2, \
        CONNECT /v1/sends, as the web client sends).
        """)
    var engine: Engine = .client
    @Flag(inversion: .prefixedNo, help: """
        With --engine client: send on the gateway's send stream (POST /v1/sends), as ParleyClient \
        does by default; --no-sends-on-stream sends a request each.
        """)
    var sendsOnStream = true
    @Option(help: """
        Event loop threads (default: 1 with --engine frames, stream or websocket, where one loop drives every \
        connection with a seventh less CPU than two on this two-core machine; one per core with \
        --engine client).
        """)
    var eventLoops: Int?

    enum Engine: String, ExpressibleByArgument, CaseIterable {
        case client, frames, stream, websocket

        /// How a frame-level connection sends.
        var sends: FrameLevelConnection.Sends {
            switch self {
            case .stream: .stream
            case .websocket: .webSocket
            case .client, .frames: .requests
            }
        }

        /// One HTTP/2 connection per user driven frame by frame (``FrameLevelConnection``).
        var isFrameLevel: Bool { self != .client }
    }

    func validate() throws {
        guard users >= 2 else { throw ValidationError("--users must be at least 2") }
        guard (0...1).contains(attachShare) else { throw ValidationError("--attach-share must be 0–1") }
        guard (0...1).contains(groupShare), groups >= 0, groups == 0 || (2...users).contains(groupSize) else {
            throw ValidationError("--group-share must be 0–1 and --group-size 2…users")
        }
        if groups > 0 && groupShare == 0 { throw ValidationError("--groups without --group-share sends nothing to them") }
        if let eventLoops, !(1...256).contains(eventLoops) { throw ValidationError("--event-loops must be 1–256") }
    }

    /// Sizes NIO's shared event loop group, which every connection uses; called once, first thing
    /// in a command, before anything uses the group.
    func configureEventLoops() {
        if let loops = eventLoops ?? (engine.isFrameLevel ? 1 : nil) { NIOSingletons.groupLoopCountSuggestion = loops }
    }
}

/// `parley-load run`: users with open streams, direct and group conversations, sends at a fixed
/// offered rate (open loop), latencies in HdrHistograms, and a verdict on every acknowledged
/// message (exit status 1 on any loss, duplicate, gap or reorder).
struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send at a fixed rate through the gateways and verify delivery.",
        discussion: """
            Users are named PREFIX-0…N-1 and reused when they exist (same password), so repeated runs \
            against one cluster share them. Users pair up in direct conversations; --groups adds \
            groups of --group-size members, which get --group-share of the sends. Every user's event \
            stream is open (users spread over the gateways); latency counts from each send's \
            scheduled time (no coordinated omission).
            """)

    @OptionGroup var options: WorkloadOptions
    @Option(help: "Offered sends per second, all users together.") var rate = 100.0
    @Option(help: "How long to measure (e.g. 20s; a plain number is seconds).") var duration = DurationOption(.seconds(10))
    @Option(help: "How long to send before measuring (e.g. 3s).") var warmup = DurationOption(.seconds(2))

    func validate() throws {
        guard rate > 0, duration.duration > .zero else { throw ValidationError("--rate and --duration must be positive") }
    }

    func run() async throws {
        options.configureEventLoops()
        let workload = try await Workload.prepare(options)
        print("parley-load: \(workload.clients.count) users, \(workload.conversations.count) conversations, \(rate) msg/s offered for \(warmup) + \(duration), seed \(options.seed)")
        let phase = await workload.phase(rate: rate, duration: duration.seconds, warmup: warmup.seconds)
        let faults = await workload.finish(drain: options.drain.seconds, readBack: options.readBack, timeline: options.timeline)
        let summary = workload.summary(phase, faults: faults)
        summary.print()
        try summary.write(to: options.report)
        if !faults.isEmpty { throw ExitCode(1) }
    }
}

/// `parley-load ramp`: the rate steps up until the delivery p99 passes a bound or sends fail.
struct Ramp: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Step the offered rate up until p99 passes a bound; report the highest rate that held.")

    @OptionGroup var options: WorkloadOptions
    @Option(help: "The first rate (sends per second).") var from = 100.0
    @Option(help: "Added at each step.") var step = 100.0
    @Option(name: [.customLong("step-duration"), .customLong("step-seconds")], help: "How long each step lasts, e.g. 20s (the first 2 s of each are not measured).") var stepDuration = DurationOption(.seconds(20))
    @Option(help: "The bound on delivery p99, e.g. 50ms or 1s.") var untilP99 = DurationOption(.milliseconds(50))
    @Option(help: "Stop after this rate even if it held.") var max = 100_000.0

    func run() async throws {
        options.configureEventLoops()
        guard stepDuration.seconds > 2 else { throw ValidationError("--step-duration must be longer than the 2 s each step is not measured") }
        let bound = UInt64(untilP99.seconds * 1_000_000)
        let workload = try await Workload.prepare(options)
        print("parley-load ramp: \(workload.clients.count) users, from \(from)/s by \(step)/s, \(stepDuration) per step, until delivery p99 > \(untilP99)")
        var held: Double?
        var steps: [Summary] = []
        var rate = from
        while rate <= max {
            let phase = await workload.phase(rate: rate, duration: stepDuration.seconds - 2, warmup: 2, quiet: true)
            let summary = workload.summary(phase, faults: [])
            steps.append(summary)
            let p99 = summary.delivery.p99
            let errors = summary.sendErrors.values.reduce(0, +)
            Swift.print(String(format: "  %8.0f/s  acked %6d  delivered p50 %@  p99 %@  p99.9 %@  errors %d  undelivered %d  server CPU/delivery %@", rate, summary.acknowledged,
                               Summary.Percentiles.format(summary.delivery.p50), Summary.Percentiles.format(p99),
                               Summary.Percentiles.format(summary.delivery.p999), errors, summary.undelivered,
                               summary.serverCPUMicrosPerDelivery.map { String(format: "%.0f µs", $0) } ?? "-"))
            if let worst = summary.worstSecond {
                Swift.print("            worst second: p99 \(Summary.Percentiles.format(worst.p99)), max \(Summary.Percentiles.format(worst.max)) (\(worst.second) s into the step)")
            }
            if let perRecipient = summary.serverCPUMicrosPerRecipientDelivery {
                Swift.print(String(format: "            server CPU per delivery to a member other than the sender: %.0f µs", perRecipient))
            }
            Swift.print("            cores used: \(summary.coresLine)")
            guard p99 <= bound, errors == 0, summary.undelivered == 0 else { break }
            held = rate
            rate += step
        }
        let faults = await workload.finish(drain: options.drain.seconds, readBack: options.readBack, timeline: options.timeline)
        Swift.print(held.map { "highest rate that held: \($0) msg/s (delivery p99 ≤ \(untilP99), no errors)" } ?? "not even \(from) msg/s held")
        Swift.print(faults.isEmpty ? "verified: every acknowledged message of every step was delivered" : "VERIFICATION FAILED: \(faults.count) fault(s)")
        for fault in faults.prefix(50) { Swift.print("  \(fault)") }
        Summary.printStreamErrors(workload.shared.streamErrors.withLock { $0 })
        if let report = options.report {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            struct RampReport: Encodable { var steps: [Summary]; var highestRateHeld: Double?; var faults: [String] }
            try encoder.encode(RampReport(steps: steps, highestRateHeld: held, faults: faults.map(\.description))).write(to: URL(fileURLWithPath: report))
        }
        if !faults.isEmpty { throw ExitCode(1) }
    }

}

/// `parley-load idle`: authenticated users with open streams and no traffic, to measure what an
/// idle stream costs the gateway (its resident memory before and after, from its /metrics).
struct Idle: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Open N idle streams and report the gateway's memory per stream.",
        discussion: """
            Each user signs up (or logs in), then holds one connection with its event stream open, \
            as an app does; with --engine frames or stream the sign-up connection is closed first. The \
            figure is the growth of the first gateway's resident memory, from before the sign-ups \
            to after --hold, divided by the streams on that gateway. With --server-metrics it also \
            reports the CPU every node spent over --hold, while it only kept those streams (and \
            itself) alive: pings, presence leases, heartbeats, timers.
            """)

    @OptionGroup var options: WorkloadOptions
    @Option(help: "How long to hold the streams open before measuring (e.g. 5s).") var hold = DurationOption(.seconds(5))
    @Option(help: "The first gateway's /metrics URL, on its operations port (env PARLEY_GATEWAY_METRICS; `Scripts/cluster env` sets it).")
    var gatewayMetrics: String?

    func run() async throws {
        options.configureEventLoops()
        let urls = try options.gatewayURLs()
        guard let text = gatewayMetrics ?? ProcessInfo.processInfo.environment["PARLEY_GATEWAY_METRICS"], let metrics = URL(string: text), metrics.host != nil else {
            throw ValidationError("the first gateway's /metrics URL is needed: --gateway-metrics URL (or eval \"$(Scripts/cluster env)\")")
        }
        let before = try await Self.residentBytes(metrics)
        let workload = try await Workload.prepare(options, conversations: false, closeSetupConnections: options.engine.isFrameLevel)
        let cpuBefore = await workload.serverCPUSeconds()
        let held = ContinuousClock.now
        try await Task.sleep(for: hold.duration)
        let cpuAfter = await workload.serverCPUSeconds()
        let heldSeconds = Double(OpenLoop.micros(held.duration(to: .now))) / 1e6
        let after = try await Self.residentBytes(metrics)
        let perGateway = Double(workload.clients.count) / Double(urls.count)
        _ = await workload.finish(drain: 0)
        if let cpuBefore, let cpuAfter {
            let cores = cpuAfter.keys.sorted().map { node in (node, ((cpuAfter[node] ?? 0) - (cpuBefore[node] ?? 0)) / heldSeconds) }
            Swift.print(String(format: "servers' CPU while holding them: %.4f cores in all (%@)",
                               cores.reduce(0) { $0 + $1.1 }, cores.map { String(format: "%@ %.4f", $0.0, $0.1) }.joined(separator: ", ")))
        } else if !workload.metricsURLs.isEmpty {
            Swift.print("servers' CPU while holding them: unknown (a node's /metrics could not be read)")
        }
        Swift.print(String(format: "%d idle streams over %d gateway(s); %@ resident: %.1f MiB before, %.1f MiB after → %.1f KiB per stream",
                           workload.clients.count, urls.count, urls[0].absoluteString, Double(before) / 1_048_576, Double(after) / 1_048_576,
                           (Double(after) - Double(before)) / perGateway / 1024))
    }

    /// `process_resident_memory_bytes` from the gateway's /metrics.
    static func residentBytes(_ metrics: URL) async throws -> Int {
        let text = try await ParleyClient.fetchText(metrics, caCertificatePath: nil)
        for line in text.split(separator: "\n") where line.hasPrefix("process_resident_memory_bytes ") {
            if let value = Int(line.split(separator: " ")[1]) { return value }
        }
        throw ValidationError("the gateway's /metrics has no process_resident_memory_bytes")
    }
}

extension WorkloadOptions {
    func gatewayURLs() throws -> [URL] {
        let environment = ProcessInfo.processInfo.environment
        guard let list = gateways ?? environment["PARLEY_URLS"] ?? environment["PARLEY_URL"] else {
            throw ValidationError("no gateway: --gateways URL[,URL] (or eval \"$(Scripts/cluster env)\")")
        }
        let urls = try list.split(separator: ",").map { text -> URL in
            guard let url = URL(string: String(text)), url.host != nil else { throw ValidationError("'\(text)' is not a URL") }
            return url
        }
        guard !urls.isEmpty else { throw ValidationError("--gateways names no URL") }
        return urls
    }

    var caPath: String? { ca ?? ProcessInfo.processInfo.environment["PARLEY_CA"] }
}

/// The users, their clients and streams, and the conversations: set up once, then loaded in
/// phases; the verifier sees every phase.
final class Workload: Sendable {
    /// Between attempts of a user's setup (sign-up, its photo's upload) that a gateway refused for
    /// now, at least what it asked for (`Retry-After`).
    static let setupRetry = Backoff(first: .milliseconds(200), max: .seconds(2))

    let clients: [ParleyClient]
    /// With `--engine frames` or `stream`: each user's connection, which sends and holds its stream.
    let connections: [FrameLevelConnection]
    let ids: [UserID]
    let conversations: [(id: ConversationID, members: [Int])]
    let directCount: Int
    let groupShare: Double
    /// Each user's upload (`--attach-share`), and the share of sends that attach it.
    let photos: [MediaID]
    let attachShare: Double
    let shared: Shared
    let streams: [Task<Void, Never>]
    let seed: UInt64
    let metricsURLs: [URL]
    let caPath: String?
    let phases = Mutex(0)

    init(clients: [ParleyClient], connections: [FrameLevelConnection], ids: [UserID], conversations: [(id: ConversationID, members: [Int])], directCount: Int,
         groupShare: Double, photos: [MediaID], attachShare: Double, shared: Shared, streams: [Task<Void, Never>], seed: UInt64, metricsURLs: [URL], caPath: String?) {
        self.metricsURLs = metricsURLs
        self.caPath = caPath
        self.clients = clients
        self.connections = connections
        self.ids = ids
        self.conversations = conversations
        self.directCount = directCount
        self.groupShare = groupShare
        self.photos = photos
        self.attachShare = attachShare
        self.shared = shared
        self.streams = streams
        self.seed = seed
    }

    /// `closeSetupConnections` (frame engine, no conversations): each user's client closes its
    /// connection once signed in, so the gateway ends up holding one connection per user (its
    /// stream's), as it does for an app, and at most the sign-ups' 32 others meanwhile.
    static func prepare(_ options: WorkloadOptions, conversations makeConversations: Bool = true, closeSetupConnections: Bool = false) async throws -> Workload {
        precondition(!closeSetupConnections || (options.engine.isFrameLevel && !makeConversations), "closed clients cannot create conversations or hold streams")
        let urls = try options.gatewayURLs()
        let caPath = options.caPath
        var random = SeededRandom(seed: options.seed)
        let userCount = options.users / 2 * 2
        let prefix = options.prefix
        // Users: one client each, its requests and stream on "its" gateway first.
        // At most 32 sign-ups at once (each costs the gateway a bcrypt and a TLS handshake), each
        // retried while the failure is retryable.
        let clients = try await withThrowingTaskGroup(of: (Int, ParleyClient).self) { group in
            var results = [ParleyClient?](repeating: nil, count: userCount)
            for index in 0..<userCount {
                if index >= 32, let (done, client) = try await group.next() { results[done] = client }
                let rotated = Array(urls[(index % urls.count)...] + urls[..<(index % urls.count)])
                group.addTask {
                    var configuration = ParleyClient.Configuration(gateways: rotated, caCertificatePath: caPath)
                    configuration.sendsOnStream = options.sendsOnStream
                    let client = try ParleyClient(configuration: configuration)
                    let handle = "\(prefix)-\(index)", password = "\(prefix)-password-\(index)"
                    for attempt in 1...5 {
                        do {
                            do {
                                try await client.register(handle: handle, password: password, displayName: handle)
                            } catch let error as ParleyError where error.code == "conflict" {
                                try await client.login(handle: handle, password: password)
                            }
                            if closeSetupConnections { try? await client.shutdown() }
                            return (index, client)
                        } catch let error as ParleyError where error.retryable {
                            guard attempt < 5 else {
                                let hint = error.status == 429 ? " (a gateway's login or registration limit: start it with a higher --login-rate or --registration-rate, or use a new --prefix)" : ""
                                throw ParleyError(status: error.status, code: "setup_failed", message: "\(handle) could not sign up: \(error.message)\(hint)", retryable: false)
                            }
                            try await Task.sleep(for: Workload.setupRetry.delay(afterFailures: attempt, atLeast: error.retryAfter))
                        }
                    }
                    throw ParleyError(status: 0, code: "setup_failed", message: "\(handle) could not sign up", retryable: false)
                }
            }
            for try await (done, client) in group { results[done] = client }
            return results.compactMap { $0 }
        }
        let ids = clients.compactMap(\.currentUser?.id)
        let photos = options.attachShare > 0 ? try await uploadPhotos(clients, seed: options.seed) : []

        // Conversations: direct pairs, then groups of random members.
        var conversations: [(id: ConversationID, members: [Int])] = []
        if makeConversations {
            for pair in stride(from: 0, to: userCount, by: 2) {
                conversations.append((try await clients[pair].createConversation(with: [ids[pair + 1]]).id, [pair, pair + 1]))
            }
        }
        let directCount = conversations.count
        for g in 0..<(makeConversations ? options.groups : 0) {
            var members = Set<Int>()
            while members.count < options.groupSize { members.insert(Int(random.next() % UInt64(userCount))) }
            let sorted = members.sorted()
            let group = try await clients[sorted[0]].createConversation(with: sorted.dropFirst().map { ids[$0] }, name: "\(prefix)-group-\(g)")
            conversations.append((group.id, sorted))
        }

        let shared = Shared(recordsTimeline: options.timeline != nil)
        shared.verifier.withLock { verifier in
            for conversation in conversations { verifier.conversation(conversation.id, members: conversation.members.map { ids[$0] }) }
        }
        // Streams: every user's; deliveries are recorded for the verifier and the latency.
        let connections = options.engine.isFrameLevel
            ? try await openConnections(clients, ids: ids, gateways: urls, caPath: caPath, sends: options.engine.sends, shared: shared) : []
        let streams = options.engine.isFrameLevel ? [] : clients.enumerated().map { index, client in
            Task {
                var connected = false
                do {
                    for try await event in client.events() {
                        switch event {
                        case .ready:
                            if connected { shared.reconnects.withLock { $0 += 1 } } else { shared.ready.withLock { $0 += 1 } }
                            connected = true
                        case .message(let message):
                            shared.delivered(message, to: ids[index])
                        case .cursorExpired:
                            // The client reconnects without a cursor; what it missed meanwhile is
                            // not on its stream (an app pages it from history), so the verifier
                            // reports it.
                            shared.cursorsExpired.withLock { $0 += 1 }
                        default:
                            break
                        }
                    }
                } catch {
                    shared.streamErrors.withLock { $0.append("\(ids[index]): \(error)") }
                }
            }
        }
        while shared.ready.withLock({ $0 }) < clients.count {
            if !connections.isEmpty, let failure = shared.streamErrors.withLock({ $0.first }) {
                throw ValidationError("an event stream failed before it was ready: \(failure)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        return Workload(
            clients: clients, connections: connections, ids: ids, conversations: conversations, directCount: directCount,
            groupShare: options.groups > 0 ? options.groupShare : 0, photos: photos, attachShare: photos.isEmpty ? 0 : options.attachShare, shared: shared, streams: streams, seed: options.seed,
            metricsURLs: try options.serverMetrics.map { list in
                try list.split(separator: ",").map { text in
                    guard let url = URL(string: String(text)), url.host != nil else { throw ValidationError("'\(text)' is not a URL") }
                    return url
                }
            } ?? [],
            caPath: caPath)
    }

    /// Each user uploads one photo of a corpus of 8 JPEGs made here (`--attach-share`), at most 32
    /// at once; answers each user's upload.
    private static func uploadPhotos(_ clients: [ParleyClient], seed: UInt64) async throws -> [MediaID] {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("parley-load-photos-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let sizes = [(640, 480), (800, 600), (1024, 768), (1280, 960), (1600, 1200), (480, 640), (768, 1024), (1200, 1600)]
        var files: [URL] = []
        var random = SeededRandom(seed: seed)
        for (index, (width, height)) in sizes.enumerated() {
            let file = folder.appendingPathComponent("photo-\(index).jpg")
            try Data(try Thumbnails.jpeg(rgb: photoPixels(width: width, height: height, random: &random), width: width, height: height)).write(to: file)
            files.append(file)
        }
        print("uploading a photo for each of \(clients.count) users (8 JPEGs of \(files.map { (try? FileManager.default.attributesOfItem(atPath: $0.path)[.size] as? Int) ?? 0 }.map { "\($0 / 1000) KB" }.joined(separator: ", ")))")
        return try await withThrowingTaskGroup(of: (Int, MediaID).self) { group in
            var results = [MediaID?](repeating: nil, count: clients.count)
            for (index, client) in clients.enumerated() {
                if index >= 32, let (done, media) = try await group.next() { results[done] = media }
                let file = files[index % files.count]
                group.addTask {
                    for attempt in 1...5 {
                        do {
                            return (index, try await client.upload(file: file, contentType: "image/jpeg").id)
                        } catch let error as ParleyError where error.retryable && attempt < 5 {
                            try await Task.sleep(for: Workload.setupRetry.delay(afterFailures: attempt, atLeast: error.retryAfter))
                        }
                    }
                    throw ParleyError(status: 0, code: "setup_failed", message: "user \(index) could not upload a photo", retryable: false)
                }
            }
            for try await (done, media) in group { results[done] = media }
            return results.compactMap { $0 }
        }
    }

    /// A photo-like image: smooth light and colour with grain, so that it compresses as photos do.
    private static func photoPixels(width: Int, height: Int, random: inout SeededRandom) -> [UInt8] {
        let (hue, tilt) = (Int(random.next() % 256), Int(random.next() % 64))
        var pixels = [UInt8](repeating: 0, count: width * height * 3)
        for y in 0..<height {
            for x in 0..<width {
                let grain = Int(random.next() % 24)
                let i = (y * width + x) * 3
                pixels[i] = UInt8(clamping: (x * 200 / width + hue) % 256 / 2 + grain + 40)
                pixels[i + 1] = UInt8(clamping: (y * 180 / height + tilt) + grain)
                pixels[i + 2] = UInt8(clamping: ((x + y) * 150 / (width + height) + hue / 2) + grain)
            }
        }
        return pixels
    }

    /// One frame-level connection per user (`--engine frames` or `stream`), at most 32 opening at once, each
    /// on the user's gateway with its event stream open; what the streams deliver goes to `shared`.
    private static func openConnections(
        _ clients: [ParleyClient], ids: [UserID], gateways: [URL], caPath: String?, sends: FrameLevelConnection.Sends, shared: Shared
    ) async throws -> [FrameLevelConnection] {
        var tls = ParleyClient.tls(trusting: caPath)
        tls.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: tls)
        return try await withThrowingTaskGroup(of: (Int, FrameLevelConnection).self) { group in
            var results = [FrameLevelConnection?](repeating: nil, count: clients.count)
            for (index, client) in clients.enumerated() {
                if index >= 32, let (done, connection) = try await group.next() { results[done] = connection }
                guard let token = client.token else { throw ValidationError("user \(index) has no token") }
                let user = ids[index]
                group.addTask {
                    let connection = try await FrameLevelConnection.open(
                        gateway: gateways[index % gateways.count], tls: context, token: token, sends: sends
                    ) { event in
                        switch event {
                        case .ready: shared.ready.withLock { $0 += 1 }
                        case .message(let message): shared.delivered(message, to: user)
                        case .failed(let reason): shared.streamErrors.withLock { $0.append("\(user): \(reason)") }
                        }
                    }
                    return (index, connection)
                }
            }
            for try await (done, connection) in group { results[done] = connection }
            return results.compactMap { $0 }
        }
    }

    struct Phase {
        var rate: Double
        var duration: Double
        /// Warm-up plus measured seconds.
        var seconds: Double
        var sent: Int
        var lag: Histogram<UInt64>
        /// Cores each node (by its metrics URL's host:port; when --server-metrics was given) and
        /// the load generator itself used over the phase (CPU seconds per second of `wallSeconds`).
        var nodeCores: [String: Double]?
        var loadGeneratorCores: Double
        var wallSeconds: Double
        /// Server CPU seconds (all nodes) spent during the phase.
        var serverCPUSeconds: Double? { nodeCores.map { $0.values.reduce(0, +) * wallSeconds } }
        /// Deliveries still missing when the phase settled (5 s after its last send).
        var undelivered: Int
    }

    /// Sends at `rate` for `warmup + duration` seconds; the histograms cover the measured part.
    func phase(rate: Double, duration: Double, warmup: Double, quiet: Bool = false) async -> Phase {
        let number = phases.withLock { $0 += 1; return $0 }
        var random = SeededRandom(seed: seed &+ UInt64(number) &* 0x9E37_79B9)
        shared.resetPhase()
        let cpuBefore = await serverCPUSeconds()
        let (wallBefore, ownBefore) = (ContinuousClock.now, Self.ownCPUSeconds())
        let total = Int((warmup + duration) * rate)
        let measuredFrom = Int(warmup * rate)
        let groups = conversations.count - directCount
        // Who sends what, in order: a conversation (a group one with probability groupShare), then
        // one of its members.
        let plan: [(conversation: Int, sender: Int, attach: Bool)] = (0..<total).map { _ in
            let toGroup = groups > 0 && Double(random.next() % 10_000) / 10_000 < groupShare
            let conversation = toGroup ? directCount + Int(random.next() % UInt64(groups)) : Int(random.next() % UInt64(directCount))
            let members = conversations[conversation].members
            let attach = attachShare > 0 && Double(random.next() % 10_000) / 10_000 < attachShare
            return (conversation, members[Int(random.next() % UInt64(members.count))], attach)
        }
        // Quiet (a ramp's step), it prints nothing but still finds the step's worst second.
        let progress = Task { await self.progress(printing: !quiet) }
        let schedule = OpenLoop(rate: rate, count: total)
        shared.pending.withLock { $0.reserveCapacity($0.count + total) }
        shared.verifier.withLock { $0.reserve(messages: total) }
        // Send k: its text, attachment and clientMessageId, remembered for its deliveries.
        let start = { @Sendable [shared, photos] (k: Int, scheduled: ContinuousClock.Instant) -> (text: String, attachments: [API.NewAttachment]?, clientMessageId: String) in
            let clientMessageId = ClientMessageID.make()
            shared.pending.withLock { $0[clientMessageId] = (scheduled, k >= measuredFrom) }
            let photo = plan[k].attach ? photos[plan[k].sender] : nil
            return (DeliveryVerifier.text("load \(k)", attaching: photo), photo.map { [API.NewAttachment(mediaId: $0)] }, clientMessageId)
        }
        // Whether it went through (acknowledged) or failed (counted by the API's error code).
        let finish = { @Sendable [shared] (k: Int, scheduled: ContinuousClock.Instant, outcome: Result<Message, any Error>) -> Bool in
            switch outcome {
            case .success(let message):
                shared.acknowledged(message, scheduled: scheduled, measured: k >= measuredFrom)
                return true
            case .failure(let error):
                shared.sendErrors.withLock { $0["\((error as? ParleyError)?.code ?? "error")", default: 0] += 1 }
                return false
            }
        }
        let result: OpenLoop.Result
        if connections.isEmpty {
            result = await schedule.run { [clients, conversations] k, scheduled in
                let send = start(k, scheduled)
                do {
                    let to = conversations[plan[k].conversation].id
                    let message = try await clients[plan[k].sender].send(send.text, attachments: send.attachments, to: to, clientMessageId: send.clientMessageId)
                    return finish(k, scheduled, .success(message))
                } catch {
                    return finish(k, scheduled, .failure(error))
                }
            }
        } else {
            // Frame by frame: each send starts on its connection's loop, with no task of its own.
            let paths = conversations.map { FrameLevelConnection.messagesPath($0.id) }
            result = await schedule.run(on: { [connections] k in connections[plan[k].sender].eventLoop }) { [connections, conversations] k, scheduled, done in
                let send = start(k, scheduled)
                connections[plan[k].sender].send(
                    send.text, attachments: send.attachments, to: conversations[plan[k].conversation].id, path: paths[plan[k].conversation],
                    clientMessageId: send.clientMessageId
                ) { outcome in
                    done(finish(k, scheduled, outcome))
                }
            }
        }
        // Let this phase's deliveries arrive before measuring the next one.
        let settle = ContinuousClock.now.advanced(by: .seconds(5))
        while lostCount() > 0, ContinuousClock.now < settle { try? await Task.sleep(for: .milliseconds(100)) }
        progress.cancel()
        let cpuAfter = await serverCPUSeconds()
        let wall = Double(OpenLoop.micros(wallBefore.duration(to: .now))) / 1e6
        let nodeCores = cpuBefore.flatMap { before in
            cpuAfter.map { after in after.reduce(into: [String: Double]()) { $0[$1.key] = ($1.value - (before[$1.key] ?? $1.value)) / wall } }
        }
        return Phase(
            rate: rate, duration: duration, seconds: warmup + duration, sent: total, lag: result.lag,
            nodeCores: nodeCores, loadGeneratorCores: (Self.ownCPUSeconds() - ownBefore) / wall, wallSeconds: wall,
            undelivered: lostCount())
    }

    /// `process_cpu_seconds_total` from every node's /metrics, by the URL's host:port (nil if one
    /// cannot be read).
    func serverCPUSeconds() async -> [String: Double]? {
        guard !metricsURLs.isEmpty else { return nil }
        var seconds: [String: Double] = [:]
        for url in metricsURLs {
            guard let text = try? await ParleyClient.fetchText(url, caCertificatePath: caPath),
                let line = text.split(separator: "\n").first(where: { $0.hasPrefix("process_cpu_seconds_total ") }),
                let value = Double(line.split(separator: " ")[1])
            else { return nil }
            seconds["\(url.host ?? "?"):\(url.port ?? 0)"] = value
        }
        return seconds
    }

    /// This process's user + system CPU seconds (`/proc/self/stat`; 0 where there is none).
    static func ownCPUSeconds() -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
            let end = stat.lastIndex(of: ")")
        else { return 0 }
        // After the command name: state is field 3, utime field 14, stime field 15 (clock ticks).
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    private func lostCount() -> Int {
        shared.verifier.withLock { verifier in verifier.faults().filter { $0.kind == .lost }.count }
    }

    /// Waits (up to `drain` s) for the last deliveries, reads every conversation back (unless
    /// told not to), writes the timeline, closes everything, returns the faults.
    func finish(drain: Double, readBack: Bool = true, timeline: String? = nil) async -> [DeliveryVerifier.Fault] {
        let drainUntil = ContinuousClock.now.advanced(by: .seconds(drain))
        while lostCount() > 0, ContinuousClock.now < drainUntil { try? await Task.sleep(for: .milliseconds(200)) }
        if readBack {
            for conversation in conversations {
                let reader = clients[conversation.members[0]]
                var history: [Message] = []
                var failed = false
                while !failed {
                    guard let page = try? await reader.messages(in: conversation.id, after: history.last?.seq ?? 0, limit: 200) else {
                        failed = true
                        break
                    }
                    history += page
                    if page.count < 200 { break }
                }
                if failed {
                    shared.streamErrors.withLock { $0.append("read-back of \(conversation.id) failed") }
                } else {
                    shared.verifier.withLock { $0.readBack(conversation.id, history: history) }
                }
            }
        }
        if let timeline {
            let lines = shared.timeline.withLock { $0 }.map { "{\"conversation\":\"\($0.0)\",\"scheduledMs\":\($0.1),\"ackedMs\":\($0.2)}" }
            try? (lines.joined(separator: "\n") + "\n").write(toFile: timeline, atomically: true, encoding: .utf8)
        }
        for stream in streams { stream.cancel() }
        for connection in connections { await connection.close() }
        for client in clients { try? await client.shutdown() }
        return shared.verifier.withLock { $0.faults() }
    }

    func summary(_ phase: Phase, faults: [DeliveryVerifier.Fault]) -> Summary {
        let deliveries = shared.phaseDeliveries.withLock { $0 }
        func perDelivery(_ count: Int) -> Double? {
            phase.serverCPUSeconds.map { count > 0 ? $0 * 1e6 / Double(count) : 0 }
        }
        return Summary(
            users: clients.count, conversations: conversations.count, offeredRate: phase.rate, measuredSeconds: phase.duration, sent: phase.sent,
            acknowledged: shared.phaseAcks.withLock { $0 }, deliveries: deliveries.all, undelivered: phase.undelivered,
            achievedRate: Double(shared.phaseAcks.withLock { $0 }) / phase.seconds,
            deliveriesPerSecond: Double(deliveries.all) / phase.seconds,
            sendErrors: shared.sendErrors.withLock { $0 }, reconnects: shared.reconnects.withLock { $0 },
            cursorsExpired: shared.cursorsExpired.withLock { $0 },
            ack: .init(shared.ack.withLock { $0 }), delivery: .init(shared.delivery.withLock { $0.phase }), scheduleLag: .init(phase.lag),
            worstSecond: shared.worstSecond.withLock { $0 },
            nodeCores: phase.nodeCores, loadGeneratorCores: phase.loadGeneratorCores,
            serverCPUMicrosPerDelivery: perDelivery(deliveries.all),
            serverCPUMicrosPerRecipientDelivery: perDelivery(deliveries.toRecipients),
            faults: faults.map(\.description), streamErrors: shared.streamErrors.withLock { $0 }, verified: faults.isEmpty)
    }

    private func progress(printing: Bool) async {
        let started = ContinuousClock.now
        var lastAcks = 0, lastDeliveries = 0
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(1))
            guard !Task.isCancelled else { return }
            let second = Int(started.duration(to: .now).components.seconds)
            let acks = shared.phaseAcks.withLock { $0 }, deliveries = shared.phaseDeliveries.withLock { $0.all }
            let (p, recent) = shared.delivery.withLock { delivery in
                defer { delivery.lastSecond.reset() }
                return ((delivery.phase.valueAtPercentile(50), delivery.phase.valueAtPercentile(99)),
                        (delivery.lastSecond.valueAtPercentile(99), delivery.lastSecond.max))
            }
            shared.worstSecond.withLock { worst in
                if recent.0 > (worst?.p99 ?? 0) { worst = Summary.WorstSecond(second: second, p99: recent.0, max: recent.1) }
            }
            guard printing else { continue }
            let errors = shared.sendErrors.withLock { $0.map { "\($0.key) \($0.value)" }.sorted().joined(separator: ", ") }
            Swift.print(String(
                format: "%5.0fs  acked %5d/s  delivered %6d/s  delivery p50 %@ p99 %@ (this second: p99 %@ max %@)  errors [%@]  reconnects %d",
                Double(second), acks - lastAcks, deliveries - lastDeliveries,
                Summary.Percentiles.format(p.0), Summary.Percentiles.format(p.1), Summary.Percentiles.format(recent.0),
                Summary.Percentiles.format(recent.1), errors, shared.reconnects.withLock { $0 }))
            (lastAcks, lastDeliveries) = (acks, deliveries)
        }
    }
}

/// What the senders, the streams and the progress line share.
final class Shared: Sendable {
    /// Whether acknowledgements are kept for `--timeline`: only then (a long run's table grew to
    /// millions of entries, and each doubling held the load generator's loop for a moment).
    let recordsTimeline: Bool
    let verifier = Mutex(DeliveryVerifier())
    let pending = Mutex<[String: (ContinuousClock.Instant, Bool)]>([:])
    let ack = Mutex(Histogram<UInt64>(highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: .three))
    /// Delivery latencies of this phase, and of the deliveries since the progress line last looked
    /// (their p99 and max: a second's spike, which the phase's p99 smooths over); one lock for both.
    let delivery = Mutex((
        phase: Histogram<UInt64>(highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: .three),
        lastSecond: Histogram<UInt64>(highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: .three)))
    /// The second of this phase with the highest delivery p99 so far.
    let worstSecond = Mutex<Summary.WorstSecond?>(nil)
    let sendErrors = Mutex<[String: Int]>([:])
    let streamErrors = Mutex<[String]>([])
    let ready = Mutex(0)
    let reconnects = Mutex(0)
    /// Resumes refused with `410 cursor_expired`.
    let cursorsExpired = Mutex(0)
    /// This phase's acknowledgements and deliveries: to every member's stream (the sender's own
    /// included), and of those to members other than the sender.
    let phaseAcks = Mutex(0)
    let phaseDeliveries = Mutex((all: 0, toRecipients: 0))

    func resetPhase() {
        ack.withLock { $0.reset() }
        delivery.withLock { $0.phase.reset(); $0.lastSecond.reset() }
        worstSecond.withLock { $0 = nil }
        sendErrors.withLock { $0 = [:] }
        phaseAcks.withLock { $0 = 0 }
        phaseDeliveries.withLock { $0 = (0, 0) }
    }

    /// (conversation, scheduled, acknowledged) in wall-clock milliseconds, for --timeline.
    let timeline = Mutex<[(String, Int64, Int64)]>([])

    init(recordsTimeline: Bool) {
        self.recordsTimeline = recordsTimeline
    }

    func acknowledged(_ message: Message, scheduled: ContinuousClock.Instant, measured: Bool) {
        if recordsTimeline {
            let ackedAt = Date()
            let scheduledAt = ackedAt.addingTimeInterval(-Double(OpenLoop.micros(scheduled.duration(to: .now))) / 1e6)
            timeline.withLock { $0.append((message.conversationId.rawValue, scheduledAt.millisecondsSince1970, ackedAt.millisecondsSince1970)) }
        }
        verifier.withLock { $0.acknowledged(message) }
        phaseAcks.withLock { $0 += 1 }
        if measured { _ = ack.withLock { $0.record(OpenLoop.micros(scheduled.duration(to: .now))) } }
    }

    func delivered(_ message: Message, to member: UserID) {
        let now = ContinuousClock.now
        verifier.withLock { $0.delivered(message, to: member) }
        let toRecipient = message.senderId != member
        phaseDeliveries.withLock { $0.all += 1; if toRecipient { $0.toRecipients += 1 } }
        guard toRecipient, let (scheduled, measured) = pending.withLock({ $0[message.clientMessageId] }), measured else { return }
        let micros = OpenLoop.micros(scheduled.duration(to: now))
        delivery.withLock { _ = $0.phase.record(micros); _ = $0.lastSecond.record(micros) }
    }
}

/// The final table and the JSON report.
struct Summary: Codable {
    struct Percentiles: Codable {
        var p50: UInt64, p90: UInt64, p99: UInt64, p999: UInt64, max: UInt64, count: UInt64

        init(_ histogram: Histogram<UInt64>) {
            p50 = histogram.valueAtPercentile(50)
            p90 = histogram.valueAtPercentile(90)
            p99 = histogram.valueAtPercentile(99)
            p999 = histogram.valueAtPercentile(99.9)
            max = histogram.max
            count = histogram.totalCount
        }

        static func format(_ micros: UInt64) -> String {
            micros >= 10_000 ? String(format: "%.1f ms", Double(micros) / 1000) : "\(micros) µs"
        }

        var row: String {
            [p50, p90, p99, p999, max].map { Self.format($0).padding(toLength: 10, withPad: " ", startingAt: 0) }.joined(separator: " ")
        }
    }

    var users: Int
    var conversations: Int
    var offeredRate: Double
    var measuredSeconds: Double
    var sent: Int
    var acknowledged: Int
    var deliveries: Int
    /// Acknowledged messages a member's stream had not delivered when the phase settled.
    var undelivered: Int
    /// Acknowledged sends and deliveries per second over the phase (warm-up included).
    var achievedRate: Double
    var deliveriesPerSecond: Double
    var sendErrors: [String: Int]
    var reconnects: Int
    var cursorsExpired: Int
    /// Microseconds from each send's scheduled time.
    var ack: Percentiles
    var delivery: Percentiles
    var scheduleLag: Percentiles
    /// The second (counted from the phase's start, warm-up included) whose deliveries had the
    /// highest p99: a spike that the phase's p99 smooths over or is decided by.
    struct WorstSecond: Codable, Sendable {
        var second: Int
        var p99: UInt64
        var max: UInt64
    }
    var worstSecond: WorstSecond?
    /// Cores each node used over the phase, by its metrics URL's host:port (when measured), and
    /// the load generator itself.
    var nodeCores: [String: Double]?
    var loadGeneratorCores: Double
    /// Server CPU (all nodes) per delivered message, when measured: per delivery to any member's
    /// stream (the sender's own included), and per delivery to a member other than the sender
    /// (what a server that does not echo a message to its sender's streams would count).
    var serverCPUMicrosPerDelivery: Double?
    var serverCPUMicrosPerRecipientDelivery: Double?
    var faults: [String]
    /// Event streams that failed (with `--engine frames`, for good) and read-backs that failed.
    var streamErrors: [String]
    var verified: Bool

    /// `load 0.35  127.0.0.1:17701 0.20  …`: the load generator's cores, then each node's.
    var coresLine: String {
        ([String(format: "load %.2f", loadGeneratorCores)] + (nodeCores ?? [:]).sorted { $0.key < $1.key }.map { String(format: "%@ %.2f", $0.key, $0.value) })
            .joined(separator: "  ")
    }

    static func printStreamErrors(_ errors: [String]) {
        guard !errors.isEmpty else { return }
        Swift.print("  stream errors: \(errors.count)")
        for error in errors.prefix(10) { Swift.print("    \(error)") }
    }

    func write(to path: String?) throws {
        guard let path else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: URL(fileURLWithPath: path))
        Swift.print("report: \(path)")
    }

    func print() {
        Swift.print("""

            \(sent) sends offered at \(offeredRate)/s to \(conversations) conversations of \(users) users; \(acknowledged) acknowledged, \(deliveries) deliveries
            throughput: \(String(format: "%.0f", achievedRate)) acknowledged/s, \(String(format: "%.0f", deliveriesPerSecond)) deliveries/s
                               p50        p90        p99        p99.9      max
              acknowledged    \(ack.row)
              delivered       \(delivery.row)
              schedule lag    \(scheduleLag.row)
              send errors \(sendErrors.isEmpty ? "none" : sendErrors.map { "\($0.key): \($0.value)" }.sorted().joined(separator: ", ")), stream reconnects \(reconnects)\(cursorsExpired > 0 ? ", resumes refused as cursor_expired \(cursorsExpired)" : "")
            """)
        if let cpu = serverCPUMicrosPerDelivery, let perRecipient = serverCPUMicrosPerRecipientDelivery {
            Swift.print(String(format: "  server CPU per delivered message: %.0f µs (per delivery to a member other than the sender: %.0f µs)", cpu, perRecipient))
        }
        Swift.print("  cores used: \(coresLine)")
        Self.printStreamErrors(streamErrors)
        if verified {
            Swift.print("verified: every acknowledged message reached every member's stream once, in seq order, without gaps, and the store holds each once with its seq")
        } else {
            Swift.print("VERIFICATION FAILED: \(faults.count) fault(s)")
            for fault in faults.prefix(50) { Swift.print("  \(fault)") }
        }
    }
}

/// A duration option: a number and a unit (`20s`, `500ms`, `2m`), or a plain number of seconds.
struct DurationOption: ExpressibleByArgument, CustomStringConvertible {
    var duration: Duration
    var seconds: Double { duration.seconds }

    init(_ duration: Duration) { self.duration = duration }

    init?(argument: String) {
        guard let duration = DurationText.parse(argument) else { return nil }
        self.duration = duration
    }

    var description: String { DurationText.format(duration) }
    var defaultValueDescription: String { description }
}
