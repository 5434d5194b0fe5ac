import Distributed
import Foundation
import Logging
import Metrics
import ParleyCluster
import ParleyModel
import ParleyStore

/// One user: the profile, and the user's conversations newest activity first with unread counts.
/// Virtual, placed by the ring on the user's ID; loaded from the store on the first call.
public distributed actor UserActor {
    public typealias ActorSystem = ClusterSystem

    public static let kind = "user"

    /// Nil until the user exists (an ID activated before ``create(_:)``).
    private var profile: User?
    /// The user's private fields once read (nil: not read yet; `.some(nil)`: none): `GET
    /// /v1/users/me` is a hot route, served from here after its first store read.
    private var privateFields: Metadata??
    /// Registrations under way: an empty actor is not let go while one is.
    private var creating = 0
    let services: ChatServices
    /// Token IDs checked against the store. A revocation goes through this actor, so the cache
    /// is never stale; a new owner after a ring change starts empty.
    private var tokens: [String: TokenState] = [:]
    /// The password's hash and when it last changed (nil: never), as the store has them.
    private var password: (hash: String, changedAt: Date?)?
    /// Since when an operator suspended this user; nil: not suspended.
    private var suspendedAt: Date?
    /// The account's deletion, once asked for: from then on no token of it works.
    private var deletion: AccountDeletion?
    /// The deletion running now, which another request for it (or the safety desk's sweep) waits for.
    private var deleting: Task<AccountDeletion, any Error>?

    enum TokenState {
        case revoked
        /// Valid, with the last use its session has in the store.
        case session(lastUsedAt: Date)
        /// Valid, issued before sessions were recorded: no session to touch.
        case unrecorded
    }

    public static func resolve(_ user: UserID, using system: ClusterSystem) throws -> UserActor {
        try resolve(id: ClusterActorID(kind: kind, key: user.rawValue), using: system)
    }

    public static func register(on system: ClusterSystem, services: ChatServices) {
        system.register(kind: kind) { id, system in
            let stored: StoredUser?
            do {
                stored = try await services.store.user(id: UserID(rawValue: id.key))
            } catch let error as ChatStoreError {
                throw ChatError(.unavailable, "cannot load user: \(error)")
            }
            return UserActor(stored: stored, services: services, actorSystem: system)
        }
        // Token checks, on the path of a send whose token a gateway does not remember, run
        // without the runtime's lookup of the method.
        system.registerDirect(authenticateTarget, of: UserActor.self) { user, tokenId in try await user.authenticate(tokenId: tokenId) }
    }

    /// ``authenticate(tokenId:)``'s name on the cluster (its distributed thunk's mangled name; a
    /// test checks it against a real call).
    public static let authenticateTarget = "$s10ParleyChat9UserActorC12authenticate7tokenId0A5Model0C0VSS_tYaKFTE"

    init(stored: StoredUser?, services: ChatServices, actorSystem: ClusterSystem) {
        self.actorSystem = actorSystem
        self.profile = stored?.user
        self.password = stored.map { ($0.passwordHash, $0.passwordChangedAt) }
        self.suspendedAt = stored?.suspendedAt
        self.deletion = stored?.deletion
        self.services = services
    }

    /// Registers this user (the actor's ID is the user's ID). Throws `conflict` for a taken handle.
    public distributed func create(_ request: NewUser) async throws -> User {
        guard profile == nil else { throw ChatError(.conflict, "user exists") }
        try request.validate()
        creating += 1
        defer { creating -= 1 }
        let user = User(
            id: UserID(rawValue: id.key), handle: request.handle, displayName: request.displayName, createdAt: actorSystem.clock.wallNow.millisecondPrecision,
            bot: request.bot)
        do {
            let quarantineEnded = actorSystem.clock.wallNow.addingTimeInterval(-services.limits.handleQuarantine.seconds)
            try await services.store.createUser(StoredUser(user: user, passwordHash: request.passwordHash), reclaimingHandlesDeletedBefore: quarantineEnded)
        } catch let error as ChatStoreError where error.kind == .conflict {
            throw ChatError(.conflict, "handle \(request.handle) is taken")
        } catch let error as ChatStoreError {
            throw ChatError(.unavailable, "the store is unavailable: \(error.message)")
        }
        profile = user
        password = (request.passwordHash, nil)
        return user
    }

    public distributed func user() throws -> User {
        try requireProfile()
    }

    /// This user, or `not_found` — and an actor for an ID that names no user (and is not being
    /// registered) goes at once: asking about random IDs holds no memory.
    @discardableResult
    private func requireProfile() throws(ChatError) -> User {
        guard let profile else {
            if creating == 0 { actorSystem.passivate(self) }
            throw ChatError(.notFound, "user not found")
        }
        return profile
    }

    /// `GET /v1/users/me`: this user as only they see it, with their private fields.
    public distributed func me() async throws -> User {
        var me = try requireProfile()
        guard me.deleted != true else { return me }
        if privateFields == nil {
            let id = me.id
            privateFields = .some(try await services.withStore { try await $0.privateMetadata(of: id) })
        }
        me.privateMetadata = privateFields ?? nil
        return me
    }

    /// `PATCH /v1/users/me`: changes what is given; answers the user as ``me()`` does.
    public distributed func updateProfile(
        displayName: String?, avatarURL: String?, metadata: Metadata? = nil, privateMetadata: Metadata? = nil
    ) async throws -> User {
        try requireProfile()
        try metadata?.validate(field: "metadata")
        try privateMetadata?.validate(field: "privateMetadata")
        if let displayName {
            guard (1...64).contains(displayName.count) else { throw ChatError(.invalidRequest, "displayName must be 1–64 characters") }
            try StoredText.require(displayName, field: "displayName")
        }
        if let avatarURL {
            // https only: apps load it, and a `javascript:`, `file:` or plain `http:` URL is not
            // something another user's app should be handed.
            guard avatarURL.utf8.count <= 2048, let url = URL(string: avatarURL), url.scheme?.lowercased() == "https", url.host?.isEmpty == false
            else { throw ChatError(.invalidRequest, "avatarURL must be an https URL of at most 2,048 bytes") }
            try StoredText.require(avatarURL, field: "avatarURL")
        }
        let (me, at) = (UserID(rawValue: id.key), actorSystem.clock.wallNow)
        let updated = try await services.withStore {
            try await $0.updateProfile(of: me, displayName: displayName, avatarURL: avatarURL, metadata: metadata, privateMetadata: privateMetadata, at: at)
        }
        guard let updated else { throw ChatError(.notFound, "user not found") }
        if let privateMetadata { privateFields = .some(privateMetadata.orNilWhenEmpty) }
        if displayName != nil || avatarURL != nil || metadata != nil {
            profileChanged(to: updated)
        } else {
            profile = updated
        }
        return try await self.me()
    }

    /// `PUT /v1/users/me/avatar` (or `DELETE`, nil): an image upload of this user's becomes their
    /// profile photo, which every signed-in user may download while it is; `avatarURL` goes.
    public distributed func setAvatar(_ media: MediaID?) async throws -> User {
        let before = try requireProfile()
        guard before.avatar?.id != media || before.avatarURL != nil else { return before }
        let me = UserID(rawValue: id.key)
        let notYours = ChatError(.invalidRequest, "mediaId: \(media?.rawValue ?? "") is not an image upload of yours")
        if let media {
            guard let stored = try await services.withStore({ try await $0.media(media) }), stored.uploaderId == me, stored.media.isImage else {
                throw notYours
            }
        }
        let at = actorSystem.clock.wallNow
        let updated: User?
        do {
            updated = try await services.store.setAvatar(of: me, to: media, at: at)
        } catch let error as ChatStoreError where error.kind == .notFound {
            throw notYours  // the sweeper removed it meanwhile (a day old, never attached)
        } catch let error as ChatStoreError {
            throw ChatError(.unavailable, "the store is unavailable: \(error.message)")
        }
        guard let updated else { throw ChatError(.notFound, "user not found") }
        profileChanged(to: updated)
        return updated
    }

    /// The profile changed: this user's streams and those of everyone who shares a conversation
    /// with them hear of it (live), and webhooks get `user.updated`. Nothing waits for either.
    private func profileChanged(to updated: User) {
        profile = updated
        let system = actorSystem
        let me = updated.id
        let tellWebhooks = services.webhooks?.endpoints.contains { $0.types.contains(.userUpdated) } == true
        Task { [weak self] in
            if tellWebhooks {
                do {
                    try await SafetyDesk.resolve(using: system).profilesChanged()
                } catch {
                    system.logger.info("user.updated not handed to the desk now; its next sweep delivers it", metadata: ["user.id": "\(me)", "error": "\(error)"])
                }
            }
            guard let contacts = try? await self?.contacts() else { return }
            await PresenceShard.tell(contacts + [me], .user(updated), using: system)
        }
    }

    /// One page of this user's conversations, newest activity first, each with the user's unread
    /// count and its last message; `next` continues the list.
    public distributed func conversations(after cursor: ConversationPageCursor?, limit: Int) async throws -> ConversationPage {
        try requireProfile()
        guard (1...100).contains(limit) else { throw ChatError(.invalidRequest, "limit must be 1–100") }
        let me = UserID(rawValue: id.key)
        do {
            let records = try await services.store.conversations(of: me, after: cursor, limit: limit)
            let last = try await services.store.lastMessages(in: records.map(\.id))
            let items = records.map { record in
                ConversationSummary(conversation: record, unreadCount: record.lastSeq - (record.member(me)?.readSeq ?? 0), lastMessage: last[record.id])
            }
            let next = records.count == limit ? records.last.map { ConversationPageCursor(lastActivityAt: $0.lastActivityAt, id: $0.id) } : nil
            return ConversationPage(conversations: items, next: next)
        } catch let error as ChatStoreError {
            throw ChatError(.unavailable, "the store is unavailable: \(error.message)")
        }
    }

    /// `GET /v1/users/me/unread`: this user's unread messages over every conversation, and in how
    /// many, as a push notification's badge counts them.
    public distributed func unread() async throws -> UnreadCount {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        return try await services.withStore { try await $0.unread(of: me) }
    }

    /// `GET /v1/mentions`: a page of the messages that mention this user, newest first, from
    /// before `cursor` (a `next` this answered before).
    public distributed func mentions(before cursor: String?, limit: Int) async throws -> API.Mentions {
        try requireProfile()
        guard (1...100).contains(limit) else { throw ChatError(.invalidRequest, "limit must be 1–100") }
        var position: MentionPosition?
        if let cursor {
            guard let parsed = ThreadRows.mentionPosition(cursor) else { throw ChatError(.invalidRequest, "before is not a cursor this server gave") }
            position = parsed
        }
        let me = UserID(rawValue: id.key)
        let messages = try await markingHeldReactions(try await services.withStore { try await $0.mentions(of: me, before: position, limit: limit) })
        return API.Mentions(mentions: messages, next: messages.count == limit ? messages.last.map(ThreadRows.mentionCursor(after:)) : nil)
    }

    /// How deep a search pages, and how many of the newest matches are ranked: past this many, a
    /// more precise query is the answer.
    public static let searchResultsMax = 1_000

    /// `GET /v1/search`: this user's messages in the conversations they are in now (or in
    /// `conversation`, a member's only) that hold every word of `query`, the best matches first,
    /// each with a snippet around its first match.
    public distributed func search(_ query: String, in conversation: ConversationID?, cursor: String?, limit: Int) async throws -> API.SearchResults {
        try requireProfile()
        guard (1...50).contains(limit) else { throw ChatError(.invalidRequest, "limit must be 1–50") }
        guard query.unicodeScalars.count <= 256 else { throw ChatError(.invalidRequest, "q must be at most 256 characters") }
        let terms = SearchText.terms(of: query)
        guard !terms.isEmpty else { throw ChatError(.invalidRequest, "q has no words to search for") }
        var offset = 0
        if let cursor {
            guard let parsed = Int(cursor), (0..<Self.searchResultsMax).contains(parsed) else {
                throw ChatError(.invalidRequest, "cursor is not one this server gave")
            }
            offset = parsed
        }
        let me = UserID(rawValue: id.key)
        if let conversation {
            guard try await services.withStore({ try await $0.conversation(conversation) })?.member(me) != nil else {
                throw ChatError(.notFound, "conversation not found")
            }
        }
        let count = min(limit, Self.searchResultsMax - offset)
        let found = try await markingHeldReactions(
            try await services.withStore { try await $0.searchMessages(of: me, terms: terms, in: conversation, window: Self.searchResultsMax, offset: offset, limit: count) })
        let next = found.count == count && offset + count < Self.searchResultsMax ? String(offset + count) : nil
        return API.SearchResults(results: found.map { API.SearchResult(message: $0, snippet: API.Snippet(of: $0, terms: terms)) }, next: next)
    }

    /// `messages` with `me` set in their reactions for this user, with one read per conversation
    /// that has any.
    private func markingHeldReactions(_ messages: [Message]) async throws -> [Message] {
        let me = UserID(rawValue: id.key)
        var messages = messages
        for conversation in Set(messages.filter { $0.reactions != nil }.map(\.conversationId)).sorted() {
            let seqs = messages.filter { $0.conversationId == conversation && $0.reactions != nil }.map(\.seq)
            guard let first = seqs.min(), let last = seqs.max() else { continue }
            let held = Set(try await services.withStore { try await $0.reactions(of: me, in: conversation, seqs: first...last) })
            messages = messages.map { $0.conversationId == conversation ? HeldReaction.marking($0, held: held) : $0 }
        }
        return messages
    }
}

