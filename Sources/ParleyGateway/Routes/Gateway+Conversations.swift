import Hummingbird
import ParleyChat
import ParleyModel

extension Gateway {
    /// Conversations: made, listed, read, renamed, given a photo, muted, and their members.
    func addConversationRoutes(to v1: RouterGroup<GatewayContext>) {
        let conversations = v1.authenticated(by: self)
        conversations.post("conversations") { request, context in try await self.createConversation(request, context) }
        conversations.get("conversations") { request, context in try await self.listConversations(request, context) }
        conversations.get("conversations/:id") { request, context in
            try Self.json(try await self.conversation(try Self.conversationID(context), for: context.caller.id, bot: context.caller.user.bot))
        }
        conversations.patch("conversations/:id") { request, context in
            let id = try Self.conversationID(context)
            let change = try await self.decode(API.Rename.self, from: request)
            let record = try await ConversationActor.resolve(id, using: self.system).change(name: change.name, metadata: change.metadata, by: context.caller.id)
            return try Self.json(API.Conversation(record, for: context.caller.id, bot: context.caller.user.bot))
        }
        Self.putAndDelete("conversations/:id/photo", on: conversations) { setting, request, context in
            let id = try Self.conversationID(context)
            let media = setting ? try await self.decode(API.PhotoChange.self, from: request).mediaId : nil
            let record = try await ConversationActor.resolve(id, using: self.system).setPhoto(media, by: context.caller.id)
            return try Self.json(API.Conversation(record, for: context.caller.id, bot: context.caller.user.bot))
        }
        conversations.put("conversations/:id/settings") { request, context in
            let id = try Self.conversationID(context)
            let settings = try await self.decode(API.ConversationSettings.self, from: request)
            guard settings.muted != nil || settings.metadata != nil else { throw APIError.invalid("give muted, metadata or both") }
            let conversation = try ConversationActor.resolve(id, using: self.system)
            if let metadata = settings.metadata { _ = try await conversation.setMemberMetadata(metadata, by: context.caller.id) }
            var record: ConversationRecord?
            if let muted = settings.muted { record = try await conversation.setMuted(muted, by: context.caller.id) }
            if record == nil { record = try await conversation.snapshot(for: context.caller.id) }
            let member = record?.member(context.caller.id)
            return try Self.json(API.ConversationSettings(muted: record?.isMuted(by: context.caller.id) ?? false, metadata: member?.metadata ?? Metadata([:])))
        }
        conversations.post("conversations/:id/members") { request, context in
            let id = try Self.conversationID(context)
            let body = try await self.decode(API.NewMembers.self, from: request)
            guard body.userIds.count <= 1000 else { throw APIError.invalid("userIds: at most 1,000") }
            let record = try await ConversationActor.resolve(id, using: self.system).addMembers(body.userIds, by: context.caller.id)
            return try Self.json(API.Conversation(record, for: context.caller.id, bot: context.caller.user.bot))
        }
        conversations.delete("conversations/:id/members/:userId") { request, context in
            let id = try Self.conversationID(context)
            let member = try Self.userID(context.parameters.require("userId"))
            try await ConversationActor.resolve(id, using: self.system).removeMember(member, by: context.caller.id)
            return Response(status: .noContent)
        }
    }

    private func createConversation(_ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        let caller = context.caller
        let body = try await decode(API.NewConversation.self, from: request)
        guard body.memberIds.count <= 1000 else { throw APIError.invalid("memberIds: a group has at most 1,000 members") }
        let create = CreateConversation(creatorId: caller.id, memberIds: body.memberIds, name: body.name)
        let others = Set(body.memberIds).subtracting([caller.id])
        let id = create.isDirect ? ConversationActor.directID(caller.id, others.first ?? caller.id) : ConversationID.make()
        let result = try await ConversationActor.resolve(id, using: system).create(create)
        return try Self.json(API.CreatedConversation(conversation: API.Conversation(result.conversation, for: caller.id, bot: caller.user.bot)), status: result.created ? .created : .ok)
    }

    private func listConversations(_ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        let caller = context.caller
        let limit = try Self.intParameter(request, "limit", default: 50, range: 1...100)
        var cursor: ConversationPageCursor?
        if let text = request.uri.queryParameters["cursor"] {
            guard let parsed = ClientInput.pageCursor(text) else { throw APIError.invalid("cursor is not one this server gave") }
            cursor = parsed
        }
        let page = try await UserActor.resolve(caller.id, using: system).conversations(after: cursor, limit: limit)
        return try Self.json(API.ConversationList(
            conversations: page.conversations.map { API.Conversation($0.conversation, for: caller.id, lastMessage: $0.lastMessage, bot: caller.user.bot) },
            next: page.next.map(ClientInput.pageCursorToken)))
    }

    /// A conversation as the member sees it (a bot: with every member's own fields), with its last message.
    func conversation(_ id: ConversationID, for user: UserID, bot: Bool) async throws -> API.Conversation {
        let actor = try ConversationActor.resolve(id, using: system)
        let record = try await actor.snapshot(for: user)
        let last = record.lastSeq > 0 ? try await actor.messages(for: user, before: record.lastSeq + 1, limit: 1).last : nil
        return API.Conversation(record, for: user, lastMessage: last, bot: bot)
    }
}
