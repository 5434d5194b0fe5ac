import Foundation
import NIOCore
import Logging
import Metrics
import ParleyChat
import ParleyCluster
import ParleyModel
import Synchronization

/// The event streams this gateway holds: it receives every delivery for them (this node's
/// ``GatewayInbox``), hands each event to the streams of its recipients in the order it arrived,
/// and keeps their presence sessions alive (lease renewal with the presence shards).
///
/// A conversation's deliveries arrive in seq order on one ordered path; the hub hands each batch
/// to each event loop in one task, in that order, and each stream writes on its own loop
/// (``LiveEventStream``), so each stream sees them in that order.
public final class StreamHub: Sendable {
    private struct State {
        /// By session ID.
        var streams: [String: LiveEventStream] = [:]
        /// Each user's streams, for deliveries: one lookup per recipient.
        var byUser: [UserID: [LiveEventStream]] = [:]
        var leases: SessionLeases
        var closed = false
        /// Revocations heard within one authentication lease: a stream whose token a user's actor
        /// found valid just before one of them arrived registers after it, and must not stay.
        var recentRevocations: [(revocation: GatewayInbox.Revocation, until: ContinuousClock.Instant)] = []
    }

    private let state: Mutex<State>
    private let system: ClusterSystem
    private let logger: Logger
    /// How often sessions' leases are renewed.
    let renewEvery: Duration
    public init(system: ClusterSystem, logger: Logger, renewEvery: Duration = .seconds(2), sessionLease: Duration = PresenceShard.sessionLease) {
        self.system = system
        self.logger = logger
        self.renewEvery = renewEvery
        self.state = Mutex(State(leases: SessionLeases(lease: sessionLease)))
    }

    /// The hub of `system`'s gateway, with the node's inbox feeding it: every delivery to this
    /// node goes to its streams, and revoked tokens to `revocations` (and the streams they opened
    /// end, so that their clients reconnect and meet the revocation). When the cluster declares
    /// this gateway down and it rejoins, its streams end (events for them may have gone elsewhere
    /// or nowhere meanwhile). The caller keeps the inbox: the system holds pinned actors weakly.
    package static func serving(
        _ system: ClusterSystem, logger: Logger, revocations: @escaping GatewayInbox.RevocationHandler = { _ in }
    ) -> (hub: StreamHub, inbox: GatewayInbox) {
        let hub = StreamHub(system: system, logger: logger)
        system.onRejoin { member in hub.endAll(because: "this gateway was declared down and rejoined as \(member.id)") }
        let inbox = GatewayInbox.open(on: system, revocations: { revocation in
            revocations(revocation)
            hub.end(revokedBy: revocation)
        }) { deliveries in hub.deliver(deliveries) }
        return (hub, inbox)
    }

    public var openStreams: Int { state.withLock { $0.streams.count } }

    enum Registration: Equatable {
        case registered(sessionID: String)
        case shuttingDown
        /// Its token was revoked while the stream opened.
        case revoked
        /// The user has `streamsPerUserMax` open here already.
        case tooManyStreams
    }

    /// Registers a stream, unless its user has `streamsPerUserMax` open on this gateway already.
    /// Events for its user reach it from now on (the caller then opens the presence session, so
    /// owners learn of this gateway); it writes them once started.
    func register(_ stream: LiveEventStream, streamsPerUserMax: Int = .max) -> Registration {
        let sessionID = system.random.uuid().uuidString.lowercased()
        let registration = state.withLock { state -> Registration in
            guard !state.closed else { return .shuttingDown }
            let now = system.clock.now
            state.recentRevocations.removeAll { $0.until <= now }
            guard !state.recentRevocations.contains(where: { Self.revokes($0.revocation, stream) }) else { return .revoked }
            guard state.byUser[stream.user, default: []].count < streamsPerUserMax else { return .tooManyStreams }
            state.streams[sessionID] = stream
            state.byUser[stream.user, default: []].append(stream)
            state.leases.registered(sessionID, now: system.clock.now)
            return .registered(sessionID: sessionID)
        }
        if case .registered = registration { Self.streamsGauge.record(openStreams) }
        return registration
    }

    func unregister(_ sessionID: String) {
        let removed = state.withLock { state -> LiveEventStream? in
            state.leases.removed(sessionID)
            guard let stream = state.streams.removeValue(forKey: sessionID) else { return nil }
            state.byUser[stream.user]?.removeAll { $0 === stream }
            if state.byUser[stream.user]?.isEmpty == true { state.byUser[stream.user] = nil }
            return stream
        }
        removed?.finish()
        Self.streamsGauge.record(openStreams)
    }

