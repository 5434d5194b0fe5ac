import ArgumentParser
import Foundation
import Histogram
import ParleyClient
import ParleyLoad
import ParleyModel
import Synchronization

@main
struct ParleyLoadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley-load",
        abstract: "Load a Parley cluster like real apps do, measure honestly, and verify every message.",
        subcommands: [Run.self])
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

    @Option(help: "Gateway URLs, comma-separated (env PARLEY_URLS).") var gateways: String?
    @Option(help: "CA PEM of the gateways' certificates (env PARLEY_CA).") var ca: String?
    @Option(help: "Users (an even number is used).") var users = 100
    @Option(help: "Group conversations.") var groups = 0
    @Option(help: "Members per group.") var groupSize = 10
    @Option(help: "Share of sends that go to groups (0–1).") var groupShare = 0.0
    @Option(help: "Offered sends per second, all users together.") var rate = 100.0
    @Option(help: "Measured seconds.") var duration = 10.0
    @Option(help: "Seconds of sending before measuring.") var warmup = 2.0
    @Option(help: "Seed of the random choices (who sends where).") var seed: UInt64 = 1
    @Option(help: "Handle prefix of the users.") var prefix = "load"
    @Option(help: "Write the JSON report here.") var report: String?
    @Option(help: "Seconds to wait for the last deliveries after the last send.") var drain = 10.0

    func validate() throws {
        guard users >= 2 else { throw ValidationError("--users must be at least 2") }
        guard rate > 0, duration > 0, warmup >= 0 else { throw ValidationError("--rate and --duration must be positive") }
        guard (0...1).contains(groupShare), groups >= 0, groupSize >= 2, groupSize <= users else {
            throw ValidationError("--group-share must be 0–1 and --group-size 2…users")
        }
        if groups > 0 && groupShare == 0 { throw ValidationError("--groups without --group-share sends nothing to them") }
    }

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        guard let list = gateways ?? environment["PARLEY_URLS"] ?? environment["PARLEY_URL"] else {
            throw ValidationError("no gateway: --gateways URL[,URL] (or eval \"$(Scripts/cluster env)\")")
        }
        let urls = try list.split(separator: ",").map { text -> URL in
            guard let url = URL(string: String(text)), url.host != nil else { throw ValidationError("'\(text)' is not a URL") }
            return url
        }
        let caPath = ca ?? environment["PARLEY_CA"]
        var random = SplitMix64(seed: seed)
        let userCount = users / 2 * 2

        // Users: one client each, its requests and stream on "its" gateway first.
        print("parley-load: \(userCount) users over \(urls.count) gateway(s), \(rate) msg/s offered for \(warmup) s + \(duration) s, seed \(seed)")
        let clients = try await withThrowingTaskGroup(of: (Int, ParleyClient).self) { group in
            for index in 0..<userCount {
                let rotated = Array(urls[(index % urls.count)...] + urls[..<(index % urls.count)])
                group.addTask {
                    let client = try ParleyClient(configuration: .init(gateways: rotated, caCertificatePath: caPath))
                    let handle = "\(prefix)-\(index)", password = "\(prefix)-password-\(index)"
                    do {
                        try await client.register(handle: handle, password: password, displayName: handle)
                    } catch let error as ParleyError where error.code == "conflict" {
                        try await client.login(handle: handle, password: password)
                    }
                    return (index, client)
                }
            }
            return try await group.reduce(into: [ParleyClient?](repeating: nil, count: userCount)) { $0[$1.0] = $1.1 }.compactMap { $0 }
        }
        let ids = clients.compactMap(\.currentUser?.id)

        // Conversations: direct pairs, then groups of random members.
        var conversations: [(id: ConversationID, members: [Int])] = []
        for pair in stride(from: 0, to: userCount, by: 2) {
            conversations.append((try await clients[pair].createConversation(with: [ids[pair + 1]]).id, [pair, pair + 1]))
        }
        let directCount = conversations.count
        for g in 0..<groups {
            var members = Set<Int>()
            while members.count < groupSize { members.insert(Int(random.next() % UInt64(userCount))) }
            let sorted = members.sorted()
            let group = try await clients[sorted[0]].createConversation(with: sorted.dropFirst().map { ids[$0] }, name: "\(prefix)-group-\(g)")
            conversations.append((group.id, sorted))
        }

        let shared = Shared()
        shared.verifier.withLock { verifier in
            for conversation in conversations { verifier.conversation(conversation.id, members: conversation.members.map { ids[$0] }) }
        }
        // Streams: every user's; deliveries are recorded for the verifier and the latency.
        let streams = clients.enumerated().map { index, client in
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
                        default:
                            break
                        }
                    }
                } catch {
                    shared.streamErrors.withLock { $0.append("\(ids[index]): \(error)") }
                }
            }
        }
        while shared.ready.withLock({ $0 }) < clients.count { try await Task.sleep(for: .milliseconds(50)) }

        // The schedule: who sends where, decided up front from the seed.
        let total = Int((warmup + duration) * rate)
        let measuredFrom = Int(warmup * rate)
        var plan: [(conversation: Int, sender: Int)] = []
        for _ in 0..<total {
            let toGroup = groups > 0 && Double(random.next() % 10_000) / 10_000 < groupShare
            let conversation = toGroup ? directCount + Int(random.next() % UInt64(groups)) : Int(random.next() % UInt64(directCount))
            let members = conversations[conversation].members
            plan.append((conversation, members[Int(random.next() % UInt64(members.count))]))
        }
        let schedule = plan
        let progress = Task { await self.progress(shared, total: total) }
        let convs = conversations
        let result = await OpenLoop(rate: rate, count: total).run { k, scheduled in
            let (conversation, sender) = schedule[k]
            let clientMessageId = UUID().uuidString.lowercased()
            shared.pending.withLock { $0[clientMessageId] = (scheduled, k >= measuredFrom) }
            do {
                let message = try await clients[sender].send("load \(k)", to: convs[conversation].id, clientMessageId: clientMessageId)
                shared.acknowledged(message, scheduled: scheduled, measured: k >= measuredFrom)
                return true
            } catch {
                shared.sendErrors.withLock { $0["\((error as? ParleyError)?.code ?? "error")", default: 0] += 1 }
                return false
            }
        }
        // Wait for the last deliveries.
        let expected = { shared.verifier.withLock { verifier in verifier.faults().filter { $0.kind == .lost }.count } }
        let drainUntil = ContinuousClock.now.advanced(by: .seconds(drain))
        while expected() > 0, ContinuousClock.now < drainUntil { try await Task.sleep(for: .milliseconds(200)) }
        progress.cancel()
        for stream in streams { stream.cancel() }
        for client in clients { try? await client.shutdown() }

        let faults = shared.verifier.withLock { $0.faults() }
        let summary = Summary(
            users: userCount, conversations: conversations.count, offeredRate: rate, measuredSeconds: duration, sent: total,
            acknowledged: shared.verifier.withLock { $0.acknowledgedCount }, deliveries: shared.verifier.withLock { $0.deliveredCount },
            sendErrors: shared.sendErrors.withLock { $0 }, reconnects: shared.reconnects.withLock { $0 },
            ack: .init(shared.ack.withLock { $0 }), delivery: .init(shared.delivery.withLock { $0 }), scheduleLag: .init(result.lag),
            faults: faults.map(\.description), verified: faults.isEmpty)
        summary.print()
        if let report {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(summary).write(to: URL(fileURLWithPath: report))
            Swift.print("report: \(report)")
        }
        if !faults.isEmpty { throw ExitCode(1) }
    }

    private func progress(_ shared: Shared, total: Int) async {
        let started = ContinuousClock.now
        var lastAcks = 0, lastDeliveries = 0
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(1))
            guard !Task.isCancelled else { return }
            let (acks, deliveries) = shared.verifier.withLock { ($0.acknowledgedCount, $0.deliveredCount) }
            let p = shared.delivery.withLock { ($0.valueAtPercentile(50), $0.valueAtPercentile(99)) }
            let errors = shared.sendErrors.withLock { $0.map { "\($0.key) \($0.value)" }.sorted().joined(separator: ", ") }
            let elapsed = started.duration(to: .now)
            Swift.print(String(
                format: "%5.1fs  acked %5d/s  delivered %6d/s  delivery p50 %@ p99 %@  errors [%@]  reconnects %d",
                Double(elapsed.components.seconds), acks - lastAcks, deliveries - lastDeliveries,
                Summary.Percentiles.format(p.0), Summary.Percentiles.format(p.1), errors, shared.reconnects.withLock { $0 }))
            (lastAcks, lastDeliveries) = (acks, deliveries)
        }
    }
}

