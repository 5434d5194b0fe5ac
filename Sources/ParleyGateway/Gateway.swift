import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdBcrypt
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ParleyChat
import ParleyCluster
import ParleyModel

/// What a gateway needs besides the cluster: where to listen, its TLS identity, the shared token
/// secret, and the limits of API.md.
public struct GatewayConfiguration: Sendable {
    public var host = "127.0.0.1"
    public var port = 8443
    /// The client port's certificate chain and key (PEM files).
    public var certificatePath: String
    public var keyPath: String
    /// The HMAC secret every gateway shares (tokens from one are valid on all).
    public var tokenSecret: String
    public var bodyLimitBytes = 64 * 1024
    /// A client connection with nothing in progress this long is closed (HTTP/2: no open stream,
    /// with a GOAWAY first; HTTP/1.1: between requests); nil: never. An open event stream is never idle.
    public var clientIdleTimeout: Duration? = .seconds(300)
    /// Client connections open at once; past it a new one is closed at once.
    public var clientConnectionsMax = 10_000
    /// The client connections one address may hold; nil: no share. A tenth of the default
    /// maximum: one host without an account cannot hold every slot, while many users behind one
    /// carrier's NAT still get in.
    public var clientConnectionsPerAddressMax: Int? = 1_000
    /// A client connection must finish its TLS handshake this soon after it is accepted.
    public var handshakeTimeout: Duration = .seconds(10)
    /// A request must arrive whole (headers and body) this soon after its first byte (HTTP/1.1) or
    /// its headers (HTTP/2), else `408`.
    public var requestTimeout: Duration = .seconds(30)
    /// How long a send whose owner died is retried (same `clientMessageId`) before `503`.
    public var sendRetryWindow: Duration = .seconds(5)
    /// Messages per user.
    public var sendRate = RateLimiter.Rule(perSecond: 20, burst: 50)
    /// Other writes per user: creating conversations, renames, members, receipts, typing,
    /// presence, profile, logout.
    public var writeRate = RateLimiter.Rule(perSecond: 20, burst: 100)
    /// Reads per user (every authenticated `GET` and `HEAD`: conversations, history, users,
    /// media, streams opened): a chat list's first screen fits in the burst.
    public var readRate = RateLimiter.Rule(perSecond: 50, burst: 250)
    /// Login attempts per handle and per client address.
    public var loginRatePerHandle = RateLimiter.Rule(perSecond: 0.2, burst: 5)
    public var loginRatePerAddress = RateLimiter.Rule(perSecond: 2, burst: 30)
    /// Registrations per client address (each costs a bcrypt).
    public var registrationRatePerAddress = RateLimiter.Rule(perSecond: 0.5, burst: 10)
    /// Event streams one user may have open on this gateway, and send streams; one more is `429`.
    public var streamsPerUserMax = 10
    /// A resume is refused (`410 cursor_expired`; the client reloads) past this many messages
    /// committed after its cursor.
    public var replayMessagesMax = 5_000
    /// bcrypt hashes (registrations, logins) running or waiting at most; past it `503`.
    public var passwordHashesOutstandingMax = 32
    /// bcrypt cost (2^cost rounds); 10 takes ~60 ms here.
    public var bcryptCost: UInt8 = 10
    /// The admin token operators' routes (`POST /v1/webhooks/{name}/replay`) require; nil: those
    /// routes answer `403`.
    public var adminToken: String?
    /// Whether `/` serves the web client (``WebClient``).
    public var servesWebClient = true
    /// Every gateway's public URL (`https://host:port`): the web client fails over among them, and
    /// this gateway answers the API to pages the others served (``CrossOriginMiddleware``).
    public var gatewayURLs: [String] = []
    /// Where uploads are kept, and their limits; nil: the media routes answer `404`.
    public var media: MediaSettings?
    public init(certificatePath: String, keyPath: String, tokenSecret: String) {
        self.certificatePath = certificatePath
        self.keyPath = keyPath
        self.tokenSecret = tokenSecret
    }
}

