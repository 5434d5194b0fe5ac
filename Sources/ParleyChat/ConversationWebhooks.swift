import Foundation
import Logging
import Metrics
import ParleyCluster
import ParleyModel
import ParleyStore
import Synchronization

/// A conversation's webhooks at its owner: one ``WebhookLane`` per endpoint, each delivering in
/// the order the owner committed, one delivery at a time, while it has something owed.
///
/// Each lane's cursor (what its endpoint was told) is kept in the store: stored as owed before
/// the first delivery of a burst, moved forward at most once per ``WebhookPolicy/saveEvery``,
/// stored as settled once nothing is owed. A node that takes the conversation over starts from
/// there (``ConversationRecovery``): deliveries since the last store are made again, with the
/// same IDs.
final class ConversationWebhooks: Sendable {
    /// Reads messages after a seq, in order.
    typealias Load = @Sendable (_ after: Int64, _ limit: Int) async throws -> [Message]
    /// Reads changes to messages numbered after a number, in order.
    typealias LoadChanges = @Sendable (_ after: Int64, _ limit: Int) async throws -> [MessageChange]
    /// Stores a cursor.
    typealias Save = @Sendable (WebhookCursorRecord) async -> SaveResult

    enum SaveResult: Sendable {
        case saved
        case failed
        /// Another node owns the conversation now: this one stops delivering.
        case fenced
    }

    private struct Lane {
        var lane: WebhookLane
        var running = false
        /// What the store has of this lane.
        var saved: (told: WebhookTold?, pending: Bool)
        var savedAt: ContinuousClock.Instant?
        var failedAt: ContinuousClock.Instant?
    }

    private struct State {
        var record: ConversationRecord
        var lanes: [String: Lane]
        var stopped = false
    }

    private let state: Mutex<State>
    private let endpoints: [String: WebhookEndpoint]
    private let sender: any WebhookSender
    private let policy: WebhookPolicy
    private let clock: any ClusterClock
    private let logger: Logger
    private let load: Load
    private let loadChanges: LoadChanges
    private let save: Save

    /// The most messages one store read brings back for a lane.
    static let readBatch = 100

