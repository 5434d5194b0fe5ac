import Crypto
import Distributed
import Foundation
import Logging
import ParleyCluster
import ParleyModel
import ParleyStore

/// Where users' reports go, and where operators find and resolve them: one virtual actor on the
/// ring (its key is fixed), over the store. It also tells webhook endpoints of each new report
/// (`report.created`), each report's delivery retried on its own until it is taken or too old;
/// what it owed when its node died is found in the store by the node that takes it over.
public distributed actor ReportDesk {
    public typealias ActorSystem = ClusterSystem

    public static let kind = "reports"
    static let key = "desk"

    private let services: ChatServices
    /// Reports whose webhooks are being delivered by this actor now.
    private var delivering: Set<ReportID> = []

    public static func resolve(using system: ClusterSystem) throws -> ReportDesk {
        try resolve(id: ClusterActorID(kind: kind, key: key), using: system)
    }

    /// Makes `system` host the desk when the ring places it here; the node that takes it over
    /// (the ring changed, or this node joined) resumes the webhooks it owes.
    public static func register(on system: ClusterSystem, services: ChatServices) {
        system.register(kind: kind) { _, system in
            ReportDesk(services: services, actorSystem: system)
        }
        guard services.webhooks?.endpoints.contains(where: { $0.types.contains(.reportCreated) }) == true else { return }
        system.onRingChange { ring, previous in
            let placement = ClusterActorID(kind: kind, key: key).placementKey
            let me = system.settings.name
            // Taken over, or this process's first ring (its previous one is empty): nothing of
            // what was owed is known here yet.
            guard ring.owner(of: placement) == me, previous.owner(of: placement) != me else { return }
            Task {
                do {
                    try await resolve(using: system).resumeWebhooks()
                } catch {
                    system.logger.info("the report desk did not resume its webhooks; the next ring change will", metadata: ["error": "\(error)"])
                }
            }
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

    /// Delivers the webhooks the store says are owed (a desk that took over from a node that died).
    public distributed func resumeWebhooks() async throws {
        let owed = try await services.withStore { try await $0.reportsOwingWebhooks(limit: 10_000) }
        for report in owed { deliverWebhooks(of: report) }
    }

    // MARK: Webhooks

    private func deliverWebhooks(of report: Report) {
        guard let settings = services.webhooks, !delivering.contains(report.id) else { return }
        let endpoints = settings.endpoints.filter { $0.types.contains(.reportCreated) }
        guard !endpoints.isEmpty else { return }
        delivering.insert(report.id)
        let delivery = WebhookDelivery(id: Self.deliveryID(of: report), type: .reportCreated, conversationId: nil, body: Self.body(of: report))
        let clock = actorSystem.clock
        let logger = actorSystem.logger
        let store = services.store
        Task {
            await withTaskGroup(of: Void.self) { group in
                for endpoint in endpoints {
                    group.addTask {
                        await Self.deliver(delivery, createdAt: report.createdAt, to: endpoint, settings: settings, clock: clock, logger: logger)
                    }
                }
            }
            // Done (or given up on): a desk that takes over does not deliver it again. A failure
            // here only means it may be delivered again, under the same ID.
            do {
                try await store.reportWebhooksDone(report.id)
            } catch {
                logger.info("a report's webhooks were delivered but not marked so; a desk that takes over sends them again", metadata: [
                    "report.id": "\(report.id)", "error": "\(error)",
                ])
            }
            await self.delivered(report.id)
        }
    }

    private func delivered(_ id: ReportID) {
        delivering.remove(id)
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
                    logger.error("a report's webhook kept failing and is dropped", metadata: [
                        "webhook.endpoint": "\(endpoint.name)", "webhook.id": "\(delivery.id)", "error": "\(reason)",
                    ])
                    return
                }
                failures += 1
                let wait = settings.policy.retry.delay(afterFailures: failures, atLeast: retryAfter)
                logger.info("a report's webhook failed; trying again", metadata: [
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

    /// `evt_` and a digest of the report's ID: the same on every attempt, by any desk.
    static func deliveryID(of report: Report) -> String {
        let digest = SHA256.hash(data: Array("\(WebhookEventType.reportCreated.rawValue)\n\(report.id.rawValue)".utf8))
        return "evt_" + Data(digest.prefix(16)).base64URLEncodedString
    }

    private struct Envelope: Encodable {
        var type: WebhookEventType
        var timestamp: Date
        var data: API.ReportBody
    }

    static func body(of report: Report) -> [UInt8] {
        let envelope = Envelope(type: .reportCreated, timestamp: report.createdAt, data: API.ReportBody(report: report))
        return (try? Array(API.makeEncoder().encode(envelope))) ?? []
    }
}

/// What ``ReportDesk/file(_:by:)`` answers.
public struct ReportFiling: Codable, Sendable, Hashable {
    public var report: Report
    /// False when the reporter's open report about the same target was found instead.
    public var created: Bool
}