extension UserActor {
    /// How long a gateway may go on accepting a token this actor said is valid without asking
    /// again. A revocation reaches every gateway at once; one that cannot be told has its lease
    /// run out before ``revoke(tokenId:expiresAt:)`` returns — well within a call's 5 s timeout,
    /// so the gateway asking for the revocation hears back.
    public static let authenticationLease: Duration = .seconds(3)

    /// The user, if the token with this ID (already verified by signature) was not revoked.
    /// Throws `unauthorized` otherwise. A token no session names was issued before sessions were
    /// recorded: valid until the password changes.
    public distributed func authenticate(tokenId: String) async throws -> User {
        guard let profile else { throw ChatError("unauthorized", "unknown, expired or revoked token") }
        guard deletion == nil else { throw ChatError("unauthorized", "this account is deleted") }
        guard suspendedAt == nil else { throw ChatError("unauthorized", "this account is suspended") }
        let me = UserID(rawValue: id.key)
        let state: TokenState
        if let known = tokens[tokenId] {
            state = known
        } else {
            let (session, revoked) = try await services.withStore { store in
                (try await store.session(tokenId), try await store.isTokenRevoked(tokenId))
            }
            let stored: TokenState =
                if revoked { .revoked }
                else if let session { session.userId == me ? .session(lastUsedAt: session.lastUsedAt) : .revoked }
                else { password?.changedAt == nil ? .unrecorded : .revoked }
            // A revocation (or a password change) that ran while the store answered wins over
            // what the store said.
            state = tokens[tokenId] ?? stored
            if tokens.count > 10_000 { tokens = tokens.filter { if case .revoked = $0.value { true } else { false } } }
            tokens[tokenId] = state
        }
        switch state {
        case .revoked:
            throw ChatError("unauthorized", "unknown, expired or revoked token")
        case .session(let lastUsedAt):
            let now = actorSystem.clock.wallNow
            if now.timeIntervalSince(lastUsedAt) >= Double(StoredSession.touchEvery.components.seconds) {
                // Not worth failing a request over: the next check writes it.
                if (try? await services.withStore({ try await $0.touchSession(tokenId, at: now) })) != nil, case .session = tokens[tokenId] {
                    tokens[tokenId] = .session(lastUsedAt: now)
                }
            }
        case .unrecorded:
            break
        }
        return profile
    }

