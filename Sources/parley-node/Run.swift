import ArgumentParser
import Foundation
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import ParleyChat
import ParleyGateway
import ParleyMedia
import ParleyModel
import ParleyCluster
import ParleyStore
import ParleyStorePostgres
import ParleyStoreSQLite
import ParleyTransport
import Prometheus
import ServiceLifecycle
import UnixSignals

/// `parley-node run`: every option is also an environment variable; the flag wins.
struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a node: join the cluster, host actors (worker) and/or serve clients (gateway).",
        discussion: """
            Every option can also be given as the environment variable named beside it; a flag \
            wins over the variable. Start every node with the same --seeds: a node skips itself in \
            the list, and the first seed up forms the cluster. SIGTERM or SIGINT leaves the cluster \
            gracefully (its actors move at once) and exits within 5 s.
            """)

    @Option(help: "This node's name, unique in the cluster; its certificate is TLS-DIR/NAME.pem. (env PARLEY_NAME)")
    var name: String?

    @Option(help: "worker, gateway, or worker,gateway. (env PARLEY_ROLES; default worker)")
    var roles: String?

    @Option(help: "Address the cluster port binds to. (env PARLEY_CLUSTER_HOST; default 127.0.0.1)")
    var clusterHost: String?

    @Option(help: "The cluster port (mutual TLS between nodes). (env PARLEY_CLUSTER_PORT; default 7600)")
    var clusterPort: Int?

    @Option(help: "Host other nodes dial to reach this one, when it differs from --cluster-host (e.g. 0.0.0.0). (env PARLEY_ADVERTISE_HOST; default the cluster host)")
    var advertiseHost: String?

    @Option(help: "Comma-separated host:port of seed nodes' cluster ports. (env PARLEY_SEEDS; default none: form a cluster alone)")
    var seeds: String?

    @Option(help: "Directory with ca.pem, NAME.pem and NAME-key.pem (see `parley-node certs`). (env PARLEY_TLS_DIR)")
    var tlsDir: String?

    @Option(help: "Address of the operations port (/healthz, /readyz, /metrics, /v1/cluster). (env PARLEY_OPS_HOST; default 127.0.0.1)")
    var opsHost: String?

    @Option(help: "The operations port. (env PARLEY_OPS_PORT; default 7700)")
    var opsPort: Int?

    @Option(help: "Bearer token required by GET /v1/cluster on the operations port and by operators' routes on the client port (POST /v1/webhooks/NAME/replay), at least 16 bytes; a node refuses to start without one unless given --insecure-no-admin-token. (env PARLEY_ADMIN_TOKEN)")
    var adminToken: String?

    @Flag(help: "Start without an admin token: GET /v1/cluster is then open to whoever reaches the operations port. (env PARLEY_INSECURE_NO_ADMIN_TOKEN=1)")
    var insecureNoAdminToken = false

    @Option(help: "trace, debug, info, notice, warning, error or critical. (env PARLEY_LOG_LEVEL; default info)")
    var logLevel: String?

    @Option(help: "Event-loop threads serving the node's connections. Nodes that share a machine do better with fewer: a request and the cluster call it makes then run on one thread, without a wakeup between threads (Scripts/cluster gives each node cores ÷ nodes, at least 1). (env PARLEY_EVENT_LOOPS; default one per core)")
    var eventLoops: Int?

    @Option(help: "Directory for this node's files, including the default SQLite store. (env PARLEY_DATA_DIR; default ./parley-data)")
    var dataDir: String?

    @Option(help: "sqlite:PATH (one file every node of a local cluster may share) or postgres://USER@HOST:PORT/DB. (env PARLEY_STORE; default sqlite:DATA-DIR/parley.sqlite)")
    var store: String?

    @Option(help: "Worker: the least time between the starts of two commits, 0–100ms. An append that comes sooner after the last commit began waits until then and shares the commit with whatever else came; one that comes later commits at once. 0: commits follow each other as fast as they can. (env PARLEY_COMMIT_INTERVAL; default 5ms with SQLite, 0 with PostgreSQL)")
    var commitInterval: String?

    @Option(help: "Worker: how long the handle of a deleted account stays out of reach before someone else may register it, so that nobody passes for the person who just left. 0: free at once. (env PARLEY_HANDLE_QUARANTINE; default 30d)")
    var handleQuarantine: String?

    @Option(help: "Worker: how long after sending a message its sender may still edit it. 0: messages cannot be edited. (env PARLEY_EDIT_WINDOW; default 48h)")
    var editWindow: String?

    @Option(help: "Worker: the APNs auth key (.p8, from the Apple Developer account's Keys page) that signs provider tokens; with --apns-key-id and --apns-team-id it turns on push notifications to iOS devices. (env PARLEY_APNS_KEY; default none: no APNs pushes)")
    var apnsKey: String?

    @Option(help: "Worker: the APNs auth key's 10-character key ID. (env PARLEY_APNS_KEY_ID)")
    var apnsKeyId: String?

    @Option(help: "Worker: the Apple Developer team ID the APNs key belongs to. (env PARLEY_APNS_TEAM_ID)")
    var apnsTeamId: String?

    @Option(help: "Worker: the app's bundle ID, the APNs topic of devices registered without one. (env PARLEY_APNS_TOPIC; default none: such devices get no pushes)")
    var apnsTopic: String?

    @Option(help: "Worker: other bundle IDs (comma-separated) a device may register as its APNs topic, for apps of the team besides --apns-topic's; a device naming any other topic is refused with 400, and none is ever signed for. (env PARLEY_APNS_TOPICS; default none: --apns-topic only)")
    var apnsTopics: String?

    @Option(help: "Worker: the APNs server for production devices. (env PARLEY_APNS_URL; default https://api.push.apple.com)")
    var apnsUrl: String?

    @Option(help: "Worker: the APNs server for devices registered with environment sandbox (development builds). (env PARLEY_APNS_SANDBOX_URL; default https://api.sandbox.push.apple.com)")
    var apnsSandboxUrl: String?

    @Option(help: "Worker: the Firebase service account's JSON key file; it turns on push notifications through FCM. (env PARLEY_FCM_SERVICE_ACCOUNT; default none: no FCM pushes)")
    var fcmServiceAccount: String?

    @Option(help: "Worker: the FCM HTTP v1 server. (env PARLEY_FCM_URL; default https://fcm.googleapis.com)")
    var fcmUrl: String?

    @Option(help: "Worker: where the FCM service account gets its OAuth 2 access tokens. (env PARLEY_FCM_TOKEN_URL; default the key file's token_uri)")
    var fcmTokenUrl: String?

    @Option(help: "Worker: a PEM file of certificate authorities the push providers' servers are checked against instead of the system's. (env PARLEY_PUSH_CA; default the system's)")
    var pushCa: String?

    @Option(help: "Worker: what a push notification says, which Apple or Google and the phone's lock screen see: full (names and the message's text), sender (names, no text) or none (only how many messages are new). (env PARLEY_PUSH_PREVIEW; default full)")
    var pushPreview: String?

    @Option(help: "Worker: the least time between two push notifications of one conversation to one user; the messages in between are told of together. 0–60s. (env PARLEY_PUSH_WINDOW; default 3s)")
    var pushWindow: String?

    @Option(help: "Worker: a JSON file of webhook endpoints, {\"endpoints\": [{\"name\", \"url\", \"secret\": \"whsec_…\", \"events\": [\"message.created\", \"conversation.*\", \"receipt.*\"]}]}; the same on every worker (docs/OPERATIONS.md, \"Webhooks\"). (env PARLEY_WEBHOOKS; default none: no webhooks)")
    var webhooks: String?

    @Option(help: "Worker: a PEM file of certificate authorities https webhook endpoints are checked against instead of the system's. (env PARLEY_WEBHOOK_CA; default the system's)")
    var webhookCa: String?

    @Option(help: "Worker: the longest wait between two attempts to deliver a webhook to an endpoint that keeps failing (the waits double from 1 s up to it); how soon a recovered endpoint is caught up. 1s–1h. (env PARLEY_WEBHOOK_RETRY_MAX; default 10m)")
    var webhookRetryMax: String?

    @Option(help: "Gateway: address the client port (HTTPS, HTTP/2 and HTTP/1.1) binds to. (env PARLEY_CLIENT_HOST; default 127.0.0.1)")
    var clientHost: String?

    @Option(help: "Gateway: the client port. (env PARLEY_CLIENT_PORT; default 8443)")
    var clientPort: Int?

    @Option(help: "Gateway: PEM certificate chain of the client port. (env PARLEY_CLIENT_TLS_CERT; default TLS-DIR/NAME-client.pem, from `parley-node certs issue NAME --client`)")
    var clientTlsCert: String?

    @Option(help: "Gateway: PEM private key of the client port. (env PARLEY_CLIENT_TLS_KEY; default TLS-DIR/NAME-client-key.pem)")
    var clientTlsKey: String?

    @Option(help: "Gateway: the secret that signs access tokens, at least 32 bytes, the same on every gateway. (env PARLEY_TOKEN_SECRET; required for gateways)")
    var tokenSecret: String?

    @Option(help: "Gateway: how long a send whose conversation owner died is retried before 503, 0–120s. (env PARLEY_SEND_RETRY; default 5s)")
    var sendRetry: String?

    @Option(help: "Gateway: the directory uploads (POST /v1/media) are kept in, by their SHA-256; every gateway of a cluster must see the same one. (env PARLEY_MEDIA_DIR; default a media directory beside the SQLite file, or DATA-DIR/media with PostgreSQL)")
    var mediaDir: String?

    @Option(help: "Gateway: the largest upload in bytes; a larger one is 413. (env PARLEY_MEDIA_MAX_BYTES; default 26214400, 25 MiB)")
    var mediaMaxBytes: Int?

    @Option(help: "Gateway: the bytes of all of one user's uploads together; past it an upload is 413 quota_exceeded; 0: no quota. (env PARLEY_MEDIA_QUOTA_BYTES; default 1073741824, 1 GiB)")
    var mediaQuotaBytes: Int?

    @Option(help: "Gateway: uploads a user may make per second (bursts of 10× are allowed). (env PARLEY_UPLOAD_RATE; default 2)")
    var uploadRate: Double?

    @Option(help: "Gateway: every gateway's public URL (https://host:port), comma-separated, this one's included: the web client fails over among them, and each gateway answers the API to pages the others served (CORS for those origins only). (env PARLEY_GATEWAY_URLS; default none: a page uses its own gateway only)")
    var gatewayUrls: String?

    @Flag(inversion: .prefixedNo, help: "Gateway: serve the web client at / (a reference chat app in plain JavaScript, embedded in the binary). (env PARLEY_WEB_CLIENT=0 or 1; default on)")
    var webClient: Bool?

    @Option(help: "Gateway: how long an upload no message has attached is kept; then a sweep removes it and, when no other upload has the same bytes, its bytes and thumbnails. 0: kept for ever. (env PARLEY_MEDIA_KEEP_UNATTACHED; default 24h)")
    var mediaKeepUnattached: String?

    @Flag(inversion: .prefixedNo, help: "Gateway: remove where a photo or video was taken (EXIF and XMP GPS, QuickTime and MP4 location; JPEG, PNG, WebP, HEIC, MP4, MOV, M4A) before it is kept; phones record it, and people sending a photo rarely mean to share it. A file whose metadata cannot be walked is refused (415). (env PARLEY_STRIP_LOCATION=0 or 1; default on)")
    var stripLocation: Bool?

    @Option(help: "Gateway: messages a user may send per second (bursts of 2.5× are allowed). (env PARLEY_SEND_RATE; default 20)")
    var sendRate: Double?

    @Option(help: "Gateway: other changes a user may make per second — new conversations, renames, members, receipts, typing, presence, profile, logout (bursts of 5× are allowed). (env PARLEY_WRITE_RATE; default 20)")
    var writeRate: Double?

    @Option(help: "Gateway: reads a user may make per second — every authenticated GET: conversations, history, users, media, thumbnails, event streams opened (bursts of 5× are allowed). (env PARLEY_READ_RATE; default 50)")
    var readRate: Double?

    @Option(help: "Gateway: logins one client address may make per second (bursts of 15× are allowed); each handle also has its own limit of one per 5 s. (env PARLEY_LOGIN_RATE; default 2)")
    var loginRate: Double?

    @Option(help: "Gateway: a resume is refused with 410 cursor_expired (the client reloads instead) when more than this many messages were committed after its cursor in the user's conversations. (env PARLEY_REPLAY_MAX; default 5000)")
    var replayMax: Int?

    @Option(help: "Gateway: registrations one client address may make per second (bursts of 20× are allowed). (env PARLEY_REGISTRATION_RATE; default 0.5)")
    var registrationRate: Double?

    @Option(help: "Gateway: event streams one user may have open at once on this gateway; one more is 429 too_many_streams. (env PARLEY_STREAMS_PER_USER; default 10)")
    var streamsPerUser: Int?

    @Option(help: "Gateway: bcrypt cost of stored passwords, 4–31. (env PARLEY_BCRYPT_COST; default 10)")
    var bcryptCost: Int?

    @Option(help: "Gateway: how long a client connection may sit with nothing in progress before it is closed (HTTP/2: no open stream — an open event stream is never idle; HTTP/1.1: between requests); 0: never. (env PARLEY_CLIENT_IDLE_TIMEOUT; default 300s)")
    var clientIdleTimeout: String?

    @Option(help: "Gateway: client connections open at once; past it a new one is closed at once, before TLS. (env PARLEY_CLIENT_CONNECTIONS_MAX; default 10000)")
    var clientConnectionsMax: Int?

    @Option(help: "Gateway: the client connections one address may hold, so that one host without an account cannot take every slot; many users behind one NAT share an address, so keep it well above what one user opens. 0: no share (behind a proxy that connects from one address). (env PARLEY_CLIENT_CONNECTIONS_PER_ADDRESS; default 1000)")
    var clientConnectionsPerAddress: Int?

    @Option(help: "Gateway: how long a new client connection has to finish its TLS handshake. (env PARLEY_CLIENT_HANDSHAKE_TIMEOUT; default 10s)")
    var clientHandshakeTimeout: String?

    @Option(help: "Gateway: how long a request has to arrive whole — from its first byte (HTTP/1.1) or its headers (HTTP/2) to the end of its body — else 408; an upload (either protocol) instead may go on while no such time passes without bytes; a send socket (CONNECT /v1/sends) must name its token within it, else it is reset. (env PARLEY_CLIENT_REQUEST_TIMEOUT; default 30s)")
    var clientRequestTimeout: String?

    func run() async throws {
        let config = try NodeConfiguration(self, environment: ProcessInfo.processInfo.environment)
        // Before anything uses NIO's shared event-loop group (it is made on first use).
        if let loops = config.eventLoops { NIOSingletons.groupLoopCountSuggestion = loops }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = config.logLevel
            return handler
        }
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        var logger = Logger(label: "parley.node")
        logger[metadataKey: "node.id"] = "\(config.cluster.name)"
        // Before any database opens (SQLite's process-wide settings).
        if !SQLiteChatStore.turnOffMemoryStatistics() { logger.warning("SQLite's memory statistics could not be turned off: SQLite was already in use") }
        logger.info("event loops", metadata: ["loops": "\(NIOSingletons.groupLoopCountSuggestion)"])

        let tls: ClusterTLS
        do {
            tls = try ClusterTLS.load(directory: config.tlsDirectory, node: config.cluster.name)
        } catch {
            throw ValidationError("\(error)")
        }
        let transport = NIOClusterTransport(bindAddress: config.cluster.bindAddress, tls: tls, logger: Logger(label: "parley.transport"))
        let system = ClusterSystem(settings: config.cluster, transport: transport, clock: ContinuousClock(), logger: Logger(label: "parley.cluster"))
        var workerStore: (any ChatStore)?
        if config.cluster.roles.contains(.worker) {
            let store = try await config.store.open(logger: Logger(label: "parley.store"))
            workerStore = store
            let commitInterval = config.commitInterval ?? config.store.defaultCommitInterval
            let pushes = try config.pushes.map { try $0.settings(clock: system.clock, logger: Logger(label: "parley.push")) }
            let webhooks = try await config.webhooks?.settings(clock: system.clock).recordingFirstSeen(in: store, now: system.clock.wallNow)
            var limits = ChatLimits()
            limits.handleQuarantine = config.handleQuarantine
            limits.editWindow = config.editWindow
            let services = ChatServices(
                store: store, committer: GroupCommitter(store: store, minInterval: commitInterval, clock: system.clock), limits: limits, pushes: pushes,
                webhooks: webhooks, checkpoint: CrashPoint.checkpoint(environment: ProcessInfo.processInfo.environment, logger: logger), clock: system.clock)
            ConversationActor.register(on: system, services: services)
            UserActor.register(on: system, services: services)
            PresenceShard.register(on: system)
            AccountDirectory.register(on: system, services: services)
            SafetyDesk.register(on: system, services: services)
            logger.info("store ready", metadata: ["store": "\(config.store)", "commit_interval": "\(DurationText.format(commitInterval))"])
            if let webhooks {
                logger.info("webhooks on", metadata: [
                    "webhook.endpoints": "\(webhooks.endpoints.map { "\($0.name) \($0.url) \($0.types.map(\.rawValue).sorted())" })",
                ])
            }
            if let pushes {
                logger.info("push notifications on", metadata: [
                    "push.providers": "\(pushes.providers.keys.map(\.rawValue).sorted())", "push.preview": "\(pushes.preview.rawValue)",
                    "push.window": "\(DurationText.format(pushes.policy.window))",
                ])
            }
        }
        if config.webhooks != nil, !config.cluster.roles.contains(.worker) {
            logger.notice("the webhook endpoints are left unused: workers deliver webhooks, and this node is not one")
        }
        if config.pushes != nil, !config.cluster.roles.contains(.worker) {
            logger.notice("the push provider settings are left unused: workers send push notifications, and this node is not one")
        }
        let respond: @Sendable (HTTPMethod, String, HTTPHeaders) -> OpsServer.Response = { method, path, headers in
            OpsRoutes.respond(method: method, path: path, headers: headers, system: system, registry: registry, adminToken: config.adminToken)
        }
        let ops = OpsServer(host: config.opsHost, port: config.opsPort, logger: logger, router: respond)
        var gateway: Gateway?
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = []
        if var gatewayConfig = config.gateway, let media = config.media {
            // A gateway that is not also a worker opens the store for the blobs it keeps in it and
            // for the sweeper.
            var store = workerStore
            if store == nil, media.keepUnattached != nil || media.placement.isDatabase {
                store = try await config.store.open(logger: Logger(label: "parley.store"))
            }
            let blobs = try await Self.openBlobs(media.placement, store: config.store, opened: store, clock: system.clock, logger: logger)
            gatewayConfig.media = media.settings(blobs: blobs)
            if let keep = media.keepUnattached, let store {
                let sweeper = MediaSweeper(store: store, blobs: blobs, keepUnattached: keep, clock: system.clock, random: system.random)
                services.append(.init(service: MediaSweeperService(sweeper: sweeper)))
                logger.info("uploads never attached are removed", metadata: [
                    "media.keep_unattached": "\(DurationText.format(keep))", "media.sweep_every": "\(DurationText.format(sweeper.interval))",
                ])
            }
            let made: Gateway
            do {
                made = try Gateway(system: system, configuration: gatewayConfig, logger: Logger(label: "parley.gateway"))
            } catch {
                throw ValidationError("\(error)")
            }
            gateway = made
            let (nodeLogger, clientHost) = (logger, gatewayConfig.host)
            let application = try made.application { port in
                nodeLogger.info("client port listening (HTTPS: h2 and http/1.1)", metadata: ["client.host": "\(clientHost)", "client.port": "\(port)"])
            }
            services.append(.init(service: application))
            // Services shut down in reverse order: the streams end first, so the application can
            // drain its requests, then the node leaves the cluster.
            services.append(.init(service: StreamCloser(gateway: made)))
        }
        let node = NodeService(system: system, ops: ops, gateway: gateway, logger: logger)
        services.insert(.init(service: node), at: 0)
        services.append(.init(service: ShutdownWatchdog(logger: logger)))
        var groupConfig = ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint], cancellationSignals: [], logger: logger)
        groupConfig.maximumGracefulShutdownDuration = .seconds(4)
        // Cancellation after the grace period must not crash the process: the watchdog below ends it.
        groupConfig.maximumCancellationDuration = nil
        try await ServiceGroup(configuration: groupConfig).run()
        logger.info("stopped")
    }

    /// The store a gateway keeps uploads' bytes in. Uploads a gateway left unfinished when it
    /// died are removed once an hour old (others may be writing theirs now).
    static func openBlobs(
        _ placement: MediaConfiguration.Placement, store: StoreLocation, opened: (any ChatStore)?, clock: any ClusterClock, logger: Logger
    ) async throws -> any BlobStore {
        switch placement {
        case .directory(let path):
            do {
                return try FileBlobStore(directory: URL(fileURLWithPath: path), now: clock.wallNow)
            } catch {
                throw ValidationError("the media directory \(path) cannot be used: \(error)")
            }
        case .database:
            var database = opened as? PostgresChatStore
            if database == nil { database = try await store.open(logger: Logger(label: "parley.store")) as? PostgresChatStore }
            guard let database else { throw ValidationError("uploads go to the PostgreSQL store only when it is the store; give --media-dir") }
            let blobs = PostgresBlobStore(store: database, wallClock: { clock.wallNow })
            let removed = try await blobs.removeLeftovers(olderThan: .seconds(3600))
            logger.info("uploads kept in the PostgreSQL store", metadata: ["store": "\(store)", "media.leftover_chunks_removed": "\(removed)"])
            return blobs
        }
    }
}

