import Hummingbird
import Logging
import ParleyChat
import ParleyCluster
import ParleyModel

extension Gateway {
    /// Messages (sent, paged, annotated by bots), receipts and typing.
    func addMessageRoutes(to v1: RouterGroup<GatewayContext>) {
        // Sends are counted against a limit of their own, not the write limit.
        v1.authenticated(by: self, writes: .ownLimit).post("conversations/:id/messages") { request, context in try await self.send(request, context) }
        let messages = v1.authenticated(by: self)
        messages.get("conversations/:id/messages") { request, context in try await self.history(request, context) }
        messages.put("conversations/:id/messages/:seq/annotations/:key") { request, context in
            let id = try Self.conversationID(context)
            let seq = try Self.seqParameter(context)
            let key = try context.parameters.require("key")
            let body = try await self.decode(API.AnnotationValue.self, from: request)
            let annotation = try await ConversationActor.resolve(id, using: self.system).annotate(seq: seq, key: key, value: body.value, by: context.caller.id)
            return try Self.json(API.AnnotationEvent(annotation: annotation))
        }
        messages.patch("conversations/:id/messages/:seq") { request, context in
            let id = try Self.conversationID(context)
            let seq = try Self.seqParameter(context)
            let body = try await self.decode(API.MessageEdit.self, from: request)
            let message = try await ConversationActor.resolve(id, using: self.system)
                .edit(seq: seq, text: body.text ?? "", clientChangeId: body.clientChangeId, by: context.caller.id)
            return Self.json(bytes: message.wrappedJSON, status: .ok)
        }
        messages.delete("conversations/:id/messages/:seq") { _, context in
            let id = try Self.conversationID(context)
            let seq = try Self.seqParameter(context)
            let tombstone = try await ConversationActor.resolve(id, using: self.system).delete(seq: seq, by: context.caller.id)
            return Self.json(bytes: tombstone.wrappedJSON, status: .ok)
        }
        messages.get("conversations/:id/messages/:seq/replies") { request, context in
            let id = try Self.conversationID(context)
            let seq = try Self.seqParameter(context)
            let after = Int64(try Self.intParameter(request, "after", default: 0, range: 0...Int.max))
            let limit = try Self.intParameter(request, "limit", default: 50, range: 1...200)
            let replies = try await ConversationActor.resolve(id, using: self.system).replies(to: seq, after: after, limit: limit, for: context.caller.id)
            return try Self.json(API.Messages(messages: replies))
        }
        Self.putAndDelete("conversations/:id/messages/:seq/pin", on: messages) { pinning, _, context in
            let id = try Self.conversationID(context)
            let seq = try Self.seqParameter(context)
            let pinned = try await ConversationActor.resolve(id, using: self.system).pin(seq: seq, pinning: pinning, by: context.caller.id)
            return try Self.json(API.Pinned(pinned: pinned))
        }
        messages.get("search") { request, context in
            let query = request.uri.queryParameters
            guard let q = query["q"].map(String.init) else { throw APIError.invalid("q is required: the words to search for") }
            let limit = try Self.intParameter(request, "limit", default: 20, range: 1...50)
            var conversation: ConversationID?
            if let id = query["conversationId"] {
                guard ClientInput.isPlausibleID(String(id)) else { throw APIError.notFound("conversation not found") }
                conversation = ConversationID(rawValue: String(id))
            }
            return try Self.json(try await UserActor.resolve(context.caller.id, using: self.system).search(
                q, in: conversation, cursor: query["cursor"].map(String.init), limit: limit))
        }
        messages.get("mentions") { request, context in
            let limit = try Self.intParameter(request, "limit", default: 50, range: 1...100)
            let before = request.uri.queryParameters["before"].map(String.init)
            return try Self.json(try await UserActor.resolve(context.caller.id, using: self.system).mentions(before: before, limit: limit))
        }
        messages.get("conversations/:id/messages/:seq/versions") { _, context in
            let id = try Self.conversationID(context)
            let seq = try Self.seqParameter(context)
            let versions = try await ConversationActor.resolve(id, using: self.system).versions(of: seq, for: context.caller.id)
            return try Self.json(API.MessageVersions(versions: versions))
        }
        Self.putAndDelete("conversations/:id/messages/:seq/reactions/:emoji", on: messages) { adding, _, context in
            let id = try Self.conversationID(context)
            let seq = try Self.seqParameter(context)
            let emoji = try Self.decodedParameter(context, "emoji")
            let reactions = try await ConversationActor.resolve(id, using: self.system).react(seq: seq, emoji: emoji, adding: adding, by: context.caller.id)
            return try Self.json(API.Reactions(reactions: reactions))
        }
        messages.post("conversations/:id/receipts") { request, context in
            let id = try Self.conversationID(context)
            try await self.markReceipts(try await self.decode(API.Receipts.self, from: request), in: id, by: context.caller)
            return Response(status: .noContent)
        }
        messages.post("conversations/:id/typing") { request, context in
            let id = try Self.conversationID(context)
            try await self.setTyping(try await self.decode(API.Typing.self, from: request), in: id, by: context.caller)
            return Response(status: .noContent)
        }
    }