    /// Records a token the gateway is about to hand out. `verifiedHash` is the password hash a
    /// login checked the password against: if the password changed since, the login is refused
    /// (`unauthorized`), as if it had come after the change. Nil for a token an operator issues.
    public distributed func openSession(tokenId: String, expiresAt: Date, userAgent: String?, verifiedHash: String?) async throws {
        try requireProfile()
        if let verifiedHash, verifiedHash != password?.hash { throw ChatError("unauthorized", "wrong handle or password") }
        guard deletion == nil else { throw ChatError(.notFound, "user not found") }
        guard suspendedAt == nil else { throw ChatError(.forbidden, "this account is suspended") }
        let now = actorSystem.clock.wallNow
        let session = StoredSession(
            tokenId: tokenId, userId: UserID(rawValue: id.key), createdAt: now, lastUsedAt: now, expiresAt: expiresAt,
            userAgent: StoredSession.userAgent(userAgent))
        try await services.withStore { try await $0.openSession(session) }
        tokens[tokenId] = .session(lastUsedAt: now.millisecondPrecision)
    }

    /// `GET /v1/sessions`: this user's sessions neither revoked nor expired, newest first.
    public distributed func sessions(current tokenId: String) async throws -> [UserSession] {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        let now = actorSystem.clock.wallNow
        return try await services.withStore { try await $0.sessions(of: me, now: now, limit: Self.sessionsListed) }.map { $0.summary(current: tokenId) }
    }

