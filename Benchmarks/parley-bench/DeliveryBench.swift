import ArgumentParser
import Foundation
import ParleyClient
import ParleyModel
import Synchronization

/// End-to-end delivery latency through a running cluster: users in pairs, one direct
/// conversation per pair, every user's event stream open; messages sent open-loop at a fixed rate
/// (each has a scheduled time, and latency counts from it, so a slow server cannot hide behind a
/// slowed-down sender). Reports the send acknowledgement and the delivery (scheduled send →
/// arrival on the recipient's stream) percentiles, and whether every message arrived once.
struct DeliveryBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "delivery", abstract: "End-to-end delivery latency at a fixed rate through a gateway.")

    @Option(help: "Gateway URL.") var gateway: String
    @Option(help: "CA PEM of the gateway's certificate.") var ca: String
    @Option(help: "Users (in pairs, one direct conversation per pair).") var users = 100
    @Option(help: "Messages per second, all senders together.") var rate = 200.0
    @Option(help: "Seconds of measured sending.") var duration = 20.0
    @Option(help: "Seconds of sending before measuring.") var warmup = 3.0

    struct Pending: Sendable {
        var scheduled: ContinuousClock.Instant
        var measured: Bool
    }

    /// What the senders and the streams share.
    final class Shared: Sendable {
        let pending = Mutex<[String: Pending]>([:])
        let delivery = Mutex(Latencies())
        let acks = Mutex(Latencies())
        let duplicates = Mutex(0)
        let ready = Mutex(0)
        let failures = Mutex(0)
    }

    func run() async throws {
        guard let url = URL(string: gateway) else { throw ValidationError("--gateway is not a URL") }
        let pairs = max(1, users / 2)
        let run = UUID().uuidString.prefix(8).lowercased()
        let config = ParleyClient.Configuration(gateways: [url], caCertificatePath: ca)
        print("registering \(pairs * 2) users…")
        let clients = try await withThrowingTaskGroup(of: (Int, ParleyClient).self) { group in
            for index in 0..<(pairs * 2) {
                group.addTask {
                    let client = try ParleyClient(configuration: config)
                    try await client.register(handle: "d\(run)-\(index)", password: "bench-password", displayName: "bench \(index)")
                    return (index, client)
                }
            }
            return try await group.reduce(into: [ParleyClient?](repeating: nil, count: pairs * 2)) { $0[$1.0] = $1.1 }.compactMap { $0 }
        }
        var conversations: [ConversationID] = []
        for pair in 0..<pairs {
            guard let other = clients[pair * 2 + 1].currentUser?.id else { throw ValidationError("a user did not register") }
            conversations.append(try await clients[pair * 2].createConversation(with: [other]).id)
        }

        let shared = Shared()
        let streams = clients.enumerated().map { index, client in
            Task {
                for try await event in client.events() {
                    switch event {
                    case .ready:
                        shared.ready.withLock { $0 += 1 }
                    case .message(let message) where message.senderId != client.currentUser?.id:
                        let now = ContinuousClock.now
                        let entry = shared.pending.withLock { $0.removeValue(forKey: message.clientMessageId) }
                        guard let entry else {
                            shared.duplicates.withLock { $0 += 1 }
                            continue
                        }
                        if entry.measured { shared.delivery.withLock { $0.record(entry.scheduled.duration(to: now)) } }
                    default:
                        break
                    }
                }
            }
        }
        while shared.ready.withLock({ $0 }) < clients.count { try await Task.sleep(for: .milliseconds(50)) }
        print("\(clients.count) streams open; sending \(rate) msg/s for \(warmup) s warm-up + \(duration) s")

        let start = ContinuousClock.now.advanced(by: .milliseconds(100))
        let total = Int((warmup + duration) * rate)
        let measuredFrom = Int(warmup * rate)
        let interval = Duration.seconds(1 / rate)
        var lag = Latencies()
        await withTaskGroup(of: Void.self) { group in
            for k in 0..<total {
                let scheduled = start.advanced(by: interval * k)
                try? await Task.sleep(until: scheduled)
                lag.record(scheduled.duration(to: .now))
                let pair = k % pairs
                let sender = clients[pair * 2 + (k / pairs) % 2]
                let conversation = conversations[pair]
                let clientMessageId = UUID().uuidString.lowercased()
                let measured = k >= measuredFrom
                shared.pending.withLock { $0[clientMessageId] = Pending(scheduled: scheduled, measured: measured) }
                group.addTask {
                    do {
                        _ = try await sender.send("m\(k)", to: conversation, clientMessageId: clientMessageId)
                        if measured { shared.acks.withLock { $0.record(scheduled.duration(to: .now)) } }
                    } catch {
                        shared.failures.withLock { $0 += 1 }
                    }
                }
            }
        }
        // Let the last deliveries arrive.
        let drainUntil = ContinuousClock.now.advanced(by: .seconds(5))
        while shared.pending.withLock({ !$0.isEmpty }), ContinuousClock.now < drainUntil { try await Task.sleep(for: .milliseconds(50)) }
        let lost = shared.pending.withLock { $0.count }
        for stream in streams { stream.cancel() }
        for client in clients { try? await client.shutdown() }

        print("sent \(total) messages (\(total - measuredFrom) measured) at \(rate)/s over \(pairs) conversations, \(clients.count) streams")
        print("  send acknowledged  \(shared.acks.withLock { $0.summary([50, 90, 99]) })")
        print("  delivered          \(shared.delivery.withLock { $0.summary([50, 90, 99]) })")
        print("  schedule lag       \(lag.summary([50, 99]))")
        print("  failed sends \(shared.failures.withLock { $0 }), not delivered \(lost), duplicates dropped \(shared.duplicates.withLock { $0 })")
    }
}
