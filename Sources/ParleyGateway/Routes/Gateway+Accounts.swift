import Foundation
import HTTPTypes
import Hummingbird
import Logging
import ParleyChat
import ParleyCluster
import ParleyModel

extension Gateway {
    /// Registration and login (no caller yet), the caller's own account, and other users.
    func addAccountRoutes(to v1: RouterGroup<GatewayContext>) {
        v1.post("users") { request, context in try await self.register(request, context) }
        v1.post("sessions") { request, context in try await self.login(request, context) }
        // The user as the actor has it now, not as the token's lease remembers it.
        v1.authenticated(by: self, fresh: true).get("users/me") { request, context in
            try Self.json(try await UserActor.resolve(context.caller.id, using: self.system).me())
        }

        let users = v1.authenticated(by: self)
        users.delete("sessions/current") { request, context in
            let caller = context.caller
            try await UserActor.resolve(caller.id, using: self.system).revoke(tokenId: caller.claims.tokenId, expiresAt: caller.claims.expiresAt)
            return Response(status: .noContent)
        }
        users.get("sessions") { request, context in
            let caller = context.caller
            return try Self.json(API.Sessions(sessions: try await UserActor.resolve(caller.id, using: self.system).sessions(current: caller.claims.tokenId)))
        }
        users.delete("sessions/:sessionId") { request, context in
            let id = try context.parameters.require("sessionId")
            guard ClientInput.isPlausibleID(id) else { throw APIError.notFound("no session \(id)") }
            try await UserActor.resolve(context.caller.id, using: self.system).revokeSession(id)
            return Response(status: .noContent)
        }
        users.put("users/me/password") { request, context in try await self.changePassword(request, context.caller) }
        users.delete("users/me") { request, context in try await self.deleteAccount(request, context.caller) }
        v1.authenticated(by: self, writes: .ownLimit).post("reports") { request, context in
            let caller = context.caller
            let body = try await self.decode(API.NewReport.self, from: request)
            if let wait = self.reportLimiter.acquire(caller.id.rawValue, now: self.system.clock.now) {
                throw APIError.rateLimited(retryAfter: wait, "too many reports; retry later")
            }
            let filed = try await SafetyDesk.resolve(using: self.system).file(body, by: caller.id)
            return try Self.json(API.ReportBody(report: filed.report), status: filed.created ? .created : .ok)
        }
        users.get("users/me/export") { request, context in try await self.export(request, context) }
        users.get("users/me/blocks") { request, context in
            try Self.json(API.Blocks(blocks: try await UserActor.resolve(context.caller.id, using: self.system).blocked()))
        }
        users.put("users/me/blocks/:userId") { request, context in
            let other = try Self.userID(context.parameters.require("userId"))
            try await UserActor.resolve(context.caller.id, using: self.system).block(other)
            return Response(status: .noContent)
        }
        users.delete("users/me/blocks/:userId") { request, context in
            let other = try Self.userID(context.parameters.require("userId"))
            try await UserActor.resolve(context.caller.id, using: self.system).unblock(other)
            return Response(status: .noContent)
        }
        users.patch("users/me") { request, context in
            let change = try await self.decode(API.ProfileChange.self, from: request)
            let user = try await UserActor.resolve(context.caller.id, using: self.system).updateProfile(
                displayName: change.displayName, avatarURL: change.avatarURL, metadata: change.metadata, privateMetadata: change.privateMetadata)
            return try Self.json(user)
        }
        Self.putAndDelete("users/me/avatar", on: users) { setting, request, context in
            let media = setting ? try await self.decode(API.PhotoChange.self, from: request).mediaId : nil
            return try Self.json(try await UserActor.resolve(context.caller.id, using: self.system).setAvatar(media))
        }
        users.get("users") { request, context in
            let query = request.uri.queryParameters
            let directory = try AccountDirectory.resolve(handle: "search", using: self.system)
            if let ids = query["ids"] {
                guard query["prefix"] == nil else { throw APIError.invalid("give ids or prefix, not both") }
                let asked: [UserID]
                do {
                    asked = try ClientInput.userIDs(ids, max: 100, name: "ids")
                } catch let error as ClientInput.Invalid {
                    throw APIError.invalid(error.message)
                }
                return try Self.json(API.Users(users: asked.isEmpty ? [] : try await directory.users(asked)))
            }
            let prefix = String(query["prefix"] ?? "")
            let limit = try Self.intParameter(request, "limit", default: 20, range: 1...100)
            return try Self.json(API.Users(users: try await directory.search(prefix: prefix, limit: limit)))
        }
        users.get("users/me/unread") { _, context in
            try Self.json(try await UserActor.resolve(context.caller.id, using: self.system).unread())
        }
        users.get("users/:userId") { request, context in
            let id = try Self.userID(context.parameters.require("userId"))
            return try Self.json(try await UserActor.resolve(id, using: self.system).user())
        }
    }

    private func register(_ request: Request, _ context: GatewayContext) async throws -> Response {
        if let wait = registrationByAddress.acquire(context.clientAddress, now: system.clock.now) {
            throw APIError.rateLimited(retryAfter: wait, "too many registrations from this address; retry later")
        }
        let body = try await decode(API.NewUser.self, from: request)
        if let problem = Self.passwordProblem(body.password) { throw APIError.invalid(problem) }
        let unhashed = NewUser(handle: body.handle, displayName: body.displayName, passwordHash: "-")
        try unhashed.validate()  // before spending a bcrypt on it
        let hash = try await passwords.hash(body.password)
        let id = UserID.make()
        let user = try await UserActor.resolve(id, using: system).create(NewUser(handle: body.handle, displayName: body.displayName, passwordHash: hash))
        logger.info("user registered", metadata: ["user.id": "\(user.id)"])
        return try Self.json(API.Session(user: user, token: try await openSession(for: user.id, request, verifiedHash: hash)), status: .created)
    }

