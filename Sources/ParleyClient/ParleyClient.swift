import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NIOSSL
import ParleyModel
import Synchronization

/// An error the API answered (API.md's `{"error": {code, message, retryable}}`), or a failure to
/// reach any gateway (`code` `unreachable`, retryable).
public struct ParleyError: Error, Hashable, Sendable, CustomStringConvertible {
    public var status: Int
    public var code: String
    public var message: String
    public var retryable: Bool
    /// From `Retry-After`, when the server gave one.
    public var retryAfter: Duration?

    public init(status: Int, code: String, message: String, retryable: Bool, retryAfter: Duration? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable
        self.retryAfter = retryAfter
    }

    public var description: String { status == 0 ? "\(code): \(message)" : "\(status) \(code): \(message)" }

    static func unreachable(_ message: String) -> ParleyError {
        ParleyError(status: 0, code: "unreachable", message: message, retryable: true)
    }
}

/// The Parley client: the calls a chat app makes (accounts, conversations, messages, receipts,
/// typing, presence), a send outbox that retries with the same `clientMessageId` until the server
/// acknowledges, and ``events(cursor:)``, a stream of events that reconnects across gateways and
/// resumes where it left off.
///
/// One instance per signed-in user; it keeps the token. Call ``shutdown()`` when done.
public final class ParleyClient: Sendable {
    public struct Configuration: Sendable {
        /// Gateway base URLs (`https://host:port`); requests go to the first that answers, and the
        /// event stream moves on to the next when one fails.
        public var gateways: [URL]
        /// A PEM file of the CA that signed the gateways' certificates (nil: the system's roots).
        public var caCertificatePath: String?
        /// How long one request may take.
        public var requestTimeout: Duration = .seconds(15)
        /// How long ``send(_:to:clientMessageId:)`` keeps retrying a retryable failure.
        public var sendRetryWindow: Duration = .seconds(60)
        /// How long a new connection may take before the request moves on to the next gateway.
        /// A dead gateway is refused at once, but the connection pool keeps retrying it until this
        /// runs out, so it is short.
        public var connectTimeout: Duration = .seconds(2)
        /// Sent as `User-Agent`: the server keeps it with each login, so that a user's list of
        /// sessions (``ParleyClient/sessions()``) says which app and device each is. Name the app
        /// and the device, e.g. `Chatty/2.1 (iPhone; iOS 19)`.
        public var userAgent: String? = "ParleyClient"
        /// Whether sends go as lines of the gateway's send stream (`POST /v1/sends`, over HTTP/2)
        /// when it offers one: the gateway spends about a fifth less per message than on a request
        /// each. A gateway without it is sent to by request.
        public var sendsOnStream = true

        public init(gateways: [URL], caCertificatePath: String? = nil) {
            self.gateways = gateways
            self.caCertificatePath = caCertificatePath
        }
    }

    public let configuration: Configuration
    let http: HTTPClient
    private let state: Mutex<State>
    let logger: Logger
    let sendStream: SendStream

    struct State {
        var token: String?
        var user: User?
        /// The gateway requests go to first: the last one that answered.
        var preferredGateway = 0
    }

