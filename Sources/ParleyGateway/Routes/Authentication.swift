import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ParleyChat
import ParleyCluster
import ParleyModel

/// The caller of an authenticated route.
struct Caller: Sendable {
    var user: User
    var claims: TokenAuthority.Claims
    var id: UserID { user.id }
}

/// The context of a route that needs a user: its caller, authenticated once by
/// ``Authenticator`` before the route runs. Only a group that authenticates has this context, so
/// a route that needs a caller cannot be added where nobody was authenticated.
struct AuthenticatedContext: ChildRequestContext {
    var coreContext: CoreRequestContextStorage
    let caller: Caller
    /// The connection, and on HTTP/2 the stream an event stream writes into (``GatewayContext``).
    let channel: any Channel
    let eventSink: (any EventStreamSink)?

    init(context: GatewayContext) throws {
        // Only when a group was made without its ``Authenticator``: refused, never served.
        guard let caller = context.caller else { throw APIError.unauthorized("Authorization: Bearer <token> is required") }
        self.coreContext = context.coreContext
        self.caller = caller
        self.channel = context.channel
        self.eventSink = context.eventSink
    }

    var maxUploadSize: Int { GatewayContext.bodyLimit }
}

/// Authenticates a request's bearer token, once, before its route: a token this gateway verified
/// lately is known by its lease (``AuthenticationCache``); otherwise its signature is checked
/// and the user's actor asked. Then the request is counted against the caller's limit: a read
/// (`GET`, `HEAD`) against the read limit, any other against the write limit — unless the routes
/// behind it have their own (sends, uploads).
struct Authenticator: RouterMiddleware {
    typealias Context = GatewayContext

    enum Writes: Sendable {
        /// Counted against the write limit (``GatewayConfiguration/writeRate``).
        case limited
        /// Counted by the route itself, against a limit of its own.
        case ownLimit
    }

    let gateway: Gateway
    let writes: Writes
    /// Whether the user's actor is asked even when the token's lease is current: the route
    /// answers with the user as the actor has it now (`GET /v1/users/me`).
    var fresh = false

    func handle(_ request: Request, context: GatewayContext, next: (Request, GatewayContext) async throws -> Response) async throws -> Response {
        var context = context
        context.caller = try await gateway.authenticate(request, fresh: fresh, limitingWrites: writes == .limited)
        return try await next(request, context)
    }
}

extension RouterMethods<GatewayContext> {
    /// The routes of a group whose every request is authenticated (``Authenticator``).
    func authenticated(by gateway: Gateway, writes: Authenticator.Writes = .limited, fresh: Bool = false) -> RouterGroup<AuthenticatedContext> {
        group().add(middleware: Authenticator(gateway: gateway, writes: writes, fresh: fresh)).group(context: AuthenticatedContext.self)
    }
}

extension Gateway {
    /// The caller a bearer token names, counted against the caller's read limit for a `GET` or
    /// `HEAD` and, when `limitingWrites`, against the write limit for anything else; `429` with
    /// `Retry-After` past either.
    func authenticate(_ request: Request, fresh: Bool = false, limitingWrites: Bool) async throws -> Caller {
        let caller = try await authenticated(request, fresh: fresh)
        if request.method == .get || request.method == .head {
            if let wait = readLimiter.acquire(caller.id.rawValue, now: system.clock.now) { throw APIError.rateLimited(retryAfter: wait, "too many reads; slow down") }
        } else if limitingWrites, let wait = writeLimiter.acquire(caller.id.rawValue, now: system.clock.now) {
            throw APIError.rateLimited(retryAfter: wait, "too many changes; slow down")
        }
        return caller
    }

    private func authenticated(_ request: Request, fresh: Bool) async throws -> Caller {
        try await caller(token: try Self.bearerToken(of: request), fresh: fresh)
    }

    /// The token of `Authorization: Bearer <token>`.
    static func bearerToken(of request: Request) throws -> String {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw APIError.unauthorized("Authorization: Bearer <token> is required")
        }
        // Optional whitespace around the token is spaces and tabs (RFC 9110); trimmed without
        // Foundation's CharacterSet, which bridges through NSString on every request.
        var rest = header.utf8.dropFirst("Bearer ".count)
        while let first = rest.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { rest = rest.dropFirst() }
        while let last = rest.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { rest = rest.dropLast() }
        return String(Substring(rest))
    }

    /// The caller `token` names: known by its lease when this gateway verified it lately, else
    /// its signature checked and the user's actor asked.
    func caller(token: String, fresh: Bool = false) async throws -> Caller {
        let askedAt = system.clock.now
        // The very text of a token this gateway verified (and the actor found valid) needs
        // neither its signature checked again nor the actor asked, until its lease runs out.
        let wallClock = system.clock.wallNow
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

    /// Operators' routes: `Authorization: Bearer <admin token>`.
    func requireAdmin(_ request: Request) throws {
        guard let token = configuration.adminToken else {
            throw APIError(.forbidden, "forbidden", "this gateway has no admin token (--admin-token): operators' routes are off")
        }
        guard AdminToken.matches(request.headers[.authorization], token) else { throw APIError.unauthorized("the admin token is required") }
    }
}
