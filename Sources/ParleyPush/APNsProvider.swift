import Crypto
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOSSL
import ParleyChat
import ParleyCluster
import ParleyHTTP2Client
import ParleyModel
import Synchronization

/// Sends notifications to Apple's Push Notification service over HTTP/2, authenticated with a
/// provider token: a JWT signed with ES256 by the team's `.p8` key, named by its key ID
/// (Apple's "Establishing a token-based connection to APNs").
public final class APNsProvider: PushProvider {
    public struct Configuration: Sendable {
        /// The PEM text of the `.p8` key (PKCS #8, P-256).
        public var privateKeyPEM: String
        public var keyID: String
        public var teamID: String
        /// The app's bundle ID, for devices registered without a topic.
        public var defaultTopic: String?
        /// Other bundle IDs devices may name as their topic. The team's key signs for every app
        /// of the team, so a topic outside these is never sent to: a device's owner could
        /// otherwise reach another app of the same team.
        public var otherTopics: Set<String> = []
        public var productionURL = "https://api.push.apple.com"
        public var sandboxURL = "https://api.sandbox.push.apple.com"
        /// How long APNs keeps a notification for a device that is off (`apns-expiration`).
        public var expiration: Duration = .seconds(86_400)
        /// A PEM file of certificate authorities to trust instead of the system's.
        public var trustRoots: String?

        public init(privateKeyPEM: String, keyID: String, teamID: String, defaultTopic: String? = nil) {
            self.privateKeyPEM = privateKeyPEM
            self.keyID = keyID
            self.teamID = teamID
            self.defaultTopic = defaultTopic
        }

        /// The topics devices may have: ``defaultTopic`` and ``otherTopics``.
        public var allowedTopics: Set<String> { otherTopics.union(defaultTopic.map { [$0] } ?? []) }
    }

    /// Apple takes a provider token for an hour and refuses one renewed more than every 20
    /// minutes (`TooManyProviderTokenUpdates`).
    static let tokenLifetime: Duration = .seconds(50 * 60)

    /// Each request's bound: a user's actor answers its conversation's owner within the owner's
    /// call timeout (5 s), else the owner sends the notice again.
    static let requestTimeout: TimeAmount = .seconds(4)

    /// Where notifications go: `https://host[:port][/prefix]`, to `prefix/3/device/TOKEN`.
    private struct Server {
        var host: String
        var port: Int
        var pathPrefix: String

        init(_ url: String) throws {
            guard let components = URLComponents(string: url), components.scheme == "https", let host = components.host, !host.isEmpty,
                components.query == nil
            else { throw APNsError(description: "\(url) is not an https:// URL") }
            self.host = host
            self.port = components.port ?? 443
            self.pathPrefix = components.percentEncodedPath.hasSuffix("/") ? String(components.percentEncodedPath.dropLast()) : components.percentEncodedPath
        }
    }

    private let configuration: Configuration
    /// The key's raw scalar (the key type is not `Sendable`): made into a key again for each
    /// signature, once per ``tokenLifetime``.
    private let key: Data
    private let production: Server
    private let sandbox: Server
    /// Two connections to each server, on the event loops in turn; APNs lets each hold 1,000
    /// streams at once.
    private let http: HTTP2ClientPool
    private let logger: Logger
    private let token = Mutex<(jwt: String, issuedAt: ContinuousClock.Instant)?>(nil)
    /// What the token's age and the notifications' expiry go by.
    private let clock: any ClusterClock