    static let streamsGauge = Gauge(label: "parley.gateway.streams")

    /// Ends the streams opened with tokens that were just revoked, and refuses for one lease the
    /// streams of those tokens still opening.
    func end(revokedBy revocation: GatewayInbox.Revocation) {
        let until = system.clock.now.advanced(by: UserActor.authenticationLease)
        let ended = state.withLock { state -> [LiveEventStream] in
            state.recentRevocations.append((revocation, until))
            switch revocation {
            case .tokens:
                return state.streams.values.filter { Self.revokes(revocation, $0) }
            case .user(let user, _):
                return (state.byUser[user] ?? []).filter { Self.revokes(revocation, $0) }
            }
        }
        guard !ended.isEmpty else { return }
        logger.info("event streams ended: their tokens were revoked", metadata: ["streams.count": "\(ended.count)"])
        for stream in ended { stream.abort() }
    }

    private static func revokes(_ revocation: GatewayInbox.Revocation, _ stream: LiveEventStream) -> Bool {
        switch revocation {
        case .tokens(let tokenIds): stream.tokenId.map(tokenIds.contains) ?? false
        case .user(let user, let except): stream.user == user && (except == nil || stream.tokenId != except)
        }
    }

    /// Why a stream was not opened.
    package enum Refusal: Error {
        case shuttingDown
        /// Its token was revoked while it opened.
        case revoked
        /// Its user has as many streams open here as a user may.
        case tooManyStreams
    }

    /// Opens `stream` for its user, as `GET /v1/events` does: registers it first, so nothing
    /// committed from then on is missed; then opens its presence session, so owners deliver here;
    /// then reads the first page of what happened before (the replay from `cursor`, if any), so
    /// that a cursor too old to replay is refused before the response. The stream holds live
    /// events back until ``serve(_:replayFrom:)`` starts it. However it ends (its client gone,
    /// the hub closing it, this failing, or never served), it leaves the hub, and its presence
    /// session is closed in the background (if the shard cannot be reached, its lease runs out
    /// instead). Throws ``Refusal`` or what the cluster threw.
    package func open(
        _ stream: LiveEventStream, resumingFrom cursor: StreamCursor?, streamsPerUserMax: Int, replayMessagesMax: Int
    ) async throws -> ReplayPage? {
        let sessionID: String
        switch register(stream, streamsPerUserMax: streamsPerUserMax) {
        case .registered(let id):
            sessionID = id
        case .shuttingDown:
            stream.finish()
            throw Refusal.shuttingDown
        case .tooManyStreams:
            stream.finish()
            throw Refusal.tooManyStreams
        case .revoked:
            stream.finish()
            throw Refusal.revoked
        }
        let session = PresenceShard.SessionRef(userId: stream.user, sessionID: sessionID)
        stream.ended.whenComplete { [self] _ in
            unregister(sessionID)
            Task { await closeSession(session) }
        }
        do {
            _ = try await PresenceShard.resolve(for: stream.user, using: system).openSession(session, gateway: system.settings.name)
            logger.debug("event stream opened", metadata: ["user.id": "\(stream.user)", "session.id": "\(sessionID)", "resumed": "\(cursor != nil)"])
            guard let cursor else { return nil }
            return try await UserActor.resolve(stream.user, using: system)
                .replay(since: cursor.replayFrom, cursor: cursor.date, messagesMax: replayMessagesMax)
        } catch {
            stream.finish()
            throw error
        }
    }

    /// Writes an opened stream's replay page by page from `firstPage`, then starts it: `ready`,
    /// then what arrived meanwhile, then live events. Returns when the stream has ended.
    package func serve(_ stream: LiveEventStream, replayFrom firstPage: ReplayPage?) async {
        // A replay runs in a child task, whose memory (the calls that read its pages) is freed
        // when it ends: the caller's task lasts as long as the stream and would keep it.
        var replayed = true
        if let firstPage {
            async let pages = replay(from: firstPage, to: stream)
            replayed = await pages
        }
        if replayed { stream.start() }
        try? await stream.ended.get()
    }