    /// How many sessions `GET /v1/sessions` lists.
    public static let sessionsListed = 100

    /// `DELETE /v1/sessions/{id}`: revokes one of this user's sessions as ``revoke(tokenId:expiresAt:)``
    /// does; `not_found` for a session that is not this user's (or is revoked or expired).
    public distributed func revokeSession(_ tokenId: String) async throws {
        try requireProfile()
        let session = try await services.withStore { try await $0.session(tokenId) }
        guard let session, session.userId.rawValue == id.key, session.expiresAt > actorSystem.clock.wallNow else {
            throw ChatError(.notFound, "no session \(tokenId)")
        }
        try await revoke(tokenId: tokenId, expiresAt: session.expiresAt)
    }

    /// Logs a token out everywhere: when this returns, no gateway accepts it any more.
    ///
    /// From the first line on this actor refuses the token; every gateway is told to forget it,
    /// and if one cannot be told, this waits until the leases granted before have run out.
    public distributed func revoke(tokenId: String, expiresAt: Date) async throws {
        tokens[tokenId] = .revoked
        let leasesEnd = actorSystem.clock.now.advanced(by: Self.authenticationLease)
        try await services.withStore { store in
            try await store.revokeToken(tokenId, expiresAt: expiresAt)
            // A device belongs to the login that registered it: signed out, it gets no pushes.
            try await store.removeDevices(registeredWith: tokenId)
        }
        if await !GatewayInbox.announceRevocation(of: [tokenId], leasesEnd: leasesEnd, using: actorSystem) {
            try? await actorSystem.clock.sleep(until: leasesEnd)
        }
    }

    /// The password hash a password change checks the current password against; `forbidden` for
    /// a bot, which has none.
    public distributed func passwordHash() throws -> String {
        let profile = try requireProfile()
        guard !profile.bot, let password else { throw ChatError(.forbidden, "a bot has no password") }
        return password.hash
    }

    /// `PUT /v1/users/me/password`, once the gateway checked the current password against `old`:
    /// sets `new` (a hash) and revokes every other token of this user, everywhere, before it
    /// returns. `conflict` if the password changed since `old` was read.
    public distributed func changePassword(from old: String, to new: String, keeping tokenId: String) async throws {
        let profile = try requireProfile()
        guard !profile.bot else { throw ChatError(.forbidden, "a bot has no password") }
        let me = UserID(rawValue: id.key)
        let now = actorSystem.clock.wallNow
        let leasesEnd = actorSystem.clock.now.advanced(by: Self.authenticationLease)
        let revoked = try await services.withStore { try await $0.changePassword(of: me, from: old, to: new, keeping: tokenId, at: now) }
        guard let revoked else { throw ChatError(.conflict, "the password changed meanwhile") }
        password = (new, now.millisecondPrecision)
        // Every token this actor knew, but the one kept, is refused from here on; one it never
        // saw has no session (refused now that the password changed) or one the store revoked.
        for known in tokens.keys where known != tokenId { tokens[known] = .revoked }
        for session in revoked { tokens[session.tokenId] = .revoked }
        actorSystem.logger.info("password changed; the user's other sessions revoked", metadata: [
            "user.id": "\(id.key)", "sessions.revoked": "\(revoked.count)",
        ])
        if await !GatewayInbox.announce(.user(me, except: tokenId), leasesEnd: leasesEnd, using: actorSystem) {
            try? await actorSystem.clock.sleep(until: leasesEnd)
        }
    }