/// The request context: the client's connection (its address, for login rate limits) and, on
/// HTTP/2, the stream an event stream writes into.
public struct GatewayContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connection (HTTP/1.1, HTTP/2).
    let channel: any Channel
    /// Where an event stream's bytes go, for a request on an HTTP/2 stream (``HTTP2Connection``);
    /// nil over HTTP/1.1, where it is the connection.
    var eventSink: (any EventStreamSink)?
    /// Who the request's bearer token names, once ``Authenticator`` found it; routes that need a
    /// caller take ``AuthenticatedContext``, which has it for certain.
    var caller: Caller?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.channel = source.channel
    }

    /// The largest JSON body (API.md's 64 KiB); uploads stream theirs (``HTTP2Responder/streamsBody``).
    static let bodyLimit = 64 * 1024
    public var maxUploadSize: Int { Self.bodyLimit }

    var clientAddress: String { channel.remoteAddress?.ipAddress ?? "unknown" }
}

/// The client-facing node role: API.md over HTTP/2 (TLS, ALPN `h2`, HTTP/1.1 for tools), backed
/// by the cluster's actors.
public final class Gateway: Sendable {
    let system: ClusterSystem
    let configuration: GatewayConfiguration
    let tokens: TokenAuthority
    let hub: StreamHub
    let sendLimiter: RateLimiter
    let writeLimiter: RateLimiter
    let readLimiter: RateLimiter
    let loginByHandle: RateLimiter
    let loginByAddress: RateLimiter
    let registrationByAddress: RateLimiter
    let uploadLimiter: RateLimiter
    /// Reports per user: 10 at once, then one a minute.
    let reportLimiter = RateLimiter(RateLimiter.Rule(perSecond: 1.0 / 60, burst: 10))
    let exportLimiter = RateLimiter(Gateway.exportRule)
    /// Each user's export being written on this gateway: one at a time.
    let exportsUnderWay = UserTally()
    /// Each user's send streams open on this gateway (`POST /v1/sends`), against `streamsPerUserMax`.
    let sendStreamsOpen = UserTally()
    /// The bytes of each user's uploads under way on this gateway (``MediaSettings/quotaBytes``).
    let uploadsUnderWay = UserTally()
    /// Each user's downloads being written on this gateway (``MediaSettings/downloadsPerUserMax``).
    let downloadsUnderWay = UserTally()
    let thumbnails = ThumbnailMaker()
    let passwords: PasswordHashing
    let logger: Logger
    /// A bcrypt hash checked when a handle is unknown, so both failures take as long.
    let decoyHash: String
    private let inbox: GatewayInboxHolder
    /// Tokens recently found valid, so that most requests do not ask the user's actor.
    let authentication: SharedAuthenticationCache
    /// The client connections open, against `clientConnectionsMax`.
    let connections: ConnectionCount

    public init(system: ClusterSystem, configuration: GatewayConfiguration, logger: Logger) throws {
        self.system = system
        self.configuration = configuration
        self.connections = ConnectionCount(max: configuration.clientConnectionsMax, perAddressMax: configuration.clientConnectionsPerAddressMax)
        self.tokens = try TokenAuthority(secret: configuration.tokenSecret)
        self.sendLimiter = RateLimiter(configuration.sendRate)
        self.writeLimiter = RateLimiter(configuration.writeRate)
        self.readLimiter = RateLimiter(configuration.readRate)
        self.loginByHandle = RateLimiter(configuration.loginRatePerHandle)
        self.loginByAddress = RateLimiter(configuration.loginRatePerAddress)
        self.registrationByAddress = RateLimiter(configuration.registrationRatePerAddress)
        self.uploadLimiter = RateLimiter(configuration.media?.uploadRate ?? RateLimiter.Rule(perSecond: 1, burst: 1))
        self.passwords = PasswordHashing(cost: configuration.bcryptCost, outstandingMax: configuration.passwordHashesOutstandingMax)
        self.logger = logger
        self.decoyHash = Bcrypt.hash("decoy-password-\(UUID())", cost: configuration.bcryptCost)
        let authentication = SharedAuthenticationCache(lease: UserActor.authenticationLease, clock: system.clock)
        self.authentication = authentication
        let (hub, inbox) = StreamHub.serving(system, logger: logger, revocations: { authentication.revoke($0) })
        self.hub = hub
        self.inbox = GatewayInboxHolder(inbox)
    }

