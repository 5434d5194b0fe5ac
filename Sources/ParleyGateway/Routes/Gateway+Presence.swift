import Hummingbird
import ParleyChat
import ParleyModel

extension Gateway {
    /// Presence: the caller's own preference, and what others' is.
    func addPresenceRoutes(to v1: RouterGroup<GatewayContext>) {
        let presence = v1.authenticated(by: self)
        presence.put("presence") { request, context in
            let body = try await self.decode(API.PresencePreference.self, from: request)
            guard body.status != .offline else { throw APIError.invalid("status must be online or away") }
            _ = try await PresenceShard.resolve(for: context.caller.id, using: self.system).setPreference(context.caller.id, body.status)
            return Response(status: .noContent)
        }
        presence.get("presence") { request, context in try await self.presence(request, context) }
    }

    /// The presence of users who share a conversation with the caller (and the caller's own).
    /// Anyone else is shown as a user never seen is — offline, no last seen — so the route tells
    /// a stranger nothing about who is online, or that an ID exists.
    private func presence(_ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        let caller = context.caller
        let ids: [UserID]
        do {
            ids = try ClientInput.userIDs(request.uri.queryParameters["userIds"], max: 100)
        } catch {
            throw APIError.invalid(error.message)
        }
        let system = self.system
        var visible = Set(try await UserActor.resolve(caller.id, using: system).contacts())
        visible.insert(caller.id)
        let asked = Set(ids).intersection(visible)
        let found = try await withThrowingTaskGroup(of: [Presence].self) { group in
            for users in Dictionary(grouping: Array(asked), by: PresenceShard.shard(of:)).values {
                group.addTask { try await PresenceShard.resolve(for: users[0], using: system).presence(of: users) }
            }
            return try await group.reduce(into: [UserID: Presence]()) { all, part in
                for presence in part { all[presence.userId] = presence }
            }
        }
        return try Self.json(API.Presences(presence: ids.map { found[$0] ?? Presence(userId: $0, status: .offline) }))
    }
}