    /// Throws when the key is not a P-256 private key in PEM, or a URL is not an https:// one.
    public init(_ configuration: Configuration, clock: any ClusterClock, logger: Logger) throws {
        self.configuration = configuration
        self.clock = clock
        self.key = try P256.Signing.PrivateKey(pemRepresentation: configuration.privateKeyPEM).rawRepresentation
        self.production = try Server(configuration.productionURL)
        self.sandbox = try Server(configuration.sandboxURL)
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = ["h2"]
        if let trustRoots = configuration.trustRoots { tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(trustRoots)) }
        self.http = HTTP2ClientPool(tls: try NIOSSLContext(configuration: tls), connectionsPerServer: 2) { connection in
            connection.connectTimeout = .seconds(3)
            // An APNs answer is a status and at most a short JSON reason.
            connection.maxResponseBody = 64 * 1024
            // Notices arrive one by one from their users' actors; a notification later by a few
            // milliseconds is no later for its reader.
            connection.flushDelay = .milliseconds(2)
        }
        self.logger = logger
    }

    public func shutdown() async throws {
        await http.shutdown()
    }

    public func send(_ content: PushContent, to devices: [Device]) async -> [PushOutcome] {
        let payload = ByteBuffer(bytes: Self.payload(content))
        return await PushHTTP.each(devices) { await self.send(payload, content: content, to: $0) }
    }

    private func send(_ payload: ByteBuffer, content: PushContent, to device: Device) async -> PushOutcome {
        guard let topic = device.topic ?? configuration.defaultTopic else {
            return .refused("the device has no topic and the node no --apns-topic")
        }
        guard configuration.allowedTopics.contains(topic) else {
            return .refused("the device's topic \(topic) is none of the node's --apns-topic and --apns-topics")
        }
        let jwt: String
        do {
            jwt = try providerToken()
        } catch {
            return .refused("cannot sign the provider token: \(error)")
        }
        let server = device.environment == .sandbox ? sandbox : production
        let expiration = Int(clock.wallNow.timeIntervalSince1970) + Int(configuration.expiration.components.seconds)
        var headers = HPACKHeaders()
        headers.add(name: "authorization", value: "bearer \(jwt)")
        headers.add(name: "apns-topic", value: topic)
        headers.add(name: "apns-push-type", value: "alert")
        headers.add(name: "apns-priority", value: "10")
        headers.add(name: "apns-collapse-id", value: Self.collapseID(content.conversationId))
        headers.add(name: "apns-expiration", value: String(expiration), indexing: .nonIndexable)
        headers.add(name: "content-type", value: "application/json")
        let request = HTTP2ClientRequest(method: "POST", path: "\(server.pathPrefix)/3/device/\(device.token)", headers: headers, body: payload, timeout: Self.requestTimeout)
        let response: HTTP2ClientResponse
        do {
            response = try await http.execute(request, host: server.host, port: server.port).get()
        } catch {
            return .retry(after: nil, reason: "APNs did not answer: \(error)")
        }
        if response.status == 200 { return .sent }
        let reason = (try? JSONDecoder().decode(Reason.self, from: Data(response.body.readableBytesView)))?.reason ?? "no reason given"
        switch (response.status, reason) {
        case (410, _), (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"):
            return .unregistered("\(response.status) \(reason)")
        case (403, "ExpiredProviderToken"), (403, "InvalidProviderToken"):
            // Sign a new one for the next attempt.
            token.withLock { $0 = nil }
            return .retry(after: nil, reason: "403 \(reason)")
        default:
            return PushHTTP.outcome(status: response.status, retryAfter: response.headers.first(name: "retry-after"), reason: reason, now: clock.wallNow)
        }
    }

    /// The provider token, signed again once it is ``tokenLifetime`` old.
    func providerToken() throws -> String {
        let now = clock.now
        if let current = token.withLock({ $0 }), now - current.issuedAt < Self.tokenLifetime { return current.jwt }
        let jwt = try JWT.sign(claims: ["iss": configuration.teamID, "iat": Int(clock.wallNow.timeIntervalSince1970)], keyID: configuration.keyID, with: .es256(try P256.Signing.PrivateKey(rawRepresentation: key)))
        token.withLock { $0 = (jwt, now) }
        logger.debug("APNs provider token signed", metadata: ["apns.key_id": "\(configuration.keyID)"])
        return jwt
    }

    /// `apns-collapse-id` takes at most 64 bytes: a longer conversation ID goes as its hash.
    static func collapseID(_ conversation: ConversationID) -> String {
        guard conversation.rawValue.utf8.count > 64 else { return conversation.rawValue }
        return SHA256.hash(data: Data(conversation.rawValue.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// The JSON APNs shows: `aps` for the system, the rest for the app. Written by hand: through
    /// JSONEncoder it was 5 % of a worker's CPU at 3,000 pushes a second.
    static func payload(_ content: PushContent) -> [UInt8] {
        var json = DirectJSON(capacity: 256 + content.body.utf8.count)
        json.raw("{")
        json.key("aps")
        json.raw("{")
        json.key("alert")
        json.raw("{")
        if let title = content.title {
            json.key("title"); json.string(title); json.raw(",")
        }
        if let subtitle = content.subtitle {
            json.key("subtitle"); json.string(subtitle); json.raw(",")
        }
        json.key("body"); json.string(content.body)
        json.raw("}"); json.raw(",")
        json.key("badge"); json.integer(Int64(content.badge)); json.raw(",")
        json.key("sound"); json.string("default"); json.raw(",")
        json.key("thread-id"); json.string(content.conversationId.rawValue)
        json.raw("}"); json.raw(",")
        json.key("conversationId"); json.string(content.conversationId.rawValue); json.raw(",")
        json.key("seq"); json.integer(content.seq)
        json.raw("}")
        return json.bytes
    }

    struct APNsError: Error, CustomStringConvertible {
        var description: String
    }

    struct Reason: Decodable {
        var reason: String
    }
}
