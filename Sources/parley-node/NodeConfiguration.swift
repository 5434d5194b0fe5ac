import ArgumentParser
import Foundation
import Logging
import ParleyCluster
import ParleyGateway
import ParleyMedia
import ParleyChat
import ParleyModel
import ParleyTransport

/// `parley-node run`'s options resolved: flag, else environment variable, else default; checked.
struct NodeConfiguration {
    var cluster: ClusterSettings
    var tlsDirectory: URL
    var opsHost: String
    var opsPort: Int
    var adminToken: String?
    var logLevel: Logger.Level
    var dataDirectory: URL
    var store: StoreLocation
    /// Event-loop threads for the node's connections (cluster, clients, operations); nil: one per core.
    var eventLoops: Int?
    /// The least time between the starts of two commits (`--commit-interval`); nil: the
    /// store's default.
    var commitInterval: Duration?
    /// How long a deleted account's handle stays taken (`--handle-quarantine`).
    var handleQuarantine: Duration
    /// How long after sending a message its sender may edit it (`--edit-window`).
    var editWindow: Duration
    /// Set when the node has the gateway role.
    var gateway: GatewayConfiguration?
    /// Set when the node has the gateway role: where its uploads go (``GatewayConfiguration/media``
    /// is filled in once that store is open).
    var media: MediaConfiguration?
    /// Set when a worker was given a push provider's credentials.
    var pushes: PushConfiguration?
    /// Set when a worker was given webhook endpoints.
    var webhooks: WebhookConfiguration?

