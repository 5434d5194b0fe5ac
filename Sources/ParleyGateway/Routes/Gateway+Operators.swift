import Hummingbird
import Logging
import ParleyChat
import ParleyCluster
import ParleyModel

extension Gateway {
    /// Operators' routes, with the admin token (``requireAdmin(_:)``): bots and webhook replays.
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
