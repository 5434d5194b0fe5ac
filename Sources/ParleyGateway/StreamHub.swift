import Foundation
import Logging
import Metrics
import ParleyChat
import ParleyCluster
import ParleyModel
import Synchronization

/// What one open event stream receives from the hub, in order.
enum StreamInput: Sendable {
    /// An event from a conversation owner (or a presence shard), with its `data:` JSON when that
    /// is the same for every stream (encoded once for all of them).
    case event(ChatEvent, sharedData: [UInt8]?)
    /// Once a second: check that the client is still there; write `: ping` every 15th.
    case tick
}

/// The event streams this gateway holds: it receives every delivery for them (this node's
/// ``GatewayInbox``), hands each event to the streams of its recipients in the order it arrived,
/// and keeps their presence sessions alive (lease renewal with the presence shards).
///
/// A conversation's deliveries arrive in seq order on one ordered path; the hub yields them to
/// each stream synchronously, so each stream sees them in that order.
public final class StreamHub: Sendable {
    struct Registration {
        let user: UserID
        let continuation: AsyncStream<StreamInput>.Continuation
    }

    private struct State {
        var streams: [String: Registration] = [:]
        var byUser: [UserID: Set<String>] = [:]
        var closed = false
    }

    private let state = Mutex(State())
    private let system: ClusterSystem
    private let logger: Logger
    /// How often sessions' leases are renewed (the shards' lease is 6 s).
    let renewEvery: Duration

    public init(system: ClusterSystem, logger: Logger, renewEvery: Duration = .seconds(2)) {
        self.system = system
        self.logger = logger
        self.renewEvery = renewEvery
    }

    public var openStreams: Int { state.withLock { $0.streams.count } }

    /// Registers a stream and returns its session ID and its input. Events for the user reach it
    /// from now on (the caller then opens the presence session, so owners learn of this gateway).
    func register(user: UserID) -> (sessionID: String, input: AsyncStream<StreamInput>)? {
        let (input, continuation) = AsyncStream<StreamInput>.makeStream(bufferingPolicy: .bufferingNewest(10_000))
        let sessionID = UUID().uuidString.lowercased()
        let registered = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.streams[sessionID] = Registration(user: user, continuation: continuation)
            state.byUser[user, default: []].insert(sessionID)
            return true
        }
        guard registered else { return nil }
        Self.streamsGauge.record(openStreams)
        return (sessionID, input)
    }

    func unregister(_ sessionID: String) {
        state.withLock { state in
            guard let registration = state.streams.removeValue(forKey: sessionID) else { return }
            state.byUser[registration.user]?.remove(sessionID)
            if state.byUser[registration.user]?.isEmpty == true { state.byUser[registration.user] = nil }
            registration.continuation.finish()
        }
        Self.streamsGauge.record(openStreams)
    }

    static let streamsGauge = Gauge(label: "parley.gateway.streams")

    /// This node's inbox handler: every event to every local stream of its recipients.
    public func deliver(_ deliveries: [EventDelivery]) {
        let shared = deliveries.map { EventStreamWriter.sharedData(for: $0.event) }
        state.withLock { state in
            for (delivery, data) in zip(deliveries, shared) {
                for user in delivery.recipients {
                    for session in state.byUser[user] ?? [] {
                        state.streams[session]?.continuation.yield(.event(delivery.event, sharedData: data))
                    }
                }
            }
        }
    }

    /// Ends every stream (graceful shutdown): each writes its last bytes and completes.
    public func closeAll() {
        let ended = finishAll(andClose: true)
        logger.info("event streams closed for shutdown", metadata: ["streams.count": "\(ended)"])
    }

    /// Ends every open stream but keeps taking new ones: the cluster declared this gateway down (it
    /// was paused or cut off), so events for its streams may have gone elsewhere or nowhere, and its
    /// sessions were dropped from presence. Each client reconnects and resumes by cursor.
    public func endAll(because reason: String) {
        let ended = finishAll(andClose: false)
        logger.warning("event streams ended; their clients resume by cursor", metadata: [
            "streams.count": "\(ended)", "reason": "\(reason)",
        ])
    }

    /// Finishes every registered stream (each writes its last bytes and completes); returns how many.
    private func finishAll(andClose close: Bool) -> Int {
        let streams = state.withLock { state -> [Registration] in
            if close { state.closed = true }
            defer { state.streams = [:]; state.byUser = [:] }
            return Array(state.streams.values)
        }
        for stream in streams { stream.continuation.finish() }
        Self.streamsGauge.record(0)
        return streams.count
    }

    /// Ticks every stream each second and renews the presence leases of every session every
    /// `renewEvery`, until cancelled.
    public func run() async {
        var sinceRenewal = Duration.zero
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(1))
            let sessions = state.withLock { state -> [PresenceShard.SessionRef] in
                for stream in state.streams.values { stream.continuation.yield(.tick) }
                return state.streams.map { PresenceShard.SessionRef(userId: $0.value.user, sessionID: $0.key) }
            }
            sinceRenewal += .seconds(1)
            guard sinceRenewal >= renewEvery else { continue }
            sinceRenewal = .zero
            await renew(sessions)
        }
    }

    private func renew(_ sessions: [PresenceShard.SessionRef]) async {
        let gateway = system.settings.name
        let system = self.system
        await withTaskGroup(of: Void.self) { group in
            for (_, shardSessions) in Dictionary(grouping: sessions, by: { PresenceShard.shard(of: $0.userId) }) {
                guard let first = shardSessions.first else { continue }
                group.addTask { [logger] in
                    do {
                        try await PresenceShard.resolve(for: first.userId, using: system).renewSessions(shardSessions, gateway: gateway)
                    } catch {
                        logger.warning("presence lease renewal failed; retried next round", metadata: ["sessions.count": "\(shardSessions.count)", "error": "\(error)"])
                    }
                }
            }
        }
    }
}