    public init(configuration: Configuration, token: String? = nil, logger: Logger = Logger(label: "parley.client")) throws {
        guard !configuration.gateways.isEmpty else {
            throw ParleyError(status: 0, code: "invalid_configuration", message: "ParleyClient needs at least one gateway URL", retryable: false)
        }
        var http = HTTPClient.Configuration(tlsConfiguration: Self.tls(trusting: configuration.caCertificatePath))
        http.timeout = .init(connect: TimeAmount(configuration.connectTimeout), read: .seconds(40))
        http.httpVersion = .automatic
        self.http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: http)
        self.sendStream = SendStream(
            tls: Self.tls(trusting: configuration.caCertificatePath), connectTimeout: TimeAmount(configuration.connectTimeout), userAgent: configuration.userAgent,
            logger: logger)
        self.configuration = configuration
        self.state = Mutex(State(token: token))
        self.logger = logger
    }

    public func shutdown() async throws {
        await sendStream.close()
        try await http.shutdown()
    }

    /// The token this client authenticates with (keep it to sign in again without a password).
    public var token: String? { state.withLock { $0.token } }
    /// The signed-in user, once known.
    public var currentUser: User? { state.withLock { $0.user } }

    // MARK: Accounts

    @discardableResult
    public func register(handle: String, password: String, displayName: String) async throws -> User {
        let session: API.Session = try await call(.POST, "/v1/users", body: API.NewUser(handle: handle, password: password, displayName: displayName), authenticated: false)
        state.withLock { $0.token = session.token; $0.user = session.user }
        return session.user
    }

    @discardableResult
    public func login(handle: String, password: String) async throws -> User {
        let session: API.Session = try await call(.POST, "/v1/sessions", body: API.Credentials(handle: handle, password: password), authenticated: false)
        state.withLock { $0.token = session.token; $0.user = session.user }
        return session.user
    }

    /// Revokes this client's token on every gateway.
    public func logout() async throws {
        try await callWithoutResult(.DELETE, "/v1/sessions/current")
        state.withLock { $0.token = nil; $0.user = nil }
    }

    /// This user's sessions (each a login, with the `User-Agent` it came from) that are neither
    /// revoked nor expired, newest first; the one of this client has `current`.
    public func sessions() async throws -> [UserSession] {
        let body: API.Sessions = try await call(.GET, "/v1/sessions")
        return body.sessions
    }

    /// Revokes one of this user's sessions on every gateway (a lost phone's, say).
    public func revokeSession(_ id: String) async throws {
        try await callWithoutResult(.DELETE, "/v1/sessions/\(Self.query(id))")
    }

    /// Changes the password. Every other session of this user is revoked on every gateway before
    /// this returns; this client stays signed in. A wrong `current` throws `403 forbidden`.
    public func changePassword(current: String, new: String) async throws {
        try await callWithoutResult(.PUT, "/v1/users/me/password", body: API.PasswordChange(current: current, new: new))
    }

    /// Blocks a user: no direct messages either way, no pushes of their messages, and neither
    /// sees the other's presence or typing; in effect on every gateway when this returns.
    public func block(_ user: UserID) async throws {
        try await callWithoutResult(.PUT, "/v1/users/me/blocks/\(Self.query(user.rawValue))")
    }

    public func unblock(_ user: UserID) async throws {
        try await callWithoutResult(.DELETE, "/v1/users/me/blocks/\(Self.query(user.rawValue))")
    }

    /// The users this user blocked, newest first.
    public func blocked() async throws -> [BlockedUser] {
        let body: API.Blocks = try await call(.GET, "/v1/users/me/blocks")
        return body.blocks
    }

    /// Reports a user, or one of their messages (`conversation` and `seq`), to the operator. A
    /// retry while the report is open returns the same report.
    public func report(_ user: UserID, in conversation: ConversationID? = nil, seq: Int64? = nil, reason: ReportReason, note: String? = nil) async throws -> Report {
        let body: API.ReportBody = try await call(
            .POST, "/v1/reports", body: API.NewReport(userId: user, conversationId: conversation, seq: seq, reason: reason.rawValue, note: note))
        return body.report
    }

    // MARK: Operators (a client made with the admin token)

    /// A page of reports, oldest first; `next` continues it.
    public func reports(status: ReportStatus? = nil, after: ReportID? = nil, limit: Int = 100) async throws -> API.Reports {
        var query = "status=\(status?.rawValue ?? "any")&limit=\(limit)"
        if let after { query += "&after=\(Self.query(after.rawValue))" }
        return try await call(.GET, "/v1/reports?\(query)")
    }

    public func resolveReport(_ id: ReportID, resolution: String? = nil) async throws -> Report {
        let body: API.ReportBody = try await call(.POST, "/v1/reports/\(Self.query(id.rawValue))/resolve", body: API.ReportResolution(resolution: resolution))
        return body.report
    }

    /// Deletes this account (`password`; a bot gives the operator's `adminToken` instead): when
    /// this returns, it has left every conversation (its messages erased first, with `erase`) and
    /// no token of it works.
    public func deleteAccount(password: String? = nil, adminToken: String? = nil, erase: Bool = false) async throws {
        try await callWithoutResult(.DELETE, "/v1/users/me?erase=\(erase)", body: API.AccountDeletionRequest(password: password, adminToken: adminToken))
    }

    /// An operator erases a message (admin token): it becomes a tombstone for every member.
    public func eraseMessage(_ seq: Int64, in conversation: ConversationID) async throws {
        try await callWithoutResult(.DELETE, "/v1/admin/conversations/\(Self.query(conversation.rawValue))/messages/\(seq)")
    }

    /// Suspends a user (their tokens stop working everywhere before this returns) or lifts it.
    public func setSuspended(_ user: UserID, _ suspended: Bool) async throws {
        try await callWithoutResult(.POST, "/v1/admin/users/\(Self.query(user.rawValue))/\(suspended ? "suspend" : "unsuspend")")
    }

    public func me() async throws -> User {
        let user: User = try await call(.GET, "/v1/users/me")
        state.withLock { $0.user = user }
        return user
    }

    /// Changes what is given: `metadata` replaces the public fields every signed-in user reads,
    /// `privateMetadata` those only this user reads (`Metadata([:])` removes them). Answers the
    /// user as ``me()`` does, private fields included.
    public func updateProfile(
        displayName: String? = nil, avatarURL: String? = nil, metadata: Metadata? = nil, privateMetadata: Metadata? = nil
    ) async throws -> User {
        try await call(
            .PATCH, "/v1/users/me", body: API.ProfileChange(displayName: displayName, avatarURL: avatarURL, metadata: metadata, privateMetadata: privateMetadata))
    }

    /// Makes an image upload of this user's their profile photo (nil: removes it, and any
    /// `avatarURL`). Everyone signed in may download it while it is.
    public func setAvatar(_ media: MediaID?) async throws -> User {
        if let media { return try await call(.PUT, "/v1/users/me/avatar", body: API.PhotoChange(mediaId: media)) }
        return try await call(.DELETE, "/v1/users/me/avatar")
    }

    // MARK: Devices

    /// Registers this device for push notifications as this login's (`topic`: the app's bundle
    /// ID; `environment`: APNs sandbox for development builds). Registering the same token again
    /// returns the same device.
    public func registerDevice(platform: PushPlatform, token: String, topic: String? = nil, environment: APNsEnvironment? = nil) async throws -> Device {
        let body: API.DeviceBody = try await call(
            .POST, "/v1/devices", body: API.DeviceRegistration(platform: platform.rawValue, token: token, topic: topic, environment: environment?.rawValue))
        return body.device
    }

    /// This user's devices, oldest first.
    public func devices() async throws -> [Device] {
        let body: API.Devices = try await call(.GET, "/v1/devices")
        return body.devices
    }

    public func removeDevice(_ id: DeviceID) async throws {
        try await callWithoutResult(.DELETE, "/v1/devices/\(Self.query(id.rawValue))")
    }

    public func searchUsers(prefix: String, limit: Int = 20) async throws -> [User] {
        let users: API.Users = try await call(.GET, "/v1/users?prefix=\(Self.query(prefix))&limit=\(limit)")
        return users.users
    }

    public func user(_ id: UserID) async throws -> User {
        try await call(.GET, "/v1/users/\(Self.query(id.rawValue))")
    }

    /// Up to 100 users in one request (a chat's members, to show their names and photos), in the
    /// order asked; IDs that name nobody are left out.
    public func users(_ ids: [UserID]) async throws -> [User] {
        guard !ids.isEmpty else { return [] }
        let users: API.Users = try await call(.GET, "/v1/users?ids=" + ids.map { Self.query($0.rawValue) }.joined(separator: ","))
        return users.users
    }

    /// The caller's unread messages over every conversation, and in how many: an app icon's badge.
    public func unread() async throws -> UnreadCount {
        try await call(.GET, "/v1/users/me/unread")
    }

    // MARK: Conversations

    /// A direct conversation with one other user and no name (the existing one if any), else a group.
    public func createConversation(with members: [UserID], name: String? = nil) async throws -> API.Conversation {
        let created: API.CreatedConversation = try await call(.POST, "/v1/conversations", body: API.NewConversation(memberIds: members, name: name))
        return created.conversation
    }

    /// One page of conversations, newest activity first; pass `next` back for the following page.
    public func conversations(limit: Int = 50, cursor: String? = nil) async throws -> API.ConversationList {
        try await call(.GET, "/v1/conversations?limit=\(limit)" + (cursor.map { "&cursor=\(Self.query($0))" } ?? ""))
    }

    public func conversation(_ id: ConversationID) async throws -> API.Conversation {
        try await call(.GET, "/v1/conversations/\(Self.query(id.rawValue))")
    }

    public func rename(_ id: ConversationID, to name: String) async throws -> API.Conversation {
        try await call(.PATCH, "/v1/conversations/\(Self.query(id.rawValue))", body: API.Rename(name: name))
    }

    /// Replaces the conversation's app fields (`Metadata([:])` removes them): a group's owner,
    /// either member of a direct conversation.
    public func setMetadata(_ metadata: Metadata, of id: ConversationID) async throws -> API.Conversation {
        try await call(.PATCH, "/v1/conversations/\(Self.query(id.rawValue))", body: API.Rename(metadata: metadata))
    }

    /// Replaces this member's own fields for the conversation (a translation language), which
    /// only they and the conversation's bots read.
    public func setMemberMetadata(_ metadata: Metadata, in id: ConversationID) async throws -> API.ConversationSettings {
        try await call(.PUT, "/v1/conversations/\(Self.query(id.rawValue))/settings", body: API.ConversationSettings(metadata: metadata))
    }

    /// Makes an image upload of this user's the group's photo (nil: removes it); its owner only.
    public func setPhoto(_ media: MediaID?, of id: ConversationID) async throws -> API.Conversation {
        let path = "/v1/conversations/\(Self.query(id.rawValue))/photo"
        if let media { return try await call(.PUT, path, body: API.PhotoChange(mediaId: media)) }
        return try await call(.DELETE, path)
    }

    /// Mutes a conversation (no push notifications for its messages on this user's devices) or unmutes it.
    public func setMuted(_ muted: Bool, in id: ConversationID) async throws -> API.ConversationSettings {
        try await call(.PUT, "/v1/conversations/\(Self.query(id.rawValue))/settings", body: API.ConversationSettings(muted: muted))
    }

    /// A bot's note `key` on message `seq` (bots only; a person's token is `403`).
    public func annotate(_ seq: Int64, in id: ConversationID, key: String, value: String) async throws -> Annotation {
        let reply: API.AnnotationEvent = try await call(
            .PUT, "/v1/conversations/\(Self.query(id.rawValue))/messages/\(seq)/annotations/\(Self.query(key))", body: API.AnnotationValue(value: value))
        return reply.annotation
    }

    public func addMembers(_ users: [UserID], to id: ConversationID) async throws -> API.Conversation {
        try await call(.POST, "/v1/conversations/\(Self.query(id.rawValue))/members", body: API.NewMembers(userIds: users))
    }

    public func removeMember(_ user: UserID, from id: ConversationID) async throws {
        try await callWithoutResult(.DELETE, "/v1/conversations/\(Self.query(id.rawValue))/members/\(Self.query(user.rawValue))")
    }

    // MARK: Messages

    /// Sends a message through the outbox: a retryable failure (a gateway or owner that died, a
    /// rate limit, no network) is retried with the **same** `clientMessageId`, so the message is
    /// stored once however many attempts it takes; it returns once the server acknowledged it
    /// (durable), or throws a non-retryable error, or after `sendRetryWindow`. `replyTo` is the
    /// seq of the message it replies to; `mentions` the members it mentions (they are notified
    /// even when they muted the conversation); `metadata` the app's own fields, kept with the
    /// message as they are (a voice note's duration).
    public func send(
        _ text: String, attachments: [API.NewAttachment]? = nil, replyTo: Int64? = nil, mentions: [UserID]? = nil, metadata: Metadata? = nil,
        to conversation: ConversationID, clientMessageId: String = ClientMessageID.make()
    ) async throws -> Message {
        try await retrying("send", key: clientMessageId) {
            try await post(API.NewMessage(clientMessageId: clientMessageId, text: text, attachments: attachments, replyTo: replyTo, mentions: mentions, metadata: metadata), to: conversation)
        }
    }

    /// One attempt at sending: the outboxes (this one's and ``OfflineClient``'s) retry it. On the
    /// send stream when the gateway offers one (``Configuration/sendsOnStream``), else by request.
    func post(_ message: API.NewMessage, to conversation: ConversationID) async throws -> Message {
        if configuration.sendsOnStream, let token {
            let gateway = state.withLock { configuration.gateways[$0.preferredGateway % configuration.gateways.count] }
            let answer: API.StreamedAnswer?
            do {
                answer = try await sendStream.send(
                    API.StreamedCommand(conversationId: conversation, .message(message)), to: gateway, token: token, timeout: configuration.requestTimeout)
            } catch let error as ParleyError where error.code == "unreachable" {
                // The stream ended before its answer: the next attempt goes to the next gateway.
                state.withLock { if configuration.gateways[$0.preferredGateway % configuration.gateways.count] == gateway { $0.preferredGateway += 1 } }
                throw error
            }
            if let answer { return try answer.acknowledged() }
        }
        let sent: API.SentMessage = try await call(.POST, "/v1/conversations/\(Self.query(conversation.rawValue))/messages", body: message)
        return sent.message
    }

    /// Runs `attempt` again after a retryable failure, with backoff, for up to
    /// `sendRetryWindow`: each attempt carries the same idempotency `key`, so the server applies
    /// it once however many attempts it takes.
    private func retrying<Result>(_ what: String, key: String, _ attempt: () async throws -> Result) async throws -> Result {
        try await retrying(what, key: key, within: configuration.sendRetryWindow, attempt)
    }

    /// Runs `attempt` again after a retryable failure, with backoff, for up to `window` (nil:
    /// until it answers, or the task is cancelled). A write's attempts carry one idempotency `key`.
    func retrying<Result>(_ what: String, key: String? = nil, within window: Duration?, _ attempt: () async throws -> Result) async throws -> Result {
        let clock = ContinuousClock()
        let deadline = window.map { clock.now.advanced(by: $0) }
        let backoff = Backoff(first: .milliseconds(100), max: .seconds(2))
        var failures = 0
        while true {
            do {
                return try await attempt()
            } catch let error as ParleyError where error.retryable {
                failures += 1
                let wait = backoff.delay(afterFailures: failures, atLeast: error.retryAfter)
                if let deadline, clock.now.advanced(by: wait) >= deadline { throw error }
                logger.debug("\(what) failed; retrying", metadata: ["error": "\(error)", "key": "\(key ?? "-")"])
                try await Task.sleep(for: wait)
            }
        }
    }

    // MARK: Changing messages

    /// Replaces the text of a message of the caller's (within the server's edit window); retried
    /// like a send, with the same `clientChangeId`, so the edit is applied once. Returns the
    /// message as edited.
    public func edit(
        _ seq: Int64, in conversation: ConversationID, text: String, clientChangeId: String = ClientMessageID.make()
    ) async throws -> Message {
        try await retrying("edit", key: clientChangeId) {
            let edited: API.SentMessage = try await call(
                .PATCH, "/v1/conversations/\(Self.query(conversation.rawValue))/messages/\(seq)",
                body: API.MessageEdit(clientChangeId: clientChangeId, text: text))
            return edited.message
        }
    }

    /// Deletes a message for everyone (the caller's, or any in a group the caller owns): returns
    /// its tombstone. Deleting it again answers the same.
    public func deleteMessage(_ seq: Int64, in conversation: ConversationID) async throws -> Message {
        let deleted: API.SentMessage = try await call(.DELETE, "/v1/conversations/\(Self.query(conversation.rawValue))/messages/\(seq)")
        return deleted.message
    }

    /// Adds the caller's `emoji` to a message (`adding`), or takes it back; returns the message's
    /// reactions after. Either is idempotent.
    public func react(_ emoji: String, to seq: Int64, in conversation: ConversationID, adding: Bool = true) async throws -> [Reaction] {
        let body: API.Reactions = try await call(
            adding ? .PUT : .DELETE, "/v1/conversations/\(Self.query(conversation.rawValue))/messages/\(seq)/reactions/\(Self.query(emoji))")
        return body.reactions
    }

    /// Pins a message (`pinning`) or unpins it: a group's owner may, and either member of a direct
    /// conversation. Returns the conversation's pinned seqs after, the most recently pinned first.
    public func pin(_ seq: Int64, in conversation: ConversationID, pinning: Bool = true) async throws -> [Int64] {
        let body: API.Pinned = try await call(pinning ? .PUT : .DELETE, "/v1/conversations/\(Self.query(conversation.rawValue))/messages/\(seq)/pin")
        return body.pinned
    }

    /// The replies to message `seq` with seqs after `after`, ascending.
    public func replies(to seq: Int64, in conversation: ConversationID, after: Int64 = 0, limit: Int = 50) async throws -> [Message] {
        let page: API.Messages = try await call(
            .GET, "/v1/conversations/\(Self.query(conversation.rawValue))/messages/\(seq)/replies?after=\(after)&limit=\(limit)")
        return page.messages
    }

    /// The messages that mention the caller, newest first; pass a page's `next` as `before` for
    /// the one after it.
    public func mentions(before: String? = nil, limit: Int = 50) async throws -> API.Mentions {
        try await call(.GET, "/v1/mentions?limit=\(limit)" + (before.map { "&before=\(Self.query($0))" } ?? ""))
    }

    /// This user's messages that hold every word of `query`, the best matches first, each with a
    /// snippet around its first match; within `conversation` only when given. Pass `next` as
    /// `cursor` for more.
    public func search(_ query: String, in conversation: ConversationID? = nil, limit: Int = 20, cursor: String? = nil) async throws -> API.SearchResults {
        try await call(
            .GET, "/v1/search?q=\(Self.query(query))&limit=\(limit)" + (conversation.map { "&conversationId=\(Self.query($0.rawValue))" } ?? "")
                + (cursor.map { "&cursor=\(Self.query($0))" } ?? ""))
    }

    /// The texts a message has had, oldest first, the current one last.
    public func versions(of seq: Int64, in conversation: ConversationID) async throws -> [MessageVersion] {
        let body: API.MessageVersions = try await call(.GET, "/v1/conversations/\(Self.query(conversation.rawValue))/messages/\(seq)/versions")
        return body.versions
    }

    // MARK: Media

    /// Uploads a file (`POST /v1/media`), read from disk as it is sent, never whole in memory;
    /// `progress` is told the bytes sent so far and the file's size. Its first bytes must be what
    /// `contentType` says (``MediaSniffing/contentType(of:)`` tells). Attach what it answers to a
    /// message with ``send(_:attachments:to:clientMessageId:)``. Not retried: an upload that
    /// failed is simply made again.
    public func upload(file: URL, contentType: String, progress: (@Sendable (_ sent: Int64, _ size: Int64) -> Void)? = nil) async throws -> Media {
        let size = try (FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.int64Value ?? 0
        let data = try await perform(.POST, "/v1/media", authenticated: true) { request in
            request.headers.add(name: "Content-Type", value: contentType)
            let chunks = try FileChunks(url: file, size: size, progress: progress)
            request.body = .stream(chunks, length: .known(size))
        }
        do {
            return try API.makeDecoder().decode(API.MediaBody.self, from: data).media
        } catch {
            throw ParleyError(status: 200, code: "invalid_response", message: "the server's answer did not decode: \(error)", retryable: false)
        }
    }

    /// An upload's bytes (`GET /v1/media/{id}`), for its uploader and the members of the
    /// conversations it was sent to, written to `destination`.
    public func download(_ id: MediaID, to destination: URL) async throws {
        let data = try await perform(.GET, "/v1/media/\(Self.query(id.rawValue))", authenticated: true, limit: 1 << 30) { _ in }
        try data.write(to: destination)
    }

    /// The user's data (`GET /v1/users/me/export`: profile, devices, blocks, conversations and
    /// every message they sent), as the JSON document the server writes, into `destination`.
    public func exportData(to destination: URL) async throws {
        let data = try await perform(.GET, "/v1/users/me/export", authenticated: true, limit: 1 << 30) { _ in }
        try data.write(to: destination)
    }

    /// Messages with `seq > after`, ascending.
    public func messages(in conversation: ConversationID, after seq: Int64 = 0, limit: Int = 100) async throws -> [Message] {
        let page: API.Messages = try await call(.GET, "/v1/conversations/\(Self.query(conversation.rawValue))/messages?after=\(seq)&limit=\(limit)")
        return page.messages
    }

    /// The last `limit` messages before `seq`, ascending (history scrolling).
    public func messages(in conversation: ConversationID, before seq: Int64, limit: Int = 50) async throws -> [Message] {
        let page: API.Messages = try await call(.GET, "/v1/conversations/\(Self.query(conversation.rawValue))/messages?before=\(seq)&limit=\(limit)")
        return page.messages
    }

    public func markDelivered(_ seq: Int64, in conversation: ConversationID) async throws {
        try await callWithoutResult(.POST, "/v1/conversations/\(Self.query(conversation.rawValue))/receipts", body: API.Receipts(deliveredSeq: seq))
    }

    public func markRead(_ seq: Int64, in conversation: ConversationID) async throws {
        try await callWithoutResult(.POST, "/v1/conversations/\(Self.query(conversation.rawValue))/receipts", body: API.Receipts(readSeq: seq))
    }

    public func setTyping(_ typing: Bool, in conversation: ConversationID) async throws {
        try await callWithoutResult(.POST, "/v1/conversations/\(Self.query(conversation.rawValue))/typing", body: API.Typing(typing: typing))
    }

    // MARK: Presence

    /// `online` or `away` (shown while an event stream is open).
    public func setPresence(_ status: PresenceStatus) async throws {
        try await callWithoutResult(.PUT, "/v1/presence", body: API.PresencePreference(status: status))
    }

    public func presence(of users: [UserID]) async throws -> [Presence] {
        let found: API.Presences = try await call(.GET, "/v1/presence?userIds=\(users.map { Self.query($0.rawValue) }.joined(separator: ","))")
        return found.presence
    }

    // MARK: Transport

    struct Empty: Codable {}

    func call<Result: Decodable>(_ method: HTTPMethod, _ path: String, authenticated: Bool = true) async throws -> Result {
        try await call(method, path, body: Optional<Empty>.none, authenticated: authenticated)
    }

    func callWithoutResult(_ method: HTTPMethod, _ path: String, body: (some Encodable & Sendable)? = Optional<Empty>.none) async throws {
        _ = try await perform(method, path, body: body, authenticated: true)
    }

    func call<Result: Decodable>(_ method: HTTPMethod, _ path: String, body: (some Encodable & Sendable)?, authenticated: Bool = true) async throws -> Result {
        let data = try await perform(method, path, body: body, authenticated: authenticated)
        do {
            return try API.makeDecoder().decode(Result.self, from: data)
        } catch {
            throw ParleyError(status: 200, code: "invalid_response", message: "the server's answer did not decode: \(error)", retryable: false)
        }
    }

    /// One request, on the preferred gateway, then on each other one if a gateway cannot be
    /// reached. A request that reached a gateway is not repeated here (only ``send`` retries, and
    /// it is idempotent).
    private func perform(_ method: HTTPMethod, _ path: String, body: (some Encodable & Sendable)?, authenticated: Bool) async throws -> Data {
        let encoded = try body.map { try API.makeEncoder().encode($0) }
        return try await perform(method, path, authenticated: authenticated) { request in
            if let encoded {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(data: encoded))
            }
        }
    }

    /// ``perform(_:_:body:authenticated:)`` with the request's body made by `prepare`, once for each
    /// gateway tried.
    private func perform(
        _ method: HTTPMethod, _ path: String, authenticated: Bool, limit: Int = 16 * 1024 * 1024, prepare: (inout HTTPClientRequest) throws -> Void
    ) async throws -> Data {
        let (token, first) = state.withLock { ($0.token, $0.preferredGateway) }
        if authenticated, token == nil { throw ParleyError(status: 401, code: "unauthorized", message: "not signed in", retryable: false) }
        var lastFailure = ParleyError.unreachable("no gateway")
        for offset in 0..<configuration.gateways.count {
            let index = (first + offset) % configuration.gateways.count
            var request = HTTPClientRequest(url: configuration.gateways[index].absoluteString + path)
            request.method = method
            try prepare(&request)
            if authenticated, let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
            if let userAgent = configuration.userAgent { request.headers.replaceOrAdd(name: "User-Agent", value: userAgent) }
            let response: HTTPClientResponse
            do {
                response = try await http.execute(request, timeout: .init(configuration.requestTimeout))
            } catch {
                lastFailure = .unreachable("\(configuration.gateways[index]): \(error)")
                continue
            }
            state.withLock { $0.preferredGateway = index }
            let bytes = try await response.body.collect(upTo: limit)
            let data = Data(buffer: bytes)
            guard (200..<300).contains(Int(response.status.code)) else {
                throw Self.error(status: Int(response.status.code), headers: response.headers, body: data)
            }
            return data
        }
        throw lastFailure
    }

    static func error(status: Int, headers: HTTPHeaders, body: Data) -> ParleyError {
        let retryAfter = headers.first(name: "Retry-After").flatMap(Int.init).map { Duration.seconds($0) }
        if let decoded = try? API.makeDecoder().decode(API.ErrorBody.self, from: body) {
            return ParleyError(status: status, code: decoded.error.code, message: decoded.error.message, retryable: decoded.error.retryable || status == 429, retryAfter: retryAfter)
        }
        return ParleyError(status: status, code: "http_\(status)", message: String(decoding: body.prefix(200), as: UTF8.self), retryable: status >= 500, retryAfter: retryAfter)
    }

    static func query(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? text
    }
}

