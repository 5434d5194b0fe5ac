import Foundation
import Logging
import HTTPTypes
import Hummingbird
import Metrics
import NIOCore
import NIOPosix
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyWebClient

/// The caller of an authenticated route.
struct Caller: Sendable {
    var user: User
    var claims: TokenAuthority.Claims
    var id: UserID { user.id }
}

extension Gateway {
    func addRoutes(to router: Router<GatewayContext>) {
        let v1 = router.group("v1")
        // Accounts
        v1.post("users") { request, context in try await self.register(request, context) }
        v1.post("sessions") { request, context in try await self.login(request, context) }
        v1.delete("sessions/current") { request, context in
            let caller = try await self.authenticateWriter(request)
            try await UserActor.resolve(caller.id, using: self.system).revoke(tokenId: caller.claims.tokenId, expiresAt: caller.claims.expiresAt)
            return Response(status: .noContent)
        }
        v1.get("users/me") { request, context in try Self.json(try await self.authenticate(request, fresh: true).user) }
        v1.patch("users/me") { request, context in
            let caller = try await self.authenticateWriter(request)
            let change = try await self.decode(API.ProfileChange.self, from: request)
            return try Self.json(try await UserActor.resolve(caller.id, using: self.system).updateProfile(displayName: change.displayName, avatarURL: change.avatarURL))
        }
        v1.get("users") { request, context in
            _ = try await self.authenticate(request)
            let prefix = String(request.uri.queryParameters["prefix"] ?? "")
            let limit = try Self.intParameter(request, "limit", default: 20, range: 1...100)
            let users = try await AccountDirectory.resolve(handle: "search", using: self.system).search(prefix: prefix, limit: limit)
            return try Self.json(API.Users(users: users))
        }
        v1.get("users/:userId") { request, context in
            _ = try await self.authenticate(request)
            let id = try Self.userID(context.parameters.require("userId"))
            return try Self.json(try await UserActor.resolve(id, using: self.system).user())
        }

        // Devices for push notifications
        v1.post("devices") { request, context in
            let caller = try await self.authenticateWriter(request)
            let body = try await self.decode(API.DeviceRegistration.self, from: request)
            let registered = try await UserActor.resolve(caller.id, using: self.system).registerDevice(try body.newDevice(), tokenId: caller.claims.tokenId)
            return try Self.json(API.DeviceBody(device: registered.device), status: registered.created ? .created : .ok)
        }
        v1.get("devices") { request, context in
            let caller = try await self.authenticate(request)
            return try Self.json(API.Devices(devices: try await UserActor.resolve(caller.id, using: self.system).devices()))
        }
        v1.delete("devices/:id") { request, context in
            let caller = try await self.authenticateWriter(request)
            let id = DeviceID(rawValue: try context.parameters.require("id"))
            try await UserActor.resolve(caller.id, using: self.system).removeDevice(id)
            return Response(status: .noContent)
        }

        addMediaRoutes(to: v1)

        // Conversations
        v1.post("conversations") { request, context in try await self.createConversation(request) }
        v1.get("conversations") { request, context in try await self.listConversations(request) }
        v1.get("conversations/:id") { request, context in
            let caller = try await self.authenticate(request)
            return try Self.json(try await self.conversation(try Self.conversationID(context), for: caller.id))
        }
        v1.patch("conversations/:id") { request, context in
            let caller = try await self.authenticateWriter(request)
            let id = try Self.conversationID(context)
            let rename = try await self.decode(API.Rename.self, from: request)
            let record = try await ConversationActor.resolve(id, using: self.system).rename(rename.name, by: caller.id)
            return try Self.json(API.Conversation(record, for: caller.id))
        }
        v1.put("conversations/:id/settings") { request, context in
            let caller = try await self.authenticateWriter(request)
            let id = try Self.conversationID(context)
            let settings = try await self.decode(API.ConversationSettings.self, from: request)
            let record = try await ConversationActor.resolve(id, using: self.system).setMuted(settings.muted, by: caller.id)
            return try Self.json(API.ConversationSettings(muted: record.isMuted(by: caller.id)))
        }
        v1.post("conversations/:id/members") { request, context in
            let caller = try await self.authenticateWriter(request)
            let id = try Self.conversationID(context)
            let body = try await self.decode(API.NewMembers.self, from: request)
            guard body.userIds.count <= 1000 else { throw APIError.invalid("userIds: at most 1,000") }
            let record = try await ConversationActor.resolve(id, using: self.system).addMembers(body.userIds, by: caller.id)
            return try Self.json(API.Conversation(record, for: caller.id))
        }
        v1.delete("conversations/:id/members/:userId") { request, context in
            let caller = try await self.authenticateWriter(request)
            let id = try Self.conversationID(context)
            let member = try Self.userID(context.parameters.require("userId"))
            try await ConversationActor.resolve(id, using: self.system).removeMember(member, by: caller.id)
            return Response(status: .noContent)
        }

        // Messages, receipts, typing
        v1.post("conversations/:id/messages") { request, context in try await self.send(request, context) }
        v1.get("conversations/:id/messages") { request, context in try await self.history(request, context) }
        v1.put("conversations/:id/messages/:seq/annotations/:key") { request, context in
            let caller = try await self.authenticateWriter(request)
            let id = try Self.conversationID(context)
            guard let seq = Int64(try context.parameters.require("seq")), seq >= 1 else { throw APIError.invalid("seq must be a whole number, at least 1") }
            let key = try context.parameters.require("key")
            let body = try await self.decode(API.AnnotationValue.self, from: request)
            let annotation = try await ConversationActor.resolve(id, using: self.system).annotate(seq: seq, key: key, value: body.value, by: caller.id)
            return try Self.json(API.AnnotationEvent(annotation: annotation))
        }
        v1.post("conversations/:id/receipts") { request, context in
            let caller = try await self.authenticateWriter(request)
            let id = try Self.conversationID(context)
            let body = try await self.decode(API.Receipts.self, from: request)
            _ = try await ConversationActor.resolve(id, using: self.system).markReceipts(for: caller.id, deliveredSeq: body.deliveredSeq, readSeq: body.readSeq)
            return Response(status: .noContent)
        }
        v1.post("conversations/:id/typing") { request, context in
            let caller = try await self.authenticateWriter(request)
            let id = try Self.conversationID(context)
            let body = try await self.decode(API.Typing.self, from: request)
            _ = try await ConversationActor.resolve(id, using: self.system).setTyping(for: caller.id, body.typing)
            return Response(status: .noContent)
        }

        // Presence
        v1.put("presence") { request, context in
            let caller = try await self.authenticateWriter(request)
            let body = try await self.decode(API.PresencePreference.self, from: request)
            guard body.status != .offline else { throw APIError.invalid("status must be online or away") }
            _ = try await PresenceShard.resolve(for: caller.id, using: self.system).setPreference(caller.id, body.status)
            return Response(status: .noContent)
        }
        v1.get("presence") { request, context in try await self.presence(request) }

        // The event stream
        v1.get("events") { request, context in try await self.events(request, context) }

        // Operators' routes, with the admin token
        v1.post("bots") { request, context in
            try self.requireAdmin(request)
            let body = try await self.decode(API.NewBot.self, from: request)
            let user = try await UserActor.resolve(UserID.make(), using: self.system)
                .create(NewUser(handle: body.handle, displayName: body.displayName, passwordHash: NewUser.noPassword, bot: true))
            self.logger.info("bot created", metadata: ["user.id": "\(user.id)"])
            return try self.botSession(user)
        }
        v1.post("bots/:userId/tokens") { request, context in
            try self.requireAdmin(request)
            let id = try Self.userID(context.parameters.require("userId"))
            let user = try await UserActor.resolve(id, using: self.system).user()
            guard user.bot else { throw APIError(.notFound, "not_found", "no bot \(id): people sign in with their password") }
            return try self.botSession(user)
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

        // Health, for load balancers in front of the client port. The cluster view and metrics
        // are served on the operations port only: the client port faces the Internet.
        router.get("healthz") { request, context in Self.text("ok") }
        if configuration.servesWebClient {
            let origins = GatewayConfiguration.origins(of: configuration.gatewayURLs) ?? []
            let policy = WebClient.contentSecurityPolicy(connectingTo: origins.sorted())
            for (path, file) in WebClient.files {
                router.get(RouterPath(path)) { request, context in Self.webClientFile(file, policy: policy, for: request) }
            }
            // What the page needs to know of the cluster: the gateways it may fail over to.
            let settings = WebClient.File(json: WebClient.Settings(gateways: configuration.gatewayURLs))
            router.get("client.json") { request, context in Self.webClientFile(settings, policy: policy, for: request) }
        }
        router.get("readyz") { request, context in
            if self.system.isReady { return Self.text("ready") }
            return Self.text("not ready", status: .serviceUnavailable)
        }
    }

    /// One of the web client's files: revalidated each time by its content hash (`304` while it
    /// is unchanged), under the page's Content-Security-Policy, never framed.
    static func webClientFile(_ file: WebClient.File, policy: String, for request: Request) -> Response {
        let headers: HTTPFields = [
            .contentType: file.contentType,
            .eTag: file.etag,
            .cacheControl: "no-cache",
            .contentSecurityPolicy: policy,
            HTTPField.Name("X-Frame-Options")!: "DENY",
            HTTPField.Name("X-Content-Type-Options")!: "nosniff",
            HTTPField.Name("Referrer-Policy")!: "no-referrer",
        ]
        if matches(request, etag: file.etag) {
            return Response(status: .notModified, headers: headers)
        }
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: file.bytes)))
    }

    // MARK: Accounts

    private func register(_ request: Request, _ context: GatewayContext) async throws -> Response {
        if let wait = registrationByAddress.acquire(context.clientAddress) {
            throw APIError(.tooManyRequests, "rate_limited", "too many registrations from this address; retry later", retryable: true, retryAfterSeconds: Self.seconds(wait))
        }
        let body = try await decode(API.NewUser.self, from: request)
        if let problem = Self.passwordProblem(body.password) { throw APIError.invalid(problem) }
        let unhashed = NewUser(handle: body.handle, displayName: body.displayName, passwordHash: "-")
        try unhashed.validate()  // before spending a bcrypt on it
        let hash = try await hashPassword(body.password)
        let id = UserID.make()
        let user = try await UserActor.resolve(id, using: system).create(NewUser(handle: body.handle, displayName: body.displayName, passwordHash: hash))
        logger.info("user registered", metadata: ["user.id": "\(user.id)"])
        return try Self.json(API.Session(user: user, token: tokens.issue(for: user.id).token), status: .created)
    }

    private func login(_ request: Request, _ context: GatewayContext) async throws -> Response {
        let body = try await decode(API.Credentials.self, from: request)
        if let wait = loginByAddress.acquire(context.clientAddress) {
            throw APIError(.tooManyRequests, "rate_limited", "too many login attempts; retry later", retryable: true, retryAfterSeconds: Self.seconds(wait))
        }
        // What no account can have is refused before it is a limiter's key: the handle's
        // limiter holds only handles (at most 32 bytes), never what a body happened to hold.
        // A handle's form is public, so answering it at once tells nothing of any account.
        guard NewUser.isHandle(body.handle) else { throw APIError.unauthorized("wrong handle or password") }
        if let wait = loginByHandle.acquire(body.handle) {
            throw APIError(.tooManyRequests, "rate_limited", "too many login attempts; retry later", retryable: true, retryAfterSeconds: Self.seconds(wait))
        }
        // A password registration would refuse matches no account: bcrypt would compare only
        // its first 72 bytes, or the bytes before a U+0000.
        guard Self.passwordProblem(body.password) == nil else { throw APIError.unauthorized("wrong handle or password") }
        let login = try await AccountDirectory.resolve(handle: body.handle, using: system).login(handle: body.handle)
        // An unknown handle costs the same bcrypt as a wrong password, and answers the same.
        // A bot has no password: its handle answers as an unknown one, after the same bcrypt.
        let matches = try await verifyPassword(body.password, hash: login.map { $0.user.bot ? decoyHash : $0.passwordHash } ?? decoyHash)
        guard let login, matches, !login.user.bot else { throw APIError.unauthorized("wrong handle or password") }
        return try Self.json(API.Session(user: login.user, token: tokens.issue(for: login.user.id).token))
    }

    /// Why a password cannot be registered, or nil. bcrypt reads at most 72 bytes and stops at a
    /// zero byte, so a longer password, or one holding U+0000, would be accepted by any other
    /// password that shares what bcrypt reads: both are refused rather than cut silently.
    static func passwordProblem(_ password: String) -> String? {
        if password.count < 8 { return "password must be at least 8 characters" }
        if password.utf8.count > 72 { return "password must be at most 72 bytes of UTF-8 (bcrypt reads no more)" }
        if password.utf8.contains(0) { return "password must not contain U+0000" }
        return nil
    }

    private func hashPassword(_ password: String) async throws -> String {
        try await passwords.hash(password)
    }

    private func verifyPassword(_ password: String, hash: String) async throws -> Bool {
        try await passwords.verify(password, hash: hash)
    }

    /// The caller of a request with `Authorization: Bearer <token>`: a valid signature, not
    /// expired, not revoked (asked of the user's actor, or found valid by it within the last
    /// ``UserActor/authenticationLease`` — revocations are pushed to every gateway), else `401`.
    /// `fresh` asks the actor in any case (for the current profile).
    /// A bot's token lasts a year: a service holds it in its configuration, and an operator
    /// issues the next one (`POST /v1/bots/{id}/tokens`) before it runs out.
    static let botTokenLifetime: Duration = .seconds(365 * 24 * 3600)

    /// `201 {user, token}`: a bot and a new token for it.
    func botSession(_ user: User) throws -> Response {
        try Self.json(API.Session(user: user, token: tokens.issue(for: user.id, lifetime: Self.botTokenLifetime).token), status: .created)
    }

    /// Operators' routes: `Authorization: Bearer <admin token>`.
    func requireAdmin(_ request: Request) throws {
        guard let token = configuration.adminToken else {
            throw APIError(.forbidden, "forbidden", "this gateway has no admin token (--admin-token): operators' routes are off")
        }
        guard AdminToken.matches(request.headers[.authorization], token) else { throw APIError.unauthorized("the admin token is required") }
    }

    /// The caller a bearer token names; a read (`GET`, `HEAD`) is counted against the caller's
    /// read limit (`GatewayConfiguration.readRate`), else `429` with `Retry-After`.
    func authenticate(_ request: Request, fresh: Bool = false) async throws -> Caller {
        let caller = try await authenticated(request, fresh: fresh)
        if request.method == .get || request.method == .head, let wait = readLimiter.acquire(caller.id.rawValue) {
            throw APIError(.tooManyRequests, "rate_limited", "too many reads; slow down", retryable: true, retryAfterSeconds: Self.seconds(wait))
        }
        return caller
    }

    private func authenticated(_ request: Request, fresh: Bool) async throws -> Caller {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw APIError.unauthorized("Authorization: Bearer <token> is required")
        }
        // Optional whitespace around the token is spaces and tabs (RFC 9110); trimmed without
        // Foundation's CharacterSet, which bridges through NSString on every request.
        var rest = header.utf8.dropFirst("Bearer ".count)
        while let first = rest.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { rest = rest.dropFirst() }
        while let last = rest.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { rest = rest.dropLast() }
        let token = String(Substring(rest))
        let askedAt = ContinuousClock.now
        // The very text of a token this gateway verified (and the actor found valid) needs
        // neither its signature checked again nor the actor asked, until its lease runs out.
        let wallClock = Date()
        if !fresh, let known = authentication.caller(token: token, now: askedAt, wallClock: wallClock) {
            return Caller(user: known.user, claims: known.claims)
        }
        // A token whose lease ran out has its signature checked only once: the actor is asked again.
        guard let claims = authentication.verifiedClaims(token: token, wallClock: wallClock) ?? tokens.verify(token, now: wallClock) else {
            throw APIError.unauthorized("unknown, expired or revoked token")
        }
        let user = try await UserActor.resolve(claims.userId, using: system).authenticate(tokenId: claims.tokenId)
        authentication.remember(user, claims: claims, token: token, askedAt: askedAt)
        return Caller(user: user, claims: claims)
    }

    /// ``authenticate(_:fresh:)`` for a route that changes something other than by sending a
    /// message (sends have their own limit): each user's such writes are limited
    /// (`GatewayConfiguration.writeRate`), else `429` with `Retry-After`.
    func authenticateWriter(_ request: Request) async throws -> Caller {
        let caller = try await authenticate(request)
        if let wait = writeLimiter.acquire(caller.id.rawValue) {
            throw APIError(.tooManyRequests, "rate_limited", "too many changes; slow down", retryable: true, retryAfterSeconds: Self.seconds(wait))
        }
        return caller
    }

    // MARK: Conversations

    private func createConversation(_ request: Request) async throws -> Response {
        let caller = try await authenticateWriter(request)
        let body = try await decode(API.NewConversation.self, from: request)
        guard body.memberIds.count <= 1000 else { throw APIError.invalid("memberIds: a group has at most 1,000 members") }
        let create = CreateConversation(creatorId: caller.id, memberIds: body.memberIds, name: body.name)
        let others = Set(body.memberIds).subtracting([caller.id])
        let id = create.isDirect ? ConversationActor.directID(caller.id, others.first ?? caller.id) : ConversationID.make()
        let result = try await ConversationActor.resolve(id, using: system).create(create)
        return try Self.json(API.CreatedConversation(conversation: API.Conversation(result.conversation, for: caller.id)), status: result.created ? .created : .ok)
    }

    private func listConversations(_ request: Request) async throws -> Response {
        let caller = try await authenticate(request)
        let limit = try Self.intParameter(request, "limit", default: 50, range: 1...100)
        var cursor: ConversationPageCursor?
        if let text = request.uri.queryParameters["cursor"] {
            guard let parsed = ClientInput.pageCursor(text) else { throw APIError.invalid("cursor is not one this server gave") }
            cursor = parsed
        }
        let page = try await UserActor.resolve(caller.id, using: system).conversations(after: cursor, limit: limit)
        return try Self.json(API.ConversationList(
            conversations: page.conversations.map { API.Conversation($0.conversation, for: caller.id, lastMessage: $0.lastMessage) },
            next: page.next.map(ClientInput.pageCursorToken)))
    }

    /// A conversation as the member sees it, with its last message.
    func conversation(_ id: ConversationID, for user: UserID) async throws -> API.Conversation {
        let actor = try ConversationActor.resolve(id, using: system)
        let record = try await actor.snapshot(for: user)
        let last = record.lastSeq > 0 ? try await actor.messages(for: user, before: record.lastSeq + 1, limit: 1).last : nil
        return API.Conversation(record, for: user, lastMessage: last)
    }

    // MARK: Messages

    private func send(_ request: Request, _ context: GatewayContext) async throws -> Response {
        let caller = try await authenticate(request)
        let id = try Self.conversationID(context)
        let body = try await decode(API.NewMessage.self, from: request, readingFirst: API.NewMessage.fromCanonicalJSON)
        if let wait = sendLimiter.acquire(caller.id.rawValue) {
            throw APIError(.tooManyRequests, "rate_limited", "too many messages; slow down", retryable: true, retryAfterSeconds: Self.seconds(wait))
        }
        var attachments: [Attachment] = []
        if let asked = body.attachments, !asked.isEmpty {
            // A send the owner would refuse records nothing.
            try SendMessage.validate(clientMessageId: body.clientMessageId, text: body.text, captions: asked.map(\.caption), limits: ChatLimits())
            attachments = try await UserActor.resolve(caller.id, using: system).attach(asked, to: id)
        }
        let result = try await sendRetrying(
            SendMessage(senderId: caller.id, clientMessageId: body.clientMessageId, text: body.text, attachments: attachments), to: id)
        // `API.SentMessage`, written directly (DirectJSON: the encoder's bytes without Codable) —
        // the same bytes as a `message` event's data, so encoded once for both.
        let json = result.message.wrappedJSON
        // The sender's own event, if its stream is on this loop, goes out with this response.
        hub.deliverAhead(result.message, json: json, to: caller.id)
        return Self.json(bytes: json, status: result.created ? .created : .ok)
    }

    /// Sends through the conversation's owner. When the owner dies mid-request (lost connection,
    /// no reply, the ring moving), the send is retried with the same `clientMessageId` — it is
    /// the idempotency key, so a send that did commit returns the original — until
    /// `sendRetryWindow` runs out; only then the client gets `503`, retryable.
    func sendRetrying(_ message: SendMessage, to conversation: ConversationID) async throws -> SendResult {
        try await Self.retryingSend(within: configuration.sendRetryWindow, logger: logger, conversation: conversation) { [system] in
            try await ConversationActor.resolve(conversation, using: system).send(message)
        }
    }

    /// `send` until it succeeds, fails with an error that is not a retryable cluster error, or
    /// `window` runs out (then `503`, retryable), pausing 50 ms and doubling up to 500 ms between
    /// attempts.
    static func retryingSend<Result>(
        within window: Duration, logger: Logger, conversation: ConversationID, _ send: () async throws -> Result
    ) async throws -> Result {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: window)
        var pause = Duration.milliseconds(50)
        var attempt = 0
        while true {
            attempt += 1
            do {
                let result = try await send()
                if attempt > 1 {
                    logger.info("send succeeded after retries", metadata: ["conversation.id": "\(conversation)", "attempts": "\(attempt)"])
                }
                return result
            } catch let error as ClusterCallError where retryableSendCodes.contains(error.code.rawValue) {
                guard clock.now.advanced(by: pause) < deadline else {
                    throw APIError.unavailable("the conversation's owner did not answer within \(window) (\(error.code)); retry with the same clientMessageId")
                }
                logger.debug("send failed; retrying on the owner", metadata: ["conversation.id": "\(conversation)", "error": "\(error)"])
                sendRetries.increment()
                try await Task.sleep(for: pause)
                pause = min(pause * 2, .milliseconds(500))
            }
        }
    }

    static let sendRetries = Counter(label: "parley.gateway.send_retries")

    static let retryableSendCodes: Set<String> = [
        ClusterCallError.Code.deadlineExceeded.rawValue, ClusterCallError.Code.notOwner.rawValue,
        ClusterCallError.Code.unavailable.rawValue, ClusterCallError.Code.connectionLost.rawValue,
        ClusterCallError.Code.shutdown.rawValue,
    ]

    private func history(_ request: Request, _ context: GatewayContext) async throws -> Response {
        let caller = try await authenticate(request)
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

    // MARK: Presence

    /// The presence of users who share a conversation with the caller (and the caller's own).
    /// Anyone else is shown as a user never seen is — offline, no last seen — so the route tells
    /// a stranger nothing about who is online, or that an ID exists.
    private func presence(_ request: Request) async throws -> Response {
        let caller = try await authenticate(request)
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

    static func text(_ text: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text + "\n")))
    }

    // MARK: Helpers

    /// The JSON body as `T`: at most the body limit (`413`), valid JSON of the right shape (`400`
    /// naming the field). A route with a reader of its body's common form passes it as `canonical`
    /// (``API/NewMessage/fromCanonicalJSON(_:)``); what that reader leaves goes to `JSONDecoder`.
    func decode<T: Decodable>(
        _ type: T.Type, from request: Request, readingFirst canonical: (ByteBufferView) -> T? = { _ in nil }
    ) async throws -> T {
        var request = request
        let buffer: ByteBuffer
        do {
            buffer = try await request.collectBody(upTo: configuration.bodyLimitBytes)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw APIError(.contentTooLarge, "payload_too_large", "the body is over \(configuration.bodyLimitBytes / 1024) KiB")
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, "payload_too_large", "the body is over \(configuration.bodyLimitBytes / 1024) KiB")
        }
        if let value = canonical(buffer.readableBytesView) { return value }
        do {
            return try Self.decoder.decode(T.self, from: Data(buffer.readableBytesView))
        } catch let error as DecodingError {
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty, let field = Self.fieldWithUnrepresentableNumber(buffer.readableBytesView) {
                throw APIError.invalid("\(field) must be a whole number from \(Int64.min) to \(Int64.max)")
            }
            throw APIError.invalid(Self.describe(error))
        } catch {
            throw APIError.invalid("malformed JSON")
        }
    }

    /// A top-level field of a JSON object body whose number no `Int64` holds (too large, or not
    /// whole): Foundation's decoder reports such a number only as "not valid JSON", without the
    /// field's name.
    static func fieldWithUnrepresentableNumber(_ body: ByteBufferView) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else { return nil }
        for (key, value) in object.sorted(by: { $0.key < $1.key }) {
            guard !(value is Bool), let number = value as? NSNumber else { continue }
            let double = number.doubleValue
            if double.rounded() != double || double >= 9.223372036854775807e18 || double < -9.223372036854775808e18 { return key }
        }
        return nil
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let names = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
            return names.isEmpty ? "the body" : names.joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
        }
        switch error {
        case .keyNotFound(let key, let context):
            let parent = path(context)
            return "\(parent == "the body" ? key.stringValue : "\(parent).\(key.stringValue)") is required"
        case .typeMismatch(let type, let context): return "\(path(context)) must be \(jsonType(type))"
        case .valueNotFound(let type, let context): return "\(path(context)) must be \(jsonType(type)), not null"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "malformed JSON" : "\(path(context)) is invalid: \(context.debugDescription)"
        @unknown default: return "malformed JSON"
        }
    }

    private static func jsonType(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type, is Int64.Type, is Double.Type: "a number"
        case is [Any].Type: "an array"
        default: "\(type)"
        }
    }

    /// One encoder and decoder for every request (both are thread-safe once configured).
    static let encoder = API.makeEncoder()
    static let decoder = API.makeDecoder()

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        json(bytes: try encoder.encode(value), status: status)
    }

    static func json(bytes: some Sequence<UInt8>, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    static func intParameter(_ request: Request, _ name: String, default fallback: Int, range: ClosedRange<Int>) throws -> Int {
        do {
            return try ClientInput.integer(request.uri.queryParameters[Substring(name)], name: name, default: fallback, range: range)
        } catch {
            throw APIError.invalid(error.message)
        }
    }

    static func userID(_ text: String) throws -> UserID {
        guard ClientInput.isPlausibleID(text) else { throw APIError.notFound("user not found") }
        return UserID(rawValue: text)
    }

    static func conversationID(_ context: GatewayContext) throws -> ConversationID {
        let text = try context.parameters.require("id")
        guard ClientInput.isPlausibleID(text) else { throw APIError.notFound("conversation not found") }
        return ConversationID(rawValue: text)
    }

    static func seconds(_ duration: Duration) -> Int {
        max(1, Int(duration.components.seconds) + (duration.components.attoseconds > 0 ? 1 : 0))
    }
}