/// Runs the node until a graceful shutdown: then ends the event streams cleanly (a gateway) and
/// leaves the cluster.
struct NodeService: Service {
    let system: ClusterSystem
    let ops: OpsServer
    let gateway: Gateway?
    let logger: Logger

    func run() async throws {
        try await system.start()
        try await ops.start()
        let streams = Task { await gateway?.runStreams() }
        try? await gracefulShutdown()
        logger.info("shutdown requested: leaving the cluster")
        streams.cancel()
        await system.shutdown()
        await ops.stop()
    }
}

/// The process's resident memory and CPU time, from /proc (Linux), in Prometheus text.
func processMetrics() -> String {
    var text = ""
    let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
    if let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
        let resident = statm.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
    {
        text += "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes \(resident * pageSize)\n"
    }
    if let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8), let end = stat.lastIndex(of: ")") {
        // Fields after the command name: utime and stime are the 12th and 13th (in clock ticks).
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        if fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) {
            let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
            text += "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total \((user + system) / ticks)\n"
        }
    }
    return text
}

/// Ends a gateway's event streams cleanly when a graceful shutdown begins.
/// Sweeps uploads never attached (``MediaSweeper``) until a graceful shutdown.
struct MediaSweeperService: Service {
    let sweeper: MediaSweeper