    /// The devices a user may have at once: registering one more removes the oldest (an app
    /// reinstalled gets a new token, and the old one is never unregistered).
    public static let devicesMax = 10

    /// `POST /v1/devices`: registers (or registers again) a device for pushes, as the login
    /// `tokenId`'s; whether it is new.
    public distributed func registerDevice(_ request: NewDevice, tokenId: String) async throws -> RegisteredDevice {
        try requireProfile()
        try request.validate()
        if request.platform == .apns, let topic = request.topic, let allowed = services.pushes?.apnsTopics, !allowed.contains(topic) {
            throw ChatError(.invalidRequest, "topic: \(topic) is not an app of this server (\(allowed.sorted().joined(separator: ", ")))")
        }
        let device = StoredDevice(
            device: Device(id: .make(), platform: request.platform, token: request.token, topic: request.topic,
                           environment: request.platform == .apns ? request.environment ?? .production : nil, createdAt: actorSystem.clock.wallNow),
            userId: UserID(rawValue: id.key), tokenId: tokenId)
        let stored = try await services.withStore { try await $0.registerDevice(device, keepingAtMost: Self.devicesMax) }
        if let previous = stored.takenFrom {
            // A phone that changed hands, or its user signed in to another account: the token
            // now reaches this user only. Logged, since it is also what a stolen token would do.
            actorSystem.logger.notice("a device registered by another user moved to this one", metadata: [
                "user.id": "\(id.key)", "device.previous_user": "\(previous)", "device.platform": "\(request.platform.rawValue)", "device.id": "\(stored.device.device.id)",
            ])
        }
        return RegisteredDevice(device: stored.device.device, created: stored.created)
    }

    /// `GET /v1/devices`: this user's devices, oldest first.
    public distributed func devices() async throws -> [Device] {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        return try await services.withStore { try await $0.devices(of: me) }.map(\.device)
    }

    /// `DELETE /v1/devices/{id}`: throws `not_found` if this user has no such device.
    public distributed func removeDevice(_ device: DeviceID) async throws {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        guard try await services.withStore({ try await $0.removeDevice(device, of: me) }) else {
            throw ChatError(.notFound, "no device \(device)")
        }
    }

    /// `POST /v1/media`, once the gateway has kept the bytes: records the upload as this user's.
    public distributed func recordUpload(_ media: Media) async throws -> Media {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        try await services.withStore { try await $0.recordMedia(StoredMedia(media: media, uploaderId: me)) }
        return media
    }

    /// The bytes of every upload this user made, together (`POST /v1/media` checks them against
    /// the quota before it takes more).
    public distributed func mediaBytes() async throws -> Int64 {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        return try await services.withStore { try await $0.mediaBytes(of: me) }
    }

    /// `GET /v1/media/{id}`: the upload, if this user may download it — one they uploaded, or
    /// one attached to a message of a conversation they are a member of now (someone removed
    /// from a group no longer sees its files). Anything else is `not_found`, so that whether it
    /// exists does not leak.
    public distributed func downloadable(_ media: MediaID) async throws -> Media {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        guard let stored = try await services.withStore({ try await $0.media(media) }) else { throw ChatError(.notFound, "media not found") }
        if stored.uploaderId == me { return stored.media }
        for conversation in try await services.withStore({ try await $0.conversationsReferencing(media) }) {
            if let record = try await services.withStore({ try await $0.conversation(conversation) }), record.member(me) != nil {
                return stored.media
            }
        }
        // A profile photo is everyone's to see, while it is one.
        if stored.media.isImage, try await services.withStore({ try await $0.user(id: stored.uploaderId) })?.user.avatar?.id == media {
            return stored.media
        }
        throw ChatError(.notFound, "media not found")
    }

    /// A send with attachments, before the gateway hands it to the conversation's owner: the
    /// user must be a member of the conversation (else `not_found`, as the send would answer),
    /// each attachment an upload of this user's (else `invalid_request`, naming it); then, and
    /// only then, the conversation's members may download it. Answers them as the message will
    /// carry them.
    public distributed func attach(_ attachments: [API.NewAttachment], to conversation: ConversationID) async throws -> [Attachment] {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        // Checked before anything is recorded: a reference from a conversation the sender is not
        // in would keep the upload from the sweeper, and cost every later download a read.
        guard try await services.withStore({ try await $0.conversation(conversation) })?.member(me) != nil else {
            throw ChatError(.notFound, "conversation not found")
        }
        var found: [Attachment] = []
        for (index, attachment) in attachments.enumerated() {
            guard let stored = try await services.withStore({ try await $0.media(attachment.mediaId) }), stored.uploaderId == me else {
                throw ChatError(.invalidRequest, "attachments[\(index)].mediaId: \(attachment.mediaId) is not an upload of yours")
            }
            found.append(Attachment(media: stored.media, caption: attachment.caption))
        }
        let referenced = try await services.withStore { try await $0.referenceMedia(found.map(\.media.id), in: conversation) }
        // The sweeper removed one between the read above and now (it was a day old, never attached).
        if let index = found.firstIndex(where: { !referenced.contains($0.media.id) }) {
            throw ChatError(.invalidRequest, "attachments[\(index)].mediaId: \(found[index].media.id) is not an upload of yours")
        }
        return found
    }