/// What the senders, the streams and the progress line share.
final class Shared: Sendable {
    let verifier = Mutex(DeliveryVerifier())
    let pending = Mutex<[String: (ContinuousClock.Instant, Bool)]>([:])
    let ack = Mutex(Histogram<UInt64>(highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: .three))
    let delivery = Mutex(Histogram<UInt64>(highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: .three))
    let sendErrors = Mutex<[String: Int]>([:])
    let streamErrors = Mutex<[String]>([])
    let ready = Mutex(0)
    let reconnects = Mutex(0)

    func acknowledged(_ message: Message, scheduled: ContinuousClock.Instant, measured: Bool) {
        verifier.withLock { $0.acknowledged(message) }
        if measured { _ = ack.withLock { $0.record(OpenLoop.micros(scheduled.duration(to: .now))) } }
    }

    func delivered(_ message: Message, to member: UserID) {
        let now = ContinuousClock.now
        verifier.withLock { $0.delivered(message, to: member) }
        guard message.senderId != member, let (scheduled, measured) = pending.withLock({ $0[message.clientMessageId] }), measured else { return }
        _ = delivery.withLock { $0.record(OpenLoop.micros(scheduled.duration(to: now))) }
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
    var sendErrors: [String: Int]
    var reconnects: Int
    /// Microseconds from each send's scheduled time.
    var ack: Percentiles
    var delivery: Percentiles
    var scheduleLag: Percentiles
    var faults: [String]
    var verified: Bool

    func print() {
        Swift.print("""

            \(sent) sends offered at \(offeredRate)/s to \(conversations) conversations of \(users) users; \(acknowledged) acknowledged, \(deliveries) deliveries
                               p50        p90        p99        p99.9      max
              acknowledged    \(ack.row)
              delivered       \(delivery.row)
              schedule lag    \(scheduleLag.row)
              send errors \(sendErrors.isEmpty ? "none" : sendErrors.map { "\($0.key): \($0.value)" }.sorted().joined(separator: ", ")), stream reconnects \(reconnects)
            """)
        if verified {
            Swift.print("verified: every acknowledged message reached every member's stream once, in seq order, without gaps")
        } else {
            Swift.print("VERIFICATION FAILED: \(faults.count) fault(s)")
            for fault in faults.prefix(50) { Swift.print("  \(fault)") }
        }
    }
}