    private func login(_ request: Request, _ context: GatewayContext) async throws -> Response {
        let body = try await decode(API.Credentials.self, from: request)
        if let wait = loginByAddress.acquire(context.clientAddress, now: system.clock.now) { throw APIError.rateLimited(retryAfter: wait, "too many login attempts; retry later") }
        // What no account can have is refused before it is a limiter's key: the handle's
        // limiter holds only handles (at most 32 bytes), never what a body happened to hold.
        // A handle's form is public, so answering it at once tells nothing of any account.
        guard NewUser.isHandle(body.handle) else { throw APIError.unauthorized("wrong handle or password") }
        if let wait = loginByHandle.acquire(body.handle, now: system.clock.now) { throw APIError.rateLimited(retryAfter: wait, "too many login attempts; retry later") }
        // A password registration would refuse matches no account: bcrypt would compare only
        // its first 72 bytes, or the bytes before a U+0000.
        guard Self.passwordProblem(body.password) == nil else { throw APIError.unauthorized("wrong handle or password") }
        let login = try await AccountDirectory.resolve(handle: body.handle, using: system).login(handle: body.handle)
        // An unknown handle costs the same bcrypt as a wrong password, and answers the same.
        // A bot has no password: its handle answers as an unknown one, after the same bcrypt.
        let matches = try await passwords.verify(body.password, hash: login.map { $0.user.bot ? decoyHash : $0.passwordHash } ?? decoyHash)
        guard let login, matches, !login.user.bot else { throw APIError.unauthorized("wrong handle or password") }
        return try Self.json(API.Session(user: login.user, token: try await openSession(for: login.user.id, request, verifiedHash: login.passwordHash)))
    }

    /// A new token for `user`, its session recorded (with the request's `User-Agent`) before the
    /// token is handed out. `verifiedHash`: the password hash a login checked (see
    /// ``UserActor/openSession(tokenId:expiresAt:userAgent:verifiedHash:)``).
    func openSession(for user: UserID, _ request: Request, verifiedHash: String?, lifetime: Duration? = nil) async throws -> String {
        let (token, claims) = tokens.issue(for: user, lifetime: lifetime, now: system.clock.wallNow)
        try await UserActor.resolve(user, using: system).openSession(
            tokenId: claims.tokenId, expiresAt: claims.expiresAt, userAgent: request.headers[.userAgent], verifiedHash: verifiedHash)
        return token
    }

    /// `PUT /v1/users/me/password`: the current password checked as a login checks it (and
    /// counted against the same limit of the handle), then the new one set and every other token
    /// revoked.
    private func changePassword(_ request: Request, _ caller: Caller) async throws -> Response {
        let body = try await decode(API.PasswordChange.self, from: request)
        if let wait = loginByHandle.acquire(caller.user.handle, now: system.clock.now) {
            throw APIError.rateLimited(retryAfter: wait, "too many password attempts; retry later")
        }
        if let problem = Self.passwordProblem(body.new) { throw APIError.invalid("new: \(problem)") }
        let user = try UserActor.resolve(caller.id, using: system)
        let old = try await user.passwordHash()
        guard Self.passwordProblem(body.current) == nil, try await passwords.verify(body.current, hash: old) else {
            throw APIError(.forbidden, "forbidden", "the current password is wrong")
        }
        let new = try await passwords.hash(body.new)
        try await user.changePassword(from: old, to: new, keeping: caller.claims.tokenId)
        logger.info("password changed", metadata: ["user.id": "\(caller.id)"])
        return Response(status: .noContent)
    }

    /// `DELETE /v1/users/me[?erase=true]`: the password checked as a password change checks it
    /// (a bot, which has none, gives the admin token), then the account deleted; `204` once the
    /// deletion is complete (``UserActor/deleteAccount(erase:)``).
    private func deleteAccount(_ request: Request, _ caller: Caller) async throws -> Response {
        let erase = try Self.boolParameter(request, "erase", default: false)
        let body = try await decode(API.AccountDeletionRequest.self, from: request)
        if let wait = loginByHandle.acquire(caller.user.handle, now: system.clock.now) {
            throw APIError.rateLimited(retryAfter: wait, "too many password attempts; retry later")
        }
        let user = try UserActor.resolve(caller.id, using: system)
        if caller.user.bot {
            guard let adminToken = configuration.adminToken, let given = body.adminToken, AdminToken.matches("Bearer \(given)", adminToken) else {
                throw APIError(.forbidden, "forbidden", "a bot's account is deleted with the admin token (adminToken)")
            }
        } else {
            guard let password = body.password else { throw APIError.invalid("password is required") }
            let hash = try await user.passwordHash()
            guard Self.passwordProblem(password) == nil, try await passwords.verify(password, hash: hash) else {
                throw APIError(.forbidden, "forbidden", "the password is wrong")
            }
        }
        // Answered once complete: the call waits as long as a deletion may take.
        let deletion = try await ClusterSystem.withCallTimeout(UserActor.deletionTimeout) { try await user.deleteAccount(erase: erase) }
        logger.notice("account deleted", metadata: ["user.id": "\(caller.id)", "deletion.erase": "\(deletion.erase)"])
        return Response(status: .noContent)
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
}