    /// - Parameter cursors: the lanes' stored cursors, by endpoint name.
    /// - Parameter firstSeen: when each endpoint was first configured: a conversation created
    ///   since owes it everything; an older one without a cursor owes it what comes from now on.
    init(
        record: ConversationRecord, settings: WebhookSettings, cursors: [WebhookCursorRecord], firstSeen: [String: Date],
        clock: any ClusterClock, logger: Logger, load: @escaping Load, loadChanges: @escaping LoadChanges, save: @escaping Save
    ) {
        var lanes: [String: Lane] = [:]
        let stored = Dictionary(cursors.map { ($0.endpoint, $0) }, uniquingKeysWith: { first, _ in first })
        for endpoint in settings.endpoints {
            let lane: WebhookLane
            var saved: (told: WebhookTold?, pending: Bool) = (nil, false)
            if let cursor = stored[endpoint.name], let told = try? JSONDecoder().decode(WebhookTold.self, from: Data(cursor.state.utf8)) {
                lane = WebhookLane(types: endpoint.types, policy: settings.policy, told: told, owed: true)
                saved = (told, cursor.pending)
            } else if record.createdAt >= (firstSeen[endpoint.name] ?? .distantFuture) {
                lane = WebhookLane(types: endpoint.types, policy: settings.policy, told: nil, owed: true)
                saved.pending = stored[endpoint.name]?.pending ?? false
            } else {
                if stored[endpoint.name] != nil { logger.warning("a stored webhook cursor cannot be read: the endpoint is told from now on", metadata: ["webhook.endpoint": "\(endpoint.name)"]) }
                lane = WebhookLane(types: endpoint.types, policy: settings.policy, told: WebhookTold(record), owed: false)
            }
            var prepared = Lane(lane: lane, saved: saved)
            prepared.lane.prepare(record: record, wallNow: clock.wallNow)
            lanes[endpoint.name] = prepared
        }
        self.state = Mutex(State(record: record, lanes: lanes))
        self.endpoints = Dictionary(settings.endpoints.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        self.sender = settings.sender
        self.policy = settings.policy
        self.clock = clock
        self.logger = logger
        self.load = load
        self.loadChanges = loadChanges
        self.save = save
        kick()
    }

    /// The owner committed `event`, leaving the conversation as `record`.
    func record(_ event: WebhookEvent, record: ConversationRecord) {
        state.withLock { state in
            state.record = record
            for name in Array(state.lanes.keys) { state.lanes[name]?.lane.record(event) }
        }
        kick()
    }

    /// Tells `endpoint` the messages again from `seq` on; false when there is no such endpoint.
    func replay(_ endpoint: String, from seq: Int64) -> Bool {
        let known = state.withLock { state in
            guard state.lanes[endpoint] != nil else { return false }
            state.lanes[endpoint]?.lane.replay(from: seq)
            return true
        }
        if known { kick() }
        return known
    }

    /// How many endpoints are owed something.
    var pendingCount: Int {
        state.withLock { state in state.lanes.values.filter { $0.lane.isPending || $0.running }.count }
    }

    /// The conversation moved to another node: deliver nothing more from here.
    func stop() {
        state.withLock { $0.stopped = true }
    }

    /// Starts a delivery loop for each lane that has something owed and none running.
    private func kick() {
        let start = state.withLock { state -> [String] in
            guard !state.stopped else { return [] }
            var start: [String] = []
            for (name, lane) in state.lanes where !lane.running && lane.lane.isPending {
                state.lanes[name]?.running = true
                start.append(name)
            }
            return start
        }
        for name in start {
            Task { [self] in await run(name) }
        }
    }

    private func run(_ name: String) async {
        guard let endpoint = endpoints[name] else { return }
        while true {
            let next = state.withLock { state -> (WebhookLane.Step, ConversationID, id: String?)? in
                guard !state.stopped, let step = state.lanes[name]?.lane.next(record: state.record, now: clock.now, wallNow: clock.wallNow) else { return nil }
                guard case .deliver(let event) = step else { return (step, state.record.id, nil) }
                return (step, state.record.id, state.lanes[name]?.lane.deliveryID(of: event, in: state.record.id))
            }
            guard let (step, conversation, id) = next else { return }
            if step != .idle {
                // Owed, as the store has it, before anything goes out.
                guard await keepCursor(name, pending: true) else { return }
            }
            switch step {
            case .idle:
                // Settled: the store hears of it, then the loop ends unless something came meanwhile.
                guard await keepCursor(name, pending: false) else { return }
                let more = state.withLock { state -> Bool in
                    if state.lanes[name]?.lane.isPending == true, !state.stopped { return true }
                    state.lanes[name]?.running = false
                    return false
                }
                if !more { return }
            case .wait(let until):
                try? await clock.sleep(for: until - clock.now)
            case .read(let after, let through):
                do {
                    let messages = try await load(after, Int(min(Int64(Self.readBatch), through - after)))
                    state.withLock { $0.lanes[name]?.lane.messagesRead(messages, after: after) }
                } catch {
                    logger.info("cannot read messages for a webhook; trying again", metadata: ["webhook.endpoint": "\(name)", "error": "\(error)"])
                    try? await clock.sleep(for: policy.retry.first)
                }
            case .readChanges(let after, let through):
                do {
                    let changes = try await loadChanges(after, Int(min(Int64(Self.readBatch), through - after)))
                    state.withLock { $0.lanes[name]?.lane.changesRead(changes, after: after) }
                } catch {
                    logger.info("cannot read changes to messages for a webhook; trying again", metadata: ["webhook.endpoint": "\(name)", "error": "\(error)"])
                    try? await clock.sleep(for: policy.retry.first)
                }
            case .deliver(let event):
                await deliver(event, id: id ?? event.deliveryID(in: conversation, change: 0), in: conversation, to: endpoint)
            }
        }
    }

    private func deliver(_ event: WebhookEvent, id: String, in conversation: ConversationID, to endpoint: WebhookEndpoint) async {
        let name = endpoint.name
        let delivery = WebhookDelivery(
            id: id, type: event.type, conversationId: conversation, body: event.body(in: conversation, now: clock.wallNow))
        let outcome = await sender.deliver(delivery, to: endpoint)
        let now = clock.now
        switch outcome {
        case .delivered:
            Self.delivered.increment()
            state.withLock { $0.lanes[name]?.lane.delivered() }
        case .failed(let retryAfter, let reason):
            Self.failedAttempts.increment()
            let dropped = state.withLock { $0.lanes[name]?.lane.failed(retryAfter: retryAfter, now: now) ?? nil }
            if dropped != nil {
                Self.droppedEvents.increment()
                logger.error("a webhook delivery kept failing and is dropped", metadata: [
                    "webhook.endpoint": "\(name)", "webhook.id": "\(delivery.id)", "webhook.type": "\(delivery.type.rawValue)", "error": "\(reason)",
                ])
            } else {
                logger.info("a webhook delivery failed; trying again", metadata: [
                    "webhook.endpoint": "\(name)", "webhook.id": "\(delivery.id)", "error": "\(reason)",
                ])
            }
        }
    }

    /// Brings the store's copy of the lane's cursor up to date: at once when the lane becomes
    /// owed or settled, else (moving forward while owed) at most once per
    /// ``WebhookPolicy/saveEvery``, and not again within it after the store refused. False when
    /// the loop must end: another node owns the conversation.
    private func keepCursor(_ name: String, pending: Bool) async -> Bool {
        let write = state.withLock { state -> (record: WebhookCursorRecord, told: WebhookTold?)? in
            guard let lane = state.lanes[name] else { return nil }
            let told = lane.lane.told
            let now = clock.now
            if let failedAt = lane.failedAt, now - failedAt < policy.saveEvery { return nil }
            if lane.saved.pending == pending {
                // The time first: this runs before every delivery, and comparing what was told
                // walks every member of a large group.
                if pending, let savedAt = lane.savedAt, now - savedAt < policy.saveEvery { return nil }
                guard lane.saved.told != told else { return nil }
            }
            // Nothing told yet (an empty state): everything is owed, from the conversation's start.
            let encoded = told.flatMap { try? JSONEncoder().encode($0) }.map { String(decoding: $0, as: UTF8.self) } ?? ""
            return (WebhookCursorRecord(endpoint: name, state: encoded, pending: pending), told)
        }
        guard let write else { return true }
        let result = await save(write.record)
        state.withLock { state in
            switch result {
            case .saved:
                state.lanes[name]?.saved = (write.told, write.record.pending)
                state.lanes[name]?.savedAt = clock.now
                state.lanes[name]?.failedAt = nil
            case .failed, .fenced:
                state.lanes[name]?.failedAt = clock.now
            }
        }
        guard case .fenced = result else { return true }
        stop()
        return false
    }

    static let delivered = Counter(label: "parley.webhook.delivered")
    static let failedAttempts = Counter(label: "parley.webhook.failed_attempts")
    static let droppedEvents = Counter(label: "parley.webhook.dropped_events")
}