    /// Writes a resume's replay into `stream` page by page, each page once the client took the
    /// last; false when the stream ended meanwhile (a client that takes nothing for a while is
    /// ended by its session, as a live stream is), or was ended because the next page could not
    /// be read (the client resumes by cursor again).
    private func replay(from first: ReplayPage, to stream: LiveEventStream) async -> Bool {
        var page: ReplayPage? = first
        var pages = 0
        while let current = page {
            stream.replay(current.events)
            pages += 1
            guard let next = current.next else { break }
            guard (try? await stream.roomForMore().get()) == true else { return false }
            do {
                page = try await UserActor.resolve(stream.user, using: system).replay(continuing: next)
            } catch {
                logger.warning("event stream ended: a page of its replay could not be read; its client resumes by cursor", metadata: [
                    "user.id": "\(stream.user)", "replay.pages": "\(pages)", "error": "\(error)",
                ])
                stream.abort()
                return false
            }
        }
        return true
    }

    private func closeSession(_ session: PresenceShard.SessionRef) async {
        do {
            _ = try await PresenceShard.resolve(for: session.userId, using: system).closeSession(session)
        } catch {
            // The lease runs out by itself (the user shows offline within the lease).
            logger.debug("presence session not closed; its lease will run out", metadata: ["error": "\(error)"])
        }
    }

    /// This node's inbox handler: every event to every local stream of its recipients, one task
    /// per event loop for the whole batch, each stream flushed once at its end.
    public func deliver(_ deliveries: [EventDelivery]) {
        let shared = deliveries.map { ServerSentEvent.sharedData(for: $0.event) }
        var batches: [ObjectIdentifier: LoopBatch] = [:]
        state.withLock { state in
            for (delivery, data) in zip(deliveries, shared) {
                for user in delivery.recipients {
                    for stream in state.byUser[user] ?? [] {
                        batches[ObjectIdentifier(stream.loop), default: LoopBatch(loop: stream.loop)].items.append((stream, delivery.event, data))
                    }
                }
            }
        }
        for batch in batches.values {
            batch.loop.execute {
                for (stream, event, data) in batch.items { stream.receive(event, sharedData: data) }
                for (stream, _, _) in batch.items { stream.flushIfNeeded() }
            }
        }
    }

    /// A message `sender` just sent, to those of the sender's streams that are on the calling
    /// event loop and take it ahead of its delivery (``LiveEventStream/receiveAhead(_:sharedData:)``):
    /// the send's response, written next on this loop, then goes out with the sender's own event
    /// in one flush (the delivery, which comes later on another path, is then a duplicate). A
    /// stream on another loop, or one that does not take it, gets the delivery as usual. `json` is
    /// the message's event data (``ServerSentEvent/sharedData(for:)``), which the response carries too.
    package func deliverAhead(_ message: Message, json: [UInt8], to sender: UserID) {
        let streams = state.withLock { $0.byUser[sender] ?? [] }
        for stream in streams where stream.loop.inEventLoop {
            if stream.receiveAhead(message, sharedData: json) {
                Self.aheadOfDelivery.increment()
                stream.flushIfNeeded()
            }
        }
    }

    static let aheadOfDelivery = Counter(label: "parley.gateway.own_events_ahead_of_delivery")

    /// What one event loop's streams receive from one delivery batch.
    private struct LoopBatch {
        let loop: any EventLoop
        var items: [(stream: LiveEventStream, event: ChatEvent, sharedData: [UInt8]?)] = []
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
        let streams = state.withLock { state -> [LiveEventStream] in
            if close { state.closed = true }
            defer { state.streams = [:]; state.byUser = [:]; state.leases.removeAll() }
            return Array(state.streams.values)
        }
        for stream in streams { stream.finish() }
        Self.streamsGauge.record(0)
        return streams.count
    }

    /// Ticks every stream each second and renews the presence leases of every session every
    /// `renewEvery`, until cancelled.
    public func run() async {
        var sinceRenewal = Duration.zero
        while !Task.isCancelled {
            try? await system.clock.sleep(for: .seconds(1))
            let (streams, sessions) = state.withLock { state in
                (Array(state.streams.values), state.streams.map { PresenceShard.SessionRef(userId: $0.value.user, sessionID: $0.key) })
            }
            for (_, loopStreams) in Dictionary(grouping: streams, by: { ObjectIdentifier($0.loop) }) {
                guard let loop = loopStreams.first?.loop else { continue }
                loop.execute { for stream in loopStreams { stream.tick() } }
            }
            sinceRenewal += .seconds(1)
            guard sinceRenewal >= renewEvery else { continue }
            sinceRenewal = .zero
            await renew(sessions)
        }
    }