    init(_ run: Run, environment: [String: String]) throws {
        func value(_ flag: String?, _ variable: String) -> String? {
            if let flag { return flag }
            guard let text = environment[variable], !text.isEmpty else { return nil }
            return text
        }
        /// A duration (``DurationText``: a unit, or plain seconds) from the first of `sources` given —
        /// flags then variables — checked against `range`; nil if none is given.
        func duration(_ sources: [(text: String?, name: String)], in range: ClosedRange<Duration>) throws -> Duration? {
            for (text, name) in sources {
                guard let text, !text.isEmpty else { continue }
                guard let parsed = DurationText.parse(text) else { throw ValidationError(DurationText.problem(text, source: name)) }
                guard range.contains(parsed) else {
                    throw ValidationError("\(name) \(text) must be from \(DurationText.format(range.lowerBound)) to \(DurationText.format(range.upperBound))")
                }
                return parsed
            }
            return nil
        }
        /// A whole number from the flag, else the variable, checked against `range`; nil if neither is given.
        func wholeNumber(_ flag: Int?, _ flagName: String, _ variable: String, in range: ClosedRange<Int>) throws -> Int? {
            let given: (number: Int, source: String)
            if let flag {
                given = (flag, flagName)
            } else if let text = environment[variable], !text.isEmpty {
                guard let number = Int(text) else { throw ValidationError("\(variable)='\(text)' is not a whole number") }
                given = (number, variable)
            } else {
                return nil
            }
            guard range.contains(given.number) else {
                throw ValidationError("\(given.source) \(given.number) must be in \(range.lowerBound)…\(range.upperBound)")
            }
            return given.number
        }
        func port(_ flag: Int?, _ flagName: String, _ variable: String, default fallback: Int) throws -> Int {
            try wholeNumber(flag, flagName, variable, in: 0...65535) ?? fallback
        }

        guard let name = value(run.name, "PARLEY_NAME") else {
            throw ValidationError("a node name is required: --name or PARLEY_NAME")
        }
        guard ClusterCertificates.isValidNodeName(name) else {
            throw ValidationError("'\(name)' is not a valid node name (1–64 characters of a-z A-Z 0-9 . _ -)")
        }
        let rolesText = value(run.roles, "PARLEY_ROLES") ?? "worker"
        guard let roles = NodeRoles(parsing: rolesText) else {
            throw ValidationError("--roles '\(rolesText)' must be worker, gateway or worker,gateway")
        }
        let clusterHost = value(run.clusterHost, "PARLEY_CLUSTER_HOST") ?? "127.0.0.1"
        let clusterPort = try port(run.clusterPort, "--cluster-port", "PARLEY_CLUSTER_PORT", default: 7600)
        let advertiseHost = value(run.advertiseHost, "PARLEY_ADVERTISE_HOST")
        if advertiseHost == nil, clusterHost == "0.0.0.0" || clusterHost == "::" {
            throw ValidationError("--cluster-host \(clusterHost) binds every address: give --advertise-host, the address other nodes dial")
        }
        var seeds: [NodeAddress] = []
        for text in (value(run.seeds, "PARLEY_SEEDS") ?? "").split(separator: ",") where !text.trimmingCharacters(in: .whitespaces).isEmpty {
            guard let seed = NodeAddress(parsing: String(text)) else {
                throw ValidationError("seed '\(text)' is not host:port")
            }
            seeds.append(seed)
        }
        guard let tlsDir = value(run.tlsDir, "PARLEY_TLS_DIR") else {
            throw ValidationError("a TLS directory is required: --tls-dir or PARLEY_TLS_DIR (make one with `parley-node certs init` and `certs issue \(name)`)")
        }
        let levelText = value(run.logLevel, "PARLEY_LOG_LEVEL") ?? "info"
        guard let level = Logger.Level(rawValue: levelText) else {
            throw ValidationError("log level '\(levelText)' must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let bind = NodeAddress(host: clusterHost, port: clusterPort)
        self.cluster = ClusterSettings(
            name: name, roles: roles, bindAddress: bind,
            advertisedAddress: advertiseHost.map { NodeAddress(host: $0, port: clusterPort) },
            seeds: seeds, incarnations: WallClockIncarnations.of(ContinuousClock()))
        self.tlsDirectory = URL(fileURLWithPath: tlsDir)
        self.opsHost = value(run.opsHost, "PARLEY_OPS_HOST") ?? "127.0.0.1"
        self.opsPort = try port(run.opsPort, "--ops-port", "PARLEY_OPS_PORT", default: 7700)
        self.adminToken = value(run.adminToken, "PARLEY_ADMIN_TOKEN")
        self.logLevel = level
        let dataDir = value(run.dataDir, "PARLEY_DATA_DIR") ?? "parley-data"
        self.dataDirectory = URL(fileURLWithPath: dataDir)
        let storeText = value(run.store, "PARLEY_STORE") ?? "sqlite:\(dataDirectory.appendingPathComponent("parley.sqlite").path)"
        guard let store = StoreLocation(parsing: storeText) else {
            throw ValidationError("store '\(storeText)' must be sqlite:PATH or postgres://USER@HOST:PORT/DATABASE")
        }
        self.store = store
        self.eventLoops = try wholeNumber(run.eventLoops, "--event-loops", "PARLEY_EVENT_LOOPS", in: 1...256)
        self.handleQuarantine = try duration(
            [(run.handleQuarantine, "--handle-quarantine"), (environment["PARLEY_HANDLE_QUARANTINE"], "PARLEY_HANDLE_QUARANTINE")],
            in: .zero ... .seconds(366 * 86_400)) ?? AccountDeletion.defaultHandleQuarantine
        self.editWindow = try duration(
            [(run.editWindow, "--edit-window"), (environment["PARLEY_EDIT_WINDOW"], "PARLEY_EDIT_WINDOW")], in: .zero ... .seconds(366 * 86_400))
            ?? ChatLimits().editWindow
        self.commitInterval = try duration(
            [(run.commitInterval, "--commit-interval"), (environment["PARLEY_COMMIT_INTERVAL"], "PARLEY_COMMIT_INTERVAL")], in: .zero ... .milliseconds(100))

        self.pushes = try PushConfiguration(
            apnsKey: value(run.apnsKey, "PARLEY_APNS_KEY"), apnsKeyID: value(run.apnsKeyId, "PARLEY_APNS_KEY_ID"),
            apnsTeamID: value(run.apnsTeamId, "PARLEY_APNS_TEAM_ID"), apnsTopic: value(run.apnsTopic, "PARLEY_APNS_TOPIC"),
            apnsTopics: value(run.apnsTopics, "PARLEY_APNS_TOPICS"),
            apnsURL: value(run.apnsUrl, "PARLEY_APNS_URL"), apnsSandboxURL: value(run.apnsSandboxUrl, "PARLEY_APNS_SANDBOX_URL"),
            fcmServiceAccount: value(run.fcmServiceAccount, "PARLEY_FCM_SERVICE_ACCOUNT"), fcmURL: value(run.fcmUrl, "PARLEY_FCM_URL"),
            fcmTokenURL: value(run.fcmTokenUrl, "PARLEY_FCM_TOKEN_URL"), trustRoots: value(run.pushCa, "PARLEY_PUSH_CA"),
            preview: value(run.pushPreview, "PARLEY_PUSH_PREVIEW"),
            window: try duration([(run.pushWindow, "--push-window"), (environment["PARLEY_PUSH_WINDOW"], "PARLEY_PUSH_WINDOW")], in: .zero ... .seconds(60)))

        self.webhooks = try WebhookConfiguration(
            file: value(run.webhooks, "PARLEY_WEBHOOKS"), trustRoots: value(run.webhookCa, "PARLEY_WEBHOOK_CA"),
            retryMax: try duration(
                [(run.webhookRetryMax, "--webhook-retry-max"), (environment["PARLEY_WEBHOOK_RETRY_MAX"], "PARLEY_WEBHOOK_RETRY_MAX")], in: .seconds(1) ... .seconds(3600)))

        if roles.contains(.gateway) {
            guard let secret = value(run.tokenSecret, "PARLEY_TOKEN_SECRET") else {
                throw ValidationError("a gateway needs a token secret: --token-secret or PARLEY_TOKEN_SECRET (at least 32 bytes, the same on every gateway; e.g. `openssl rand -hex 32`)")
            }
            guard secret.utf8.count >= 32 else { throw ValidationError("the token secret must be at least 32 bytes") }
            let cert = value(run.clientTlsCert, "PARLEY_CLIENT_TLS_CERT")
                ?? tlsDirectory.appendingPathComponent(ClusterCertificates.clientPortCertificateFile(node: name)).path
            let key = value(run.clientTlsKey, "PARLEY_CLIENT_TLS_KEY")
                ?? tlsDirectory.appendingPathComponent(ClusterCertificates.clientPortKeyFile(node: name)).path
            guard FileManager.default.fileExists(atPath: cert), FileManager.default.fileExists(atPath: key) else {
                throw ValidationError("""
                    the client port's certificate \(cert) or key \(key) is missing: make them with \
                    `parley-node certs issue \(name) --client --dir \(tlsDir)` (add --dns/--ip for the names clients use), \
                    or give --client-tls-cert and --client-tls-key (e.g. a certificate from a public CA)
                    """)
            }
            var gateway = GatewayConfiguration(certificatePath: cert, keyPath: key, tokenSecret: secret)
            gateway.host = value(run.clientHost, "PARLEY_CLIENT_HOST") ?? "127.0.0.1"
            gateway.port = try port(run.clientPort, "--client-port", "PARLEY_CLIENT_PORT", default: 8443)
            func number(_ flag: Double?, _ variable: String, default fallback: Double, range: ClosedRange<Double>) throws -> Double {
                var result = fallback
                if let flag {
                    result = flag
                } else if let text = environment[variable], !text.isEmpty {
                    guard let parsed = Double(text) else { throw ValidationError("\(variable)='\(text)' is not a number") }
                    result = parsed
                }
                guard range.contains(result) else { throw ValidationError("\(variable) \(result) must be in \(range.lowerBound)…\(range.upperBound)") }
                return result
            }
            gateway.sendRetryWindow = try duration(
                [(run.sendRetry, "--send-retry"), (environment["PARLEY_SEND_RETRY"], "PARLEY_SEND_RETRY")], in: .zero ... .seconds(120)) ?? .seconds(5)
            let rate = try number(run.sendRate, "PARLEY_SEND_RATE", default: 20, range: 0.1...1_000_000)
            gateway.sendRate = .init(perSecond: rate, burst: max(1, rate * 2.5))
            let writeRate = try number(run.writeRate, "PARLEY_WRITE_RATE", default: 20, range: 0.1...1_000_000)
            gateway.writeRate = .init(perSecond: writeRate, burst: max(1, writeRate * 5))
            let readRate = try number(run.readRate, "PARLEY_READ_RATE", default: 50, range: 0.1...1_000_000)
            gateway.readRate = .init(perSecond: readRate, burst: max(1, readRate * 5))
            let loginRate = try number(run.loginRate, "PARLEY_LOGIN_RATE", default: 2, range: 0.1...1_000_000)
            gateway.loginRatePerAddress = .init(perSecond: loginRate, burst: max(1, loginRate * 15))
            let registrationRate = try number(run.registrationRate, "PARLEY_REGISTRATION_RATE", default: 0.5, range: 0.01...1_000_000)
            gateway.registrationRatePerAddress = .init(perSecond: registrationRate, burst: max(1, registrationRate * 20))
            gateway.streamsPerUserMax = Int(try number(run.streamsPerUser.map(Double.init), "PARLEY_STREAMS_PER_USER", default: 10, range: 1...10_000))
            gateway.replayMessagesMax = Int(try number(run.replayMax.map(Double.init), "PARLEY_REPLAY_MAX", default: 5_000, range: 1...10_000_000))
            gateway.bcryptCost = UInt8(try number(run.bcryptCost.map(Double.init), "PARLEY_BCRYPT_COST", default: 10, range: 4...31))
            let idle = try duration([(run.clientIdleTimeout, "--client-idle-timeout"), (environment["PARLEY_CLIENT_IDLE_TIMEOUT"], "PARLEY_CLIENT_IDLE_TIMEOUT")], in: .zero ... .seconds(86_400)) ?? .seconds(300)
            gateway.clientIdleTimeout = idle > .zero ? idle : nil
            gateway.clientConnectionsMax = Int(try number(run.clientConnectionsMax.map(Double.init), "PARLEY_CLIENT_CONNECTIONS_MAX", default: 10_000, range: 1...1_000_000))
            let perAddress = Int(try number(
                run.clientConnectionsPerAddress.map(Double.init), "PARLEY_CLIENT_CONNECTIONS_PER_ADDRESS", default: 1_000, range: 0...1_000_000))
            gateway.clientConnectionsPerAddressMax = perAddress > 0 ? perAddress : nil
            gateway.handshakeTimeout = try duration(
                [(run.clientHandshakeTimeout, "--client-handshake-timeout"), (environment["PARLEY_CLIENT_HANDSHAKE_TIMEOUT"], "PARLEY_CLIENT_HANDSHAKE_TIMEOUT")],
                in: .milliseconds(100) ... .seconds(600)) ?? .seconds(10)
            gateway.requestTimeout = try duration(
                [(run.clientRequestTimeout, "--client-request-timeout"), (environment["PARLEY_CLIENT_REQUEST_TIMEOUT"], "PARLEY_CLIENT_REQUEST_TIMEOUT")],
                in: .milliseconds(100) ... .seconds(3_600)) ?? .seconds(30)
            gateway.adminToken = adminToken
            gateway.servesWebClient = run.webClient ?? (environment["PARLEY_WEB_CLIENT"].map { $0 != "0" } ?? true)
            if let list = value(run.gatewayUrls, "PARLEY_GATEWAY_URLS") {
                let urls = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                guard GatewayConfiguration.origins(of: urls) != nil else {
                    throw ValidationError("--gateway-urls \(list): each must be an http(s)://host[:port] URL")
                }
                gateway.gatewayURLs = urls
            }
            let placement: MediaConfiguration.Placement
            if let directory = value(run.mediaDir, "PARLEY_MEDIA_DIR") {
                placement = .directory(directory)
            } else if case .sqlite(let path) = store {
                placement = .directory(URL(fileURLWithPath: path).deletingLastPathComponent().appendingPathComponent("media").path)
            } else {
                placement = .database
            }
            let uploadRate = try number(run.uploadRate, "PARLEY_UPLOAD_RATE", default: 2, range: 0.01...1_000_000)
            let keepUnattached = try duration(
                [(run.mediaKeepUnattached, "--media-keep-unattached"), (environment["PARLEY_MEDIA_KEEP_UNATTACHED"], "PARLEY_MEDIA_KEEP_UNATTACHED")],
                in: .zero ... .seconds(366 * 86_400)) ?? .seconds(86_400)
            let quota = Int64(try number(run.mediaQuotaBytes.map(Double.init), "PARLEY_MEDIA_QUOTA_BYTES", default: 1_073_741_824, range: 0...1e18))
            self.media = MediaConfiguration(
                placement: placement,
                maxBytes: Int64(try number(run.mediaMaxBytes.map(Double.init), "PARLEY_MEDIA_MAX_BYTES", default: 25 * 1024 * 1024, range: 1...1_099_511_627_776)),
                quotaBytes: quota > 0 ? quota : nil,
                uploadRate: .init(perSecond: uploadRate, burst: max(1, uploadRate * 10)),
                stripLocation: run.stripLocation ?? (environment["PARLEY_STRIP_LOCATION"].map { $0 != "0" } ?? true),
                keepUnattached: keepUnattached > .zero ? keepUnattached : nil)
            self.gateway = gateway
        }
        if let adminToken {
            guard adminToken.utf8.count >= 16 else { throw ValidationError("the admin token must be at least 16 bytes (e.g. `openssl rand -hex 16`)") }
        } else if !(run.insecureNoAdminToken || environment["PARLEY_INSECURE_NO_ADMIN_TOKEN"] == "1") {
            throw ValidationError("""
                an admin token is required: --admin-token or PARLEY_ADMIN_TOKEN (at least 16 bytes; e.g. `openssl rand -hex 16`). \
                Without one GET /v1/cluster is open to whoever reaches the operations port: say so with --insecure-no-admin-token.
                """)
        }
    }
}

/// Where a gateway keeps uploads' bytes, and their limits.
struct MediaConfiguration {
    enum Placement {
        /// Files under this directory (``FileBlobStore``): `--media-dir`, or beside the SQLite file.
        case directory(String)
        /// The PostgreSQL store's database (``PostgresBlobStore``): gateways on several machines.
        case database

        var isDatabase: Bool {
            if case .database = self { true } else { false }
        }
    }

    var placement: Placement
    var maxBytes: Int64
    var quotaBytes: Int64?
    var uploadRate: RateLimiter.Rule
    var stripLocation: Bool
    /// How long an upload no message has attached is kept (``MediaSweeper``); nil: for ever.
    var keepUnattached: Duration?

    func settings(blobs: any BlobStore) -> MediaSettings {
        var settings = MediaSettings(blobs: blobs)
        settings.maxBytes = maxBytes
        settings.quotaBytes = quotaBytes
        settings.uploadRate = uploadRate
        settings.stripLocation = stripLocation
        return settings
    }
}
