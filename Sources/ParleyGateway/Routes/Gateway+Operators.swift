import Hummingbird
import Logging
import ParleyChat
import ParleyCluster
import ParleyModel

extension Gateway {
    /// Operators' routes, with the admin token (``requireAdmin(_:)``): bots, reports, suspensions,
    /// erasing a message, and webhook replays.
    func addOperatorRoutes(to v1: RouterGroup<GatewayContext>) {
        v1.post("bots") { request, context in
            try self.requireAdmin(request)
            let body = try await self.decode(API.NewBot.self, from: request)
            let user = try await UserActor.resolve(UserID.make(), using: self.system)
                .create(NewUser(handle: body.handle, displayName: body.displayName, passwordHash: NewUser.noPassword, bot: true))
            self.logger.info("bot created", metadata: ["user.id": "\(user.id)"])
            return try await self.botSession(user, request)
        }
        v1.post("bots/:userId/tokens") { request, context in
            try self.requireAdmin(request)
            let id = try Self.userID(context.parameters.require("userId"))
            let user = try await UserActor.resolve(id, using: self.system).user()
            guard user.bot else { throw APIError(.notFound, "not_found", "no bot \(id): people sign in with their password") }
            return try await self.botSession(user, request)
        }
        v1.get("reports") { request, context in
            try self.requireAdmin(request)
            let status: ReportStatus?
            switch request.uri.queryParameters["status"].map(String.init) {
            case nil, "any": status = nil
            case let name?:
                guard let known = ReportStatus(rawValue: name) else { throw APIError.invalid("status must be open, resolved or any") }
                status = known
            }
            let limit = try Self.intParameter(request, "limit", default: 100, range: 1...500)
            let after = try request.uri.queryParameters["after"].map { text -> ReportID in
                guard ClientInput.isPlausibleID(String(text)) else { throw APIError.invalid("after must be a report ID") }
                return ReportID(rawValue: String(text))
            }
            let reports = try await SafetyDesk.resolve(using: self.system).reports(status: status, after: after, limit: limit)
            return try Self.json(API.Reports(reports: reports, next: reports.count == limit ? reports.last?.id.rawValue : nil))
        }
        v1.post("reports/:reportId/resolve") { request, context in
            try self.requireAdmin(request)
            let text = try context.parameters.require("reportId")
            guard ClientInput.isPlausibleID(text) else { throw APIError.notFound("no report \(text)") }
            let body = try await self.decode(API.ReportResolution.self, from: request)
            let report = try await SafetyDesk.resolve(using: self.system).resolve(ReportID(rawValue: text), resolution: body.resolution)
            self.logger.info("report resolved", metadata: ["report.id": "\(report.id)"])
            return try Self.json(API.ReportBody(report: report))
        }
        for (action, suspended) in [("suspend", true), ("unsuspend", false)] {
            v1.post("admin/users/:userId/\(action)") { request, context in
                try self.requireAdmin(request)
                let id = try Self.userID(context.parameters.require("userId"))
                try await UserActor.resolve(id, using: self.system).setSuspended(suspended)
                return Response(status: .noContent)
            }
        }
        v1.delete("admin/conversations/:id/messages/:seq") { request, context in
            try self.requireAdmin(request)
            let id = try Self.conversationID(context)
            let seq = try Self.seqParameter(context)
            let tombstone = try await ConversationActor.resolve(id, using: self.system).moderatorErase(seq: seq)
            self.logger.notice("message erased by an operator", metadata: ["conversation.id": "\(id)", "message.seq": "\(tombstone.seq)"])
            return Response(status: .noContent)
        }
        v1.post("webhooks/:name/replay") { request, context in
            try self.requireAdmin(request)
            let name = try context.parameters.require("name")
            let body = try await self.decode(API.WebhookReplay.self, from: request)
            guard body.fromSeq >= 1 else { throw APIError.invalid("fromSeq must be at least 1") }
            guard try await ConversationActor.resolve(body.conversationId, using: self.system).replayWebhooks(to: name, from: body.fromSeq) else {
                throw APIError(.notFound, "not_found", "no webhook endpoint named \(name) on the conversation's worker (--webhooks)")
            }
            return try Self.json(body, status: .accepted)
        }
    }

    /// A bot's token lasts a year: a service holds it in its configuration, and an operator
    /// issues the next one (`POST /v1/bots/{id}/tokens`) before it runs out.
    static let botTokenLifetime: Duration = .seconds(365 * 24 * 3600)

    /// `201 {user, token}`: a bot and a new token for it.
    func botSession(_ user: User, _ request: Request) async throws -> Response {
        let token = try await openSession(for: user.id, request, verifiedHash: nil, lifetime: Self.botTokenLifetime)
        return try Self.json(API.Session(user: user, token: token), status: .created)
    }
}