    func run() async throws {
        await cancelWhenGracefulShutdown { await sweeper.run() }
    }
}

struct StreamCloser: Service {
    let gateway: Gateway

    func run() async throws {
        try? await gracefulShutdown()
        gateway.closeStreams()
    }
}

/// Makes sure the process exits within 5 s of a graceful shutdown's start: an HTTP/1.1 client
/// that keeps an idle connection open can hold the HTTP server's drain (the streams have ended and
/// the cluster has been left by then). Shut down first, as the last service in the group.
struct ShutdownWatchdog: Service {
    let logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        let logger = self.logger
        Thread.detachNewThread {
            Thread.sleep(forTimeInterval: 5)
            logger.warning("still running 5 s after the shutdown began (open client connections?): exiting anyway")
            exit(0)
        }
    }
}

enum OpsRoutes {
    static func respond(
        method: HTTPMethod, path: String, headers: HTTPHeaders, system: ClusterSystem,
        registry: PrometheusCollectorRegistry, adminToken: String?
    ) -> OpsServer.Response {
        guard method == .GET || method == .HEAD else {
            return .error(.methodNotAllowed, code: "invalid_request", message: "only GET is served on the operations port")
        }
        switch path {
        case "/healthz":
            return .text(.ok, "ok")
        case "/readyz":
            let me = system.me
            if system.isReady { return .text(.ok, "ready") }
            return .text(.serviceUnavailable, me.status == .up ? "not ready: waiting to hear of every seed" : "not ready: \(me.status.rawValue)")
        case "/metrics":
            var body: [UInt8] = []
            registry.emit(into: &body)
            body += Array(processMetrics().utf8)
            return OpsServer.Response(status: .ok, contentType: "text/plain; version=0.0.4", body: body)
        case "/v1/cluster":
            if let adminToken, !AdminToken.matches(headers.first(name: "Authorization"), adminToken) {
                return .error(.unauthorized, code: "unauthorized", message: "the admin token is required")
            }
            return .json(.ok, system.view)
        default:
            return .error(.notFound, code: "not_found", message: "no route \(path)")
        }
    }
}