    /// A conversation's owner owes this user a push notification (``PushPlanner``): sends it to
    /// each of the user's devices through the node's provider for its platform. A device the
    /// provider says is gone is removed. Answers when to try again if a provider asked for that
    /// or could not be reached; the devices that took the notification get it again then, and
    /// show it once (it replaces the one before of the same conversation).
    public distributed func notify(_ notice: PushNotice) async throws -> PushNoticeResult {
        guard profile != nil, let settings = services.pushes else { return .done }
        let me = UserID(rawValue: id.key)
        let sender = settings.preview == .none ? nil : notice.latest.senderId
        let recipient = try await services.withStore { try await $0.pushRecipient(me, sender: sender) }
        let devices = recipient.devices
        guard !devices.isEmpty else { return .done }
        let content = PushContent(
            latest: notice.latest, count: notice.count, kind: notice.kind, conversationName: notice.conversationName, senderName: recipient.senderName,
            badge: Int(clamping: recipient.unread), preview: settings.preview, mentioned: notice.latest.mentions?.contains(me) == true)
        var retryAfter: Duration?
        for platform in PushPlatform.allCases {
            let targets = devices.filter { $0.device.platform == platform }
            guard !targets.isEmpty else { continue }
            guard let provider = settings.providers[platform] else { continue }
            let outcomes = await provider.send(content, to: targets.map(\.device))
            for (device, outcome) in zip(targets, outcomes) {
                switch outcome {
                case .sent:
                    Self.sentPushes.increment()
                case .unregistered(let reason):
                    actorSystem.logger.info("a device the push provider no longer knows is removed", metadata: [
                        "user.id": "\(me)", "device.id": "\(device.device.id)", "reason": "\(reason)",
                    ])
                    _ = try? await services.store.removeDevice(device.device.id, of: me)
                case .retry(let after, let reason):
                    actorSystem.logger.info("a push notification will go again", metadata: [
                        "user.id": "\(me)", "device.id": "\(device.device.id)", "reason": "\(reason)",
                    ])
                    retryAfter = max(retryAfter ?? .zero, after ?? .zero)
                case .refused(let reason):
                    actorSystem.logger.warning("the push provider refused a notification", metadata: [
                        "user.id": "\(me)", "device.id": "\(device.device.id)", "reason": "\(reason)",
                    ])
                }
            }
        }
        return retryAfter.map { PushNoticeResult(retryAfterMilliseconds: $0.nanoseconds / 1_000_000) } ?? .done
    }

    static let sentPushes = Counter(label: "parley.push.sent")

    /// The other members of this user's conversations, but those blocked either way: whose
    /// streams hear of its presence, and whose presence it may see.
    public distributed func contacts() async throws -> [UserID] {
        let me = UserID(rawValue: id.key)
        var contacts: Set<UserID> = []
        try await forEachConversation { contacts.formUnion($0.members.map(\.userId)) }
        contacts.remove(me)
        for stored in try await services.withStore({ try await $0.blocks(involving: me) }) {
            contacts.remove(stored.block.blocker == me ? stored.block.blocked : stored.block.blocker)
        }
        return contacts.sorted()
    }

    /// Every conversation of this user, a page at a time.
    private func forEachConversation(_ body: (ConversationRecord) async throws -> Void) async throws {
        let me = UserID(rawValue: id.key)
        var cursor: ConversationPageCursor?
        repeat {
            let page = try await services.withStore { try await $0.conversations(of: me, after: cursor, limit: 100) }
            for record in page { try await body(record) }
            cursor = page.count == 100 ? page.last.map { ConversationPageCursor(lastActivityAt: $0.lastActivityAt, id: $0.id) } : nil
        } while cursor != nil
    }

    // MARK: Suspension

    /// An operator's suspension (`true`) or its end: while suspended no token of this user works
    /// (every gateway is told to forget them, and their event streams end, before this returns) and
    /// a login is refused; nothing of theirs is removed. Lifted, their tokens work again.
    public distributed func setSuspended(_ suspended: Bool) async throws {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        let since = suspended ? (suspendedAt ?? actorSystem.clock.wallNow.millisecondPrecision) : nil
        let leasesEnd = actorSystem.clock.now.advanced(by: Self.authenticationLease)
        // Refused from the first line on, as a revocation is; what the store says decides.
        let before = suspendedAt
        if suspended { suspendedAt = since }
        do {
            guard try await services.withStore({ try await $0.setSuspended(me, since: since) }) else { throw ChatError(.notFound, "user not found") }
        } catch {
            suspendedAt = before
            throw error
        }
        suspendedAt = since
        actorSystem.logger.notice(suspended ? "user suspended" : "user's suspension lifted", metadata: ["user.id": "\(me)"])
        if suspended, await !GatewayInbox.announce(.user(me, except: nil), leasesEnd: leasesEnd, using: actorSystem) {
            try? await actorSystem.clock.sleep(until: leasesEnd)
        }
    }

    // MARK: Deletion

