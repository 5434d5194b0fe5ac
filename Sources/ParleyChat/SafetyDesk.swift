import Crypto
import Distributed
import Foundation
import Logging
import ParleyCluster
import ParleyModel
import ParleyStore

/// Where users' reports go and operators find and resolve them, and what sees account deletions
/// through: one virtual actor on the ring (its key is fixed), over the store.
///
/// It tells webhook endpoints of each new report (`report.created`) and each finished deletion
/// (`user.deleted`), each delivery retried on its own until it is taken or too old; what it owed
/// when its node died is found in the store by the node that takes it over. It finishes deletions
/// a node left half done: whenever it is taken over or a worker leaves the ring, and every
/// ``sweepEvery``.
public distributed actor SafetyDesk {
    public typealias ActorSystem = ClusterSystem

    public static let kind = "safety"
    static let key = "desk"

    /// How often the desk's node looks for deletions left unfinished (a store that failed under a
    /// live one) and webhooks still owed.
    public static let sweepEvery: Duration = .seconds(60)

    private let services: ChatServices
    /// Reports and deletions whose webhooks are being delivered by this actor now.
    private var delivering: Set<String> = []
    /// Whether a sweep is finishing deletions now.
    private var finishing = false

    public static func resolve(using system: ClusterSystem) throws -> SafetyDesk {
        try resolve(id: ClusterActorID(kind: kind, key: key), using: system)
    }

    /// Makes `system` host the desk when the ring places it here. The node that takes it over
    /// (the ring changed, or this node joined), or holds it when a worker leaves, resumes what is
    /// owed at once; the node holding it looks again every ``sweepEvery``.
    public static func register(on system: ClusterSystem, services: ChatServices) {
        system.register(kind: kind) { _, system in
            SafetyDesk(services: services, actorSystem: system)
        }
        let placement = ClusterActorID(kind: kind, key: key).placementKey
        system.onRingChange { ring, previous in
            let me = system.settings.name
            guard ring.owner(of: placement) == me else { return }
            // Taken over, or this process's first ring (its previous one is empty): nothing of
            // what was owed is known here yet. A worker that left may have died mid-deletion.
            let departed = !Set(previous.workers).subtracting(ring.workers).isEmpty
            guard previous.owner(of: placement) != me || departed else { return }
            Task { await sweep(using: system) }
        }
        system.every(sweepEvery) {
            guard system.ring.owner(of: placement) == system.settings.name else { return }
            await sweep(using: system)
        }
    }

    private static func sweep(using system: ClusterSystem) async {
        do {
            try await resolve(using: system).resume()
        } catch {
            system.logger.info("the safety desk did not resume what it owes; it tries again later", metadata: ["error": "\(error)"])
        }
    }

    init(services: ChatServices, actorSystem: ClusterSystem) {
        self.actorSystem = actorSystem
        self.services = services
    }

    /// `POST /v1/reports`: files `request` by `reporter`. A message must exist and be the reported
    /// user's, in a conversation the reporter is a member of; a user reported without a message
    /// must exist. Returns the report and whether it is new: the reporter's open report about the
    /// same target is returned again (a retry files nothing).
    public distributed func file(_ request: API.NewReport, by reporter: UserID) async throws -> ReportFiling {
        guard let reason = ReportReason(rawValue: request.reason) else {
            throw ChatError(.invalidRequest, "reason must be one of \(ReportReason.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        if let note = request.note {
            guard note.count <= Report.noteMax else { throw ChatError(.invalidRequest, "note must be at most \(Report.noteMax) characters") }
            try StoredText.require(note, field: "note")
        }
        guard request.userId != reporter else { throw ChatError(.invalidRequest, "userId: you cannot report yourself") }
        if request.seq != nil, request.conversationId == nil { throw ChatError(.invalidRequest, "seq needs its conversationId") }
        var message: Message?
        if let conversation = request.conversationId {
            message = try await ConversationActor.resolve(conversation, using: actorSystem).reported(seq: request.seq, of: request.userId, by: reporter)
        } else {
            let known = try await services.withStore { try await $0.existingUsers([request.userId]) }
            guard known.contains(request.userId) else { throw ChatError(.notFound, "user not found") }
        }
        let report = Report(
            id: .make(), reporterId: reporter, userId: request.userId, conversationId: request.conversationId, seq: request.seq, reason: reason,
            note: request.note, message: message, createdAt: actorSystem.clock.wallNow.millisecondPrecision)
        let filed = try await services.withStore { try await $0.fileReport(report) }
        if filed.created {
            actorSystem.logger.notice("a report was filed", metadata: [
                "report.id": "\(report.id)", "report.reason": "\(reason.rawValue)", "user.id": "\(request.userId)", "reporter.id": "\(reporter)",
            ])
            deliverWebhooks(of: filed.report)
        }
        return ReportFiling(report: filed.report, created: filed.created)
    }

    /// `GET /v1/reports` (admin token): reports with this status, oldest first, a page at a time.
    public distributed func reports(status: ReportStatus?, after: ReportID?, limit: Int) async throws -> [Report] {
        guard (1...500).contains(limit) else { throw ChatError(.invalidRequest, "limit must be 1–500") }
        return try await services.withStore { try await $0.reports(status: status, after: after, limit: limit) }
    }

    /// `POST /v1/reports/{id}/resolve` (admin token): resolving one resolved already changes nothing.
    public distributed func resolve(_ id: ReportID, resolution: String?) async throws -> Report {
        if let resolution {
            guard resolution.count <= Report.noteMax else { throw ChatError(.invalidRequest, "resolution must be at most \(Report.noteMax) characters") }
            try StoredText.require(resolution, field: "resolution")
        }
        let now = actorSystem.clock.wallNow
        guard let report = try await services.withStore({ try await $0.resolveReport(id, resolution: resolution, at: now) }) else {
            throw ChatError(.notFound, "no report \(id)")
        }
        return report
    }

    /// Delivers the webhooks the store says are owed and finishes the deletions it says are
    /// unfinished (a desk that took over from a node that died, or a sweep).
    public distributed func resume() async throws {
        // What no endpoint subscribes to stays owed, unread, until one does.
        let subscribed = Set(services.webhooks?.endpoints.flatMap(\.types) ?? [])
        if subscribed.contains(.reportCreated) {
            for report in try await services.withStore({ try await $0.reportsOwingWebhooks(limit: 10_000) }) { deliverWebhooks(of: report) }
        }
        if subscribed.contains(.userDeleted) {
            for deletion in try await services.withStore({ try await $0.deletionsOwingWebhooks(limit: 10_000) }) { deliverWebhooks(of: deletion) }
        }
        try await profilesChanged()
        let unfinished = try await services.withStore { try await $0.unfinishedDeletions(limit: 1_000) }
        guard !unfinished.isEmpty, !finishing else { return }
        finishing = true
        let system = actorSystem
        Task {
            for deletion in unfinished {
                do {
                    system.logger.notice("finishing an account deletion left unfinished", metadata: ["user.id": "\(deletion.userId)"])
                    let user = try UserActor.resolve(deletion.userId, using: system)
                    _ = try await ClusterSystem.withCallTimeout(UserActor.deletionTimeout) { try await user.deleteAccount(erase: deletion.erase) }
                } catch {
                    system.logger.warning("an account deletion is still unfinished; the next sweep tries again", metadata: [
                        "user.id": "\(deletion.userId)", "error": "\(error)",
                    ])
                }
            }
            await self.finished()
        }
    }

    private func finished() {
        finishing = false
    }

    /// A deletion finished (``UserActor/deleteAccount(erase:)``): webhooks get `user.deleted`.
    public distributed func deletionFinished(_ deletion: AccountDeletion) {
        deliverWebhooks(of: deletion)
    }

    /// Users' profiles changed (``UserActor``): webhooks get `user.updated` for each not told yet.
    public distributed func profilesChanged() async throws {
        guard services.webhooks?.endpoints.contains(where: { $0.types.contains(.userUpdated) }) == true else { return }
        for profile in try await services.withStore({ try await $0.untoldProfiles(limit: 1_000) }) { deliverWebhooks(of: profile) }
    }

    // MARK: Webhooks

    private func deliverWebhooks(of report: Report) {
        let body = Self.body(WebhookDeliveryEnvelope(type: .reportCreated, timestamp: report.createdAt, data: API.ReportBody(report: report)))
        deliver(
            WebhookDelivery(id: Self.deliveryID(.reportCreated, of: report.id.rawValue), type: .reportCreated, conversationId: nil, body: body),
            key: "report \(report.id)", since: report.createdAt
        ) { store in try await store.reportWebhooksDone(report.id) }
    }

    private func deliverWebhooks(of deletion: AccountDeletion) {
        let at = deletion.finishedAt ?? deletion.requestedAt
        let data = API.UserDeletedBody(userId: deletion.userId, erased: deletion.erase)
        deliver(
            WebhookDelivery(
                id: Self.deliveryID(.userDeleted, of: deletion.userId.rawValue), type: .userDeleted, conversationId: nil,
                body: Self.body(WebhookDeliveryEnvelope(type: .userDeleted, timestamp: at, data: data))),
            key: "deletion \(deletion.userId)", since: at
        ) { store in try await store.deletionWebhooksDone(deletion.userId) }
    }

    /// One delivery per change of a profile, told one at a time: the next change is looked for
    /// once this one is taken (its body is the user as they are when read, so an endpoint ends
    /// with the latest).
    private func deliverWebhooks(of profile: UntoldProfile) {
        let user = profile.user.id, version = profile.version
        deliver(
            WebhookDelivery(
                id: Self.deliveryID(.userUpdated, of: "\(user.rawValue) \(version)"), type: .userUpdated, conversationId: nil,
                body: Self.body(WebhookDeliveryEnvelope(type: .userUpdated, timestamp: profile.changedAt, data: API.UserEvent(user: profile.user)))),
            key: "profile \(user)", since: profile.changedAt, lookAgain: true
        ) { store in try await store.profileTold(user, through: version) }
    }

    /// Delivers to every endpoint subscribed to its type, each on its own; then `done` marks it
    /// delivered in the store, and with `lookAgain` what changed meanwhile is looked for.
    private func deliver(
        _ delivery: WebhookDelivery, key: String, since: Date, lookAgain: Bool = false, done: @escaping @Sendable (any ChatStore) async throws -> Void
    ) {
        guard let settings = services.webhooks, !delivering.contains(key) else { return }
        let endpoints = settings.endpoints.filter { $0.types.contains(delivery.type) }
        guard !endpoints.isEmpty else { return }
        delivering.insert(key)
        let clock = actorSystem.clock
        let logger = actorSystem.logger
        let store = services.store
        Task {
            await withTaskGroup(of: Void.self) { group in
                for endpoint in endpoints {
                    group.addTask {
                        await Self.deliver(delivery, createdAt: since, to: endpoint, settings: settings, clock: clock, logger: logger)
                    }
                }
            }
            // Done (or given up on): a desk that takes over does not deliver it again. A failure
            // here only means it may be delivered again, under the same ID.
            var marked = false
            do {
                try await done(store)
                marked = true
            } catch {
                logger.info("webhooks were delivered but not marked so; a desk that takes over sends them again", metadata: [
                    "webhook.id": "\(delivery.id)", "error": "\(error)",
                ])
            }
            // Not when marking failed: what was just told would be found again at once.
            await self.delivered(key, lookAgain: lookAgain && marked)
        }
    }

    private func delivered(_ key: String, lookAgain: Bool) async {
        delivering.remove(key)
        guard lookAgain else { return }
        do {
            try await profilesChanged()
        } catch {
            actorSystem.logger.info("profile changes not looked for; the next sweep does", metadata: ["error": "\(error)"])
        }
    }

    /// Posts one delivery until the endpoint takes it, or until it is older than the policy's
    /// `giveUpAfter` (then it is dropped, and logged).
    private static func deliver(
        _ delivery: WebhookDelivery, createdAt: Date, to endpoint: WebhookEndpoint, settings: WebhookSettings, clock: any ClusterClock, logger: Logger
    ) async {
        var failures = 0
        while true {
            switch await settings.sender.deliver(delivery, to: endpoint) {
            case .delivered:
                return
            case .failed(let retryAfter, let reason):
                guard clock.wallNow.timeIntervalSince(createdAt) < settings.policy.giveUpAfter.seconds else {
                    logger.error("a webhook kept failing and is dropped", metadata: [
                        "webhook.endpoint": "\(endpoint.name)", "webhook.id": "\(delivery.id)", "error": "\(reason)",
                    ])
                    return
                }
                failures += 1
                let wait = settings.policy.retry.delay(afterFailures: failures, atLeast: retryAfter)
                logger.info("a webhook failed; trying again", metadata: [
                    "webhook.endpoint": "\(endpoint.name)", "webhook.id": "\(delivery.id)", "error": "\(reason)",
                ])
                do {
                    try await clock.sleep(for: wait)
                } catch {
                    return
                }
            }
        }
    }

    /// `evt_` and a digest of the type and what it is about (a report's ID, a deleted user's):
    /// the same on every attempt, by any desk.
    static func deliveryID(_ type: WebhookEventType, of subject: String) -> String {
        let digest = SHA256.hash(data: Array("\(type.rawValue)\n\(subject)".utf8))
        return "evt_" + Data(digest.prefix(16)).base64URLEncodedString
    }

    private struct WebhookDeliveryEnvelope<Payload: Encodable>: Encodable {
        var type: WebhookEventType
        var timestamp: Date
        var data: Payload
    }

    private static func body<Payload>(_ envelope: WebhookDeliveryEnvelope<Payload>) -> [UInt8] {
        (try? Array(API.makeEncoder().encode(envelope))) ?? []
    }
}

/// What ``SafetyDesk/file(_:by:)`` answers.
public struct ReportFiling: Codable, Sendable, Hashable {
    public var report: Report
    /// False when the reporter's open report about the same target was found instead.
    public var created: Bool
}