extension TimeAmount {
    init(_ duration: Duration) {
        self = .nanoseconds(Int64(duration.components.seconds) * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
    }
}

extension ParleyClient {
    /// TLS that trusts the given CA (PEM), or the system's roots.
    /// The client TLS configuration this library uses: the system's roots, or only `caCertificatePath`.
    public static func tls(trusting caCertificatePath: String?) -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caCertificatePath { tls.trustRoots = .file(caCertificatePath) }
        return tls
    }

    /// A plain GET of a text resource (e.g. a gateway's `/metrics`), trusting `caCertificatePath`.
    public static func fetchText(_ url: URL, caCertificatePath: String?) async throws -> String {
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: tls(trusting: caCertificatePath)))
        do {
            let response = try await http.execute(HTTPClientRequest(url: url.absoluteString), timeout: .seconds(10))
            let body = try await response.body.collect(upTo: 16 * 1024 * 1024)
            try await http.shutdown()
            guard response.status == .ok else { throw ParleyError(status: Int(response.status.code), code: "http_\(response.status.code)", message: url.absoluteString, retryable: false) }
            return String(buffer: body)
        } catch {
            try? await http.shutdown()
            throw error
        }
    }
}

extension ClientMessageID {
    /// A new time-ordered client message ID from the system clock and random source.
    public static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        return make(now: Date(), using: &generator)
    }
}

/// A file's bytes as an upload's body, 64 KiB at a time, read as they are sent.
struct FileChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let url: URL
    let size: Int64
    let progress: (@Sendable (Int64, Int64) -> Void)?

    init(url: URL, size: Int64, progress: (@Sendable (Int64, Int64) -> Void)?) throws {
        guard FileManager.default.isReadableFile(atPath: url.path) else {
            throw ParleyError(status: 0, code: "unreadable_file", message: "\(url.path) cannot be read", retryable: false)
        }
        self.url = url
        self.size = size
        self.progress = progress
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let handle: FileHandle?
        let size: Int64
        let progress: (@Sendable (Int64, Int64) -> Void)?
        var sent: Int64 = 0

        mutating func next() async throws -> ByteBuffer? {
            guard let handle, sent < size else {
                try? handle?.close()
                return nil
            }
            guard let data = try handle.read(upToCount: 64 * 1024), !data.isEmpty else {
                throw ParleyError(status: 0, code: "unreadable_file", message: "the file ended after \(sent) of its \(size) bytes", retryable: false)
            }
            sent += Int64(data.count)
            progress?(sent, size)
            return ByteBuffer(data: data)
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(handle: try? FileHandle(forReadingFrom: url), size: size, progress: progress)
    }
}