    /// `DELETE /v1/users/me`, once the gateway checked the password (or, for a bot, the admin
    /// token): deletes this account, and returns once the deletion is complete.
    ///
    /// First, in one store transaction, the account is marked deleted (no token of it works from
    /// then on, and it cannot sign in), its profile emptied, its sessions, blocks and devices
    /// removed, and its uploads attached to no message left to the sweeper. Every gateway is told
    /// to forget its tokens and end its streams. Then it leaves every conversation through that
    /// conversation's owner, as a member who leaves does (erasing its messages first, if asked);
    /// then the deletion is marked finished and webhooks get `user.deleted`. Each step can run
    /// again: a deletion a crash cut short is finished by the safety desk (``SafetyDesk``), and
    /// asking again joins the one under way.
    public distributed func deleteAccount(erase: Bool) async throws -> AccountDeletion {
        try requireProfile()
        if let deleting {
            let done = try await deleting.value
            if done.erase || !erase { return done }
        }
        let task = Task { try await self.delete(erase: erase) }
        deleting = task
        defer { if deleting == task { deleting = nil } }
        return try await task.value
    }

    /// How long a deletion's call to leave one conversation may take: with `erase`, leaving reads
    /// and erases the conversation's messages 200 per store transaction first, far longer than an
    /// ordinary call's timeout for a conversation of many thousands.
    public static let deletionStepTimeout: Duration = .seconds(600)

    /// How long a caller waits for ``deleteAccount(erase:)``: each of thousands of conversations
    /// takes milliseconds, so hours would be a deletion that is stuck, not slow.
    public static let deletionTimeout: Duration = .seconds(3600)

    private func delete(erase: Bool) async throws -> AccountDeletion {
        let me = UserID(rawValue: id.key)
        let leasesEnd = actorSystem.clock.now.advanced(by: Self.authenticationLease)
        let now = actorSystem.clock.wallNow
        guard var deletion = try await services.withStore({ try await $0.beginDeletion(of: me, erase: erase, at: now) }) else {
            throw ChatError(.notFound, "user not found")
        }
        let finishedBefore = deletion.finishedAt != nil
        self.deletion = deletion
        if let profile { self.profile = .deletedAccount(me, createdAt: profile.createdAt, bot: profile.bot) }
        password = nil
        tokens.removeAll()
        services.checkpoint("deletion.begun")
        actorSystem.logger.notice("account deletion begun", metadata: ["user.id": "\(me)", "deletion.erase": "\(deletion.erase)"])
        if await !GatewayInbox.announce(.user(me, except: nil), leasesEnd: leasesEnd, using: actorSystem) {
            try? await actorSystem.clock.sleep(until: leasesEnd)
        }
        services.checkpoint("deletion.announced")
        // Each conversation left drops out of the list: the first page again until it is empty.
        var left: Set<ConversationID> = []
        while true {
            let page = try await services.withStore { try await $0.conversations(of: me, after: nil, limit: 100) }
            guard !page.isEmpty else { break }
            for record in page {
                guard left.insert(record.id).inserted else {
                    throw ChatError(.unavailable, "conversation \(record.id) still lists the account as a member; the deletion is tried again")
                }
                let conversation = try ConversationActor.resolve(record.id, using: actorSystem)
                try await ClusterSystem.withCallTimeout(Self.deletionStepTimeout) { try await conversation.accountDeleted(me, erase: deletion.erase) }
                services.checkpoint("deletion.left")
            }
        }
        if !finishedBefore, deletion.requestedAt < now.millisecondPrecision {
            // Run again: a conversation left before the crash may have had its owner die with it,
            // before the members heard of the departure and the tombstones. It hands them on again.
            let since = deletion.requestedAt.addingTimeInterval(-0.001)
            let earlier = try await services.withStore { try await $0.durableChanges(for: me, since: since) }.removals.map(\.conversation.id)
            for id in Set(earlier).subtracting(left).sorted() {
                let conversation = try ConversationActor.resolve(id, using: actorSystem)
                try await ClusterSystem.withCallTimeout(Self.deletionStepTimeout) { try await conversation.accountDeleted(me, erase: deletion.erase) }
            }
        }
        let finishedAt = actorSystem.clock.wallNow
        try await services.withStore { try await $0.finishDeletion(of: me, at: finishedAt) }
        deletion.finishedAt = deletion.finishedAt ?? finishedAt.millisecondPrecision
        self.deletion = deletion
        services.checkpoint("deletion.finished")
        actorSystem.logger.notice("account deleted", metadata: ["user.id": "\(me)", "conversations.left": "\(left.count)"])
        if !finishedBefore {
            // The desk's sweep delivers what this could not hand it.
            do {
                try await SafetyDesk.resolve(using: actorSystem).deletionFinished(deletion)
            } catch {
                actorSystem.logger.info("the safety desk was not told of a deletion; its sweep finds it", metadata: ["user.id": "\(me)", "error": "\(error)"])
            }
        }
        return deletion
    }

    // MARK: Blocks

    /// How many users one user may block.
    public static let blocksMax = 1_000