    /// Renews the sessions' leases with their shards, and ends the streams whose sessions lapsed:
    /// those their shard says had lapsed there, and those this gateway did not renew within a
    /// lease (their shard may have lapsed them and died since, taking that with it, and a new
    /// shard takes a late renewal for a new session: cluster simulation seeds 9452 and 7189). Their shard answered the directory without them meanwhile, so events
    /// may have passed them by, and their clients resume by cursor.
    private func renew(_ sessions: [PresenceShard.SessionRef]) async {
        let gateway = system.settings.name
        let system = self.system
        typealias Outcome = (lapsed: [String], renewed: [String], sentAt: ContinuousClock.Instant)
        let outcomes = await withTaskGroup(of: Outcome?.self) { group in
            for (_, shardSessions) in Dictionary(grouping: sessions, by: { PresenceShard.shard(of: $0.userId) }) {
                guard let first = shardSessions.first else { continue }
                group.addTask { [logger] in
                    let sentAt = system.clock.now
                    do {
                        let lapsed = try await PresenceShard.resolve(for: first.userId, using: system).renewSessions(shardSessions, gateway: gateway)
                        return (lapsed, shardSessions.map(\.sessionID), sentAt)
                    } catch {
                        logger.warning("presence lease renewal failed; retried next round", metadata: ["sessions.count": "\(shardSessions.count)", "error": "\(error)"])
                        return nil
                    }
                }
            }
            return await group.reduce(into: [Outcome]()) { outcomes, outcome in outcome.map { outcomes.append($0) } }
        }
        let now = system.clock.now
        let (lapsed, unrenewed) = state.withLock { state -> ([LiveEventStream], [LiveEventStream]) in
            var late: [String] = []
            for outcome in outcomes { late += state.leases.renewed(outcome.renewed, sentAt: outcome.sentAt) }
            let lapsedIDs = Set(outcomes.flatMap(\.lapsed))
            let unrenewedIDs = state.leases.overdue(now: now).union(late).subtracting(lapsedIDs)
            return (lapsedIDs.compactMap { state.streams[$0] }, unrenewedIDs.compactMap { state.streams[$0] })
        }
        if !lapsed.isEmpty {
            logger.warning("event streams ended: their presence sessions had lapsed, so events may have passed them by; their clients resume by cursor", metadata: [
                "streams.count": "\(lapsed.count)",
            ])
        }
        if !unrenewed.isEmpty {
            logger.warning("event streams ended: their presence sessions could not be renewed within their lease, so events may have passed them by; their clients resume by cursor", metadata: [
                "streams.count": "\(unrenewed.count)",
            ])
        }
        Self.lapsedStreamsEnded.increment(by: lapsed.count + unrenewed.count)
        for stream in lapsed + unrenewed { stream.abort() }
    }

    static let lapsedStreamsEnded = Counter(label: "parley.gateway.lapsed_streams_ended")
}

/// When each stream's presence session was last renewed for sure: when the renewal that its shard
/// answered was sent (or the stream registered, before its session opened). The shard's lease
/// counts from when the renewal reached it, later: a session not renewed here within a lease may
/// have lapsed there.
struct SessionLeases: Sendable {
    let lease: Duration
    private var renewedAt: [String: ContinuousClock.Instant] = [:]

    init(lease: Duration) {
        self.lease = lease
    }

    mutating func registered(_ session: String, now: ContinuousClock.Instant) {
        renewedAt[session] = now
    }

    /// Their shard answered a renewal sent at `sentAt`. Returns those it came too late for: a lease
    /// or more after the one before, it may have reached a shard that knew nothing of them (their
    /// old shard lapsed them and died, and a new one took them as new).
    mutating func renewed(_ sessions: [String], sentAt: ContinuousClock.Instant) -> [String] {
        var late: [String] = []
        for session in sessions {
            guard let before = renewedAt[session], before < sentAt else { continue }
            if before.advanced(by: lease) <= sentAt { late.append(session) }
            renewedAt[session] = sentAt
        }
        return late
    }

    mutating func removed(_ session: String) {
        renewedAt[session] = nil
    }

    mutating func removeAll() {
        renewedAt = [:]
    }

    /// The sessions not renewed within a lease by `now` (every renewal round looks at every
    /// session: no sorting, no copy of the map).
    func overdue(now: ContinuousClock.Instant) -> Set<String> {
        var overdue: Set<String> = []
        for (session, at) in renewedAt where at.advanced(by: lease) <= now { overdue.insert(session) }
        return overdue
    }
}