    /// The Hummingbird application serving the client port. Run it as a service; `onRunning`
    /// gets the bound port (useful with port 0).
    public func application(onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) throws -> some ApplicationProtocol {
        let tls = try Self.tlsConfiguration(certificatePath: configuration.certificatePath, keyPath: configuration.keyPath)
        // HEAD wherever GET is served, without the body (RFC 9110 section 9.3.2).
        let router = Router(context: GatewayContext.self, options: .autoGenerateHeadEndpoints)
        // Outermost: its headers go on every answer, errors included.
        if let origins = GatewayConfiguration.origins(of: configuration.gatewayURLs), !origins.isEmpty {
            router.add(middleware: CrossOriginMiddleware(origins: origins))
        }
        router.add(middleware: APIErrorMiddleware(logger: logger))
        router.add(middleware: RequestMetricsMiddleware())
        addRoutes(to: router)
        var alpn = tls
        alpn.applicationProtocols = ["h2", "http/1.1"]
        let sslContext = try NIOSSLContext(configuration: alpn)
        let routes = router.buildResponder()
        let idleTimeout = configuration.clientIdleTimeout.map { TimeAmount.nanoseconds($0.nanoseconds) }
        let http2 = HTTP2Responder(
            respond: { try await routes.respond(to: $0, context: $1) }, bodyLimit: configuration.bodyLimitBytes, serverName: "parley",
            idleTimeout: idleTimeout, requestTimeout: .nanoseconds(configuration.requestTimeout.nanoseconds), streamsBody: Self.streamsBody,
            logger: logger)
        let connections = self.connections
        let handshakeTimeout = TimeAmount.nanoseconds(configuration.handshakeTimeout.nanoseconds)
        let server = HTTPServerBuilder { responder in
            GatewayChildChannel(
                sslContext: sslContext, http1: HTTP1Channel(responder: responder, configuration: .init(idleTimeout: idleTimeout)), http2: http2,
                connections: connections, handshakeTimeout: handshakeTimeout)
        }
        return Application(
            router: router,
            server: server,
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "parley"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) },
            logger: logger)
    }

    /// Ticks streams and renews presence leases, and gives the memory of closed connections back
    /// to the system, until cancelled.
    public func runStreams() async {
        async let trims: Void = MemoryTrim.run(after: connections, clock: system.clock, logger: logger)
        await hub.run()
        await trims
    }

    /// Ends every event stream cleanly (graceful shutdown).
    public func closeStreams() {
        hub.closeAll()
    }

    static func tlsConfiguration(certificatePath: String, keyPath: String) throws -> TLSConfiguration {
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificatePath)
            key = try NIOSSLPrivateKey(file: keyPath, format: .pem)
        } catch {
            throw TokenAuthorityError("cannot load the client TLS certificate \(certificatePath) and key \(keyPath): \(error)")
        }
        guard !chain.isEmpty else { throw TokenAuthorityError("no certificate in \(certificatePath)") }
        var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        tls.minimumTLSVersion = .tlsv12
        return tls
    }
}

/// Keeps the node's inbox actor alive for as long as the gateway lives.
private final class GatewayInboxHolder: Sendable {
    let inbox: GatewayInbox
    init(_ inbox: GatewayInbox) { self.inbox = inbox }
}

/// Turns every error into API.md's JSON error body, and logs what is the server's fault.
struct APIErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let logger: Logger

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            let apiError = APIError.from(error)
            if apiError.status.code >= 500 {
                logger.warning("request failed", metadata: [
                    "http.method": "\(request.method)", "http.path": "\(request.uri.path)", "error": "\(error)",
                ])
            }
            return try apiError.response(from: request, context: context)
        }
    }
}