    /// `PUT /v1/users/me/blocks/{userId}`: from when this returns, `other` cannot write to this
    /// user in a direct conversation (nor this user to them), starts none with them, sends them no
    /// push, and neither sees the other's presence or typing. Blocking again changes nothing.
    public distributed func block(_ other: UserID) async throws {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        guard other != me else { throw ChatError(.invalidRequest, "you cannot block yourself") }
        let existing = try await services.withStore { try await $0.existingUsers([other]) }
        guard existing.contains(other) else { throw ChatError(.notFound, "user not found") }
        let mine = try await services.withStore { try await $0.blocks(involving: me) }.filter { $0.block.blocker == me }
        guard mine.count < Self.blocksMax || mine.contains(where: { $0.block.blocked == other }) else {
            throw ChatError(.invalidRequest, "at most \(Self.blocksMax) users can be blocked; unblock one first")
        }
        let now = actorSystem.clock.wallNow
        _ = try await services.withStore { try await $0.block(Block(blocker: me, blocked: other), at: now) }
        try await tellSharedConversations(with: other)
        actorSystem.logger.info("user blocked another", metadata: ["user.id": "\(me)", "blocked.id": "\(other)"])
    }

    /// `DELETE /v1/users/me/blocks/{userId}`: undoes ``block(_:)``; unblocking someone not blocked
    /// changes nothing.
    public distributed func unblock(_ other: UserID) async throws {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        guard try await services.withStore({ try await $0.unblock(Block(blocker: me, blocked: other)) }) else { return }
        try await tellSharedConversations(with: other)
    }

    /// `GET /v1/users/me/blocks`: whom this user blocked, newest first. Only its owner sees it.
    public distributed func blocked() async throws -> [BlockedUser] {
        try requireProfile()
        let me = UserID(rawValue: id.key)
        return try await services.withStore { try await $0.blocks(involving: me) }
            .filter { $0.block.blocker == me }.map { BlockedUser(userId: $0.block.blocked, blockedAt: $0.at) }
    }

    /// Every conversation this user shares with `other` reads its blocks again before this
    /// returns; one that cannot be told fails the request (`unavailable`), which the client
    /// retries — the block is stored already, and a conversation that activates reads it.
    private func tellSharedConversations(with other: UserID) async throws {
        var shared: [ConversationID] = []
        try await forEachConversation { record in if record.member(other) != nil { shared.append(record.id) } }
        let system = actorSystem
        try await withThrowingTaskGroup(of: Void.self) { group in
            for conversation in shared {
                group.addTask { try await ConversationActor.resolve(conversation, using: system).blocksChanged() }
            }
            try await group.waitForAll()
        }
    }

}

/// A registration: the password arrives already hashed (the gateway hashes it; the cluster never
/// sees a password).
public struct NewUser: Codable, Sendable, Hashable {
    public var handle: String
    public var displayName: String
    public var passwordHash: String
    public var bot: Bool

    /// What a bot's password hash is: none that any password matches (a bot signs in with the
    /// token an operator gets for it).
    public static let noPassword = "!"

    public init(handle: String, displayName: String, passwordHash: String, bot: Bool = false) {
        self.handle = handle
        self.displayName = displayName
        self.passwordHash = passwordHash
        self.bot = bot
    }

    private enum CodingKeys: String, CodingKey {
        case handle, displayName, passwordHash, bot
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.handle = try container.decode(String.self, forKey: .handle)
        self.displayName = try container.decode(String.self, forKey: .displayName)
        self.passwordHash = try container.decode(String.self, forKey: .passwordHash)
        // Absent from what a node of an earlier version sends.
        self.bot = try container.decodeIfPresent(Bool.self, forKey: .bot) ?? false
    }

    /// Whether `text` is a handle: 3–32 characters of `a-z 0-9 _ . -`.
    public static func isHandle(_ text: String) -> Bool {
        (3...32).contains(text.utf8.count) && text.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "-"): true
            default: false
            }
        }
    }

    /// API.md: a handle of 3–32 characters of `a-z 0-9 _ . -`, a display name of 1–64.
    public func validate() throws(ChatError) {
        guard Self.isHandle(handle) else {
            throw ChatError(.invalidRequest, "handle must be 3–32 characters of a-z 0-9 _ . -")
        }
        // Every deleted account shows it: whoever held it could pass for any of them.
        guard handle != User.deletedHandle else { throw ChatError(.conflict, "handle \(handle) is taken") }
        guard (1...64).contains(displayName.count) else { throw ChatError(.invalidRequest, "displayName must be 1–64 characters") }
        try StoredText.require(displayName, field: "displayName")
        guard !passwordHash.isEmpty else { throw ChatError(.invalidRequest, "passwordHash is required") }
    }
}

/// What registering a device did: the device as stored, and whether it is new to its user.
public struct RegisteredDevice: Codable, Sendable, Hashable {
    public var device: Device
    public var created: Bool

    public init(device: Device, created: Bool) {
        self.device = device
        self.created = created
    }
}

/// A conversation in a user's list.
public struct ConversationSummary: Codable, Sendable, Hashable {
    public var conversation: ConversationRecord
    /// `lastSeq - readSeq` for this user.
    public var unreadCount: Int64
    public var lastMessage: Message?
}

/// One page of a user's conversations.
public struct ConversationPage: Codable, Sendable, Hashable {
    public var conversations: [ConversationSummary]
    /// Where the next page starts; nil on the last page.
    public var next: ConversationPageCursor?
}