    /// `PUT path` (handled with `true`: add, pin) and `DELETE path` (with `false`: take back).
    static func putAndDelete(
        _ path: RouterPath, on group: RouterGroup<AuthenticatedContext>,
        _ handler: @escaping @Sendable (Bool, Request, AuthenticatedContext) async throws -> Response
    ) {
        group.put(path) { request, context in try await handler(true, request, context) }
        group.delete(path) { request, context in try await handler(false, request, context) }
    }

    private func send(_ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        let id = try Self.conversationID(context)
        let body = try await decode(API.NewMessage.self, from: request, readingFirst: API.NewMessage.fromCanonicalJSON)
        let sent = try await send(body, to: id, by: context.caller)
        return Self.json(bytes: sent.json, status: sent.created ? .created : .ok)
    }

    /// A send, as the REST route and the send stream (`POST /v1/sends`) take it: counted against
    /// the caller's send limit, its attachments checked, then committed by the conversation's
    /// owner. The answer is `API.SentMessage`, written directly (DirectJSON: the encoder's bytes
    /// without Codable) — the same bytes as a `message` event's data, so encoded once for both.
    func send(_ body: API.NewMessage, to id: ConversationID, by caller: Caller) async throws -> (json: [UInt8], created: Bool) {
        if let wait = sendLimiter.acquire(caller.id.rawValue, now: system.clock.now) { throw APIError.rateLimited(retryAfter: wait, "too many messages; slow down") }
        var attachments: [Attachment] = []
        if let asked = body.attachments, !asked.isEmpty {
            // A send the owner would refuse records nothing.
            try SendMessage.validate(clientMessageId: body.clientMessageId, text: body.text, captions: asked.map(\.caption), limits: ChatLimits())
            try SendMessage.validate(replyTo: body.replyTo, mentions: body.mentions ?? [], by: caller.id)
            try body.metadata?.validate(field: "metadata")
            attachments = try await UserActor.resolve(caller.id, using: system).attach(asked, to: id)
        }
        let result = try await sendRetrying(
            SendMessage(
                senderId: caller.id, clientMessageId: body.clientMessageId, text: body.text, attachments: attachments, replyTo: body.replyTo,
                mentions: body.mentions ?? [], metadata: body.metadata),
            to: id)
        let json = result.message.wrappedJSON
        // The sender's own event, if its stream is on this loop, goes out with this answer.
        hub.deliverAhead(result.message, json: json, to: caller.id)
        return (json, result.created)
    }

    /// Receipts, as `POST …/receipts` and the send stream take them (counted against the write
    /// limit by the route's ``Authenticator``, or by the send stream).
    func markReceipts(_ receipts: API.Receipts, in id: ConversationID, by caller: Caller) async throws {
        _ = try await ConversationActor.resolve(id, using: system).markReceipts(for: caller.id, deliveredSeq: receipts.deliveredSeq, readSeq: receipts.readSeq)
    }

    /// Typing, as `POST …/typing` and the send stream take it.
    func setTyping(_ typing: API.Typing, in id: ConversationID, by caller: Caller) async throws {
        _ = try await ConversationActor.resolve(id, using: system).setTyping(for: caller.id, typing.typing)
    }

    /// Sends through the conversation's owner, retried with the same `clientMessageId` while
    /// the owner cannot take it (``SendRetry``); only once `sendRetryWindow` runs out the client
    /// gets `503`, retryable.
    func sendRetrying(_ message: SendMessage, to conversation: ConversationID) async throws -> SendResult {
        try await Self.retryingSend(within: configuration.sendRetryWindow, clock: system.clock, logger: logger, conversation: conversation) { [system] in
            try await ConversationActor.resolve(conversation, using: system).send(message)
        }
    }

    /// ``SendRetry/send(within:clock:logger:conversation:_:)``, its giving up answered as `503`.
    static func retryingSend<Result>(
        within window: Duration, clock: some ClusterClock, logger: Logger, conversation: ConversationID, _ send: () async throws -> Result
    ) async throws -> Result {
        do {
            return try await SendRetry.send(within: window, clock: clock, logger: logger, conversation: conversation, send)
        } catch let gaveUp as SendRetry.GaveUp {
            throw APIError.unavailable("the conversation's owner did not answer within \(gaveUp.window) (\(gaveUp.last.code)); retry with the same clientMessageId")
        }
    }

    private func history(_ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        let caller = context.caller
        let id = try Self.conversationID(context)
        let actor = try ConversationActor.resolve(id, using: system)
        let query = request.uri.queryParameters
        if query["after"] != nil, query["before"] != nil { throw APIError.invalid("give after or before, not both") }
        let messages: [Message]
        if query["before"] != nil {
            let before = try Self.intParameter(request, "before", default: 0, range: 1...Int.max)
            let limit = try Self.intParameter(request, "limit", default: 50, range: 1...200)
            messages = try await actor.history(for: caller.id, after: nil, before: Int64(before), limit: limit)
        } else {
            let after = try Self.intParameter(request, "after", default: 0, range: 0...Int.max)
            let limit = try Self.intParameter(request, "limit", default: 100, range: 1...200)
            messages = try await actor.history(for: caller.id, after: Int64(after), before: nil, limit: limit)
        }
        return try Self.json(API.Messages(messages: messages))
    }
}
