import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import ParleyChat
import ParleyCluster
import ParleyModel
import Synchronization
import _CryptoExtras

/// Sends notifications through Firebase Cloud Messaging's HTTP v1 API, authorised by OAuth 2
/// access tokens a service account obtains for itself: a JWT assertion signed with RS256 by the
/// account's key, exchanged at its token endpoint (RFC 7523), kept until shortly before it expires.
public final class FCMProvider: PushProvider {
    /// The service account's JSON key file, as the Firebase console downloads it.
    public struct ServiceAccount: Decodable, Sendable {
        public var projectID: String
        public var clientEmail: String
        public var privateKey: String
        public var tokenURI: String?

        enum CodingKeys: String, CodingKey {
            case projectID = "project_id"
            case clientEmail = "client_email"
            case privateKey = "private_key"
            case tokenURI = "token_uri"
        }
    }

    public struct Configuration: Sendable {
        public var account: ServiceAccount
        /// Where messages are sent: `{endpoint}/v1/projects/{project}/messages:send`.
        public var endpoint = "https://fcm.googleapis.com"
        /// Where access tokens come from; nil: the account's `token_uri`, else Google's.
        public var tokenURL: String?
        /// A PEM file of certificate authorities to trust instead of the system's.
        public var trustRoots: String?

        public init(account: ServiceAccount) {
            self.account = account
        }
    }

    static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    private let configuration: Configuration
    private let key: _RSA.Signing.PrivateKey
    private let http: PushHTTP
    private let logger: Logger
    private let accessToken = Mutex<(token: String, expiresAt: ContinuousClock.Instant)?>(nil)

    /// What the access token's expiry goes by.
    private let clock: any ClusterClock

    /// Throws when the account's key is not an RSA private key in PEM.
    public init(_ configuration: Configuration, clock: any ClusterClock, logger: Logger) throws {
        self.configuration = configuration
        self.clock = clock
        self.key = try _RSA.Signing.PrivateKey(pemRepresentation: configuration.account.privateKey)
        self.http = try PushHTTP(trustRoots: configuration.trustRoots)
        self.logger = logger
    }

    public func shutdown() async throws {
        try await http.shutdown()
    }

    private var tokenURL: String {
        configuration.tokenURL ?? configuration.account.tokenURI ?? "https://oauth2.googleapis.com/token"
    }

    public func send(_ content: PushContent, to devices: [Device]) async -> [PushOutcome] {
        let token: String
        do {
            token = try await currentAccessToken()
        } catch {
            return devices.map { _ in .retry(after: nil, reason: "no FCM access token: \(error)") }
        }
        return await PushHTTP.each(devices) { await self.send(content, to: $0, accessToken: token) }
    }

    private func send(_ content: PushContent, to device: Device, accessToken: String) async -> PushOutcome {
        let body: Data
        do {
            body = try JSONEncoder().encode(Request(message: .init(content, token: device.token)))
        } catch {
            return .refused("cannot encode the message: \(error)")
        }
        var headers = HTTPHeaders()
        headers.add(name: "authorization", value: "Bearer \(accessToken)")
        headers.add(name: "content-type", value: "application/json")
        do {
            let url = "\(configuration.endpoint)/v1/projects/\(configuration.account.projectID)/messages:send"
            let response = try await http.post(url, headers: headers, body: body)
            if response.status == .ok { return .sent }
            let error = (try? JSONDecoder().decode(ErrorBody.self, from: response.body))?.error
            let code = error?.details?.compactMap(\.errorCode).first ?? error?.status ?? "no status given"
            switch (response.status.code, code) {
            case (_, "UNREGISTERED"):
                return .unregistered("\(response.status.code) \(code)")
            case (401, _):
                // The access token expired or was revoked early: fetch a new one next time.
                self.accessToken.withLock { $0 = nil }
                return .retry(after: nil, reason: "401 \(code)")
            default:
                return PushHTTP.outcome(status: Int(response.status.code), retryAfter: response.headers.first(name: "retry-after"), reason: code, now: clock.wallNow)
            }
        } catch {
            return .retry(after: nil, reason: "FCM did not answer: \(error)")
        }
    }

    /// The cached access token, or a new one from the token endpoint once it is within a minute
    /// of expiring.
    func currentAccessToken() async throws -> String {
        let now = clock.now
        if let current = accessToken.withLock({ $0 }), now < current.expiresAt { return current.token }
        let issuedAt = Int(clock.wallNow.timeIntervalSince1970)
        let assertion = try JWT.sign(
            claims: ["iss": configuration.account.clientEmail, "scope": Self.scope, "aud": tokenURL, "iat": issuedAt, "exp": issuedAt + 3600],
            keyID: nil, with: .rs256(key))
        var headers = HTTPHeaders()
        headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
        let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)"
        let response = try await http.post(tokenURL, headers: headers, body: Data(form.utf8))
        guard response.status == .ok else {
            throw FCMError(description: "the token endpoint answered \(response.status.code): \(String(decoding: response.body.prefix(300), as: UTF8.self))")
        }
        let granted = try JSONDecoder().decode(AccessToken.self, from: response.body)
        let lifetime = max(0, (granted.expiresIn ?? 3600) - 60)
        accessToken.withLock { $0 = (granted.accessToken, now.advanced(by: .seconds(lifetime))) }
        logger.debug("FCM access token obtained", metadata: ["fcm.project": "\(configuration.account.projectID)", "expires_in": "\(granted.expiresIn ?? 3600)"])
        return granted.accessToken
    }

    struct FCMError: Error, CustomStringConvertible {
        var description: String
    }

    struct AccessToken: Decodable {
        var accessToken: String
        var expiresIn: Int?

        enum CodingKeys: String, CodingKey {
            case accessToken = "access_token"
            case expiresIn = "expires_in"
        }
    }

    /// `messages:send`'s body: what Android shows, and the data the app reads.
    struct Request: Encodable {
        struct Message: Encodable {
            struct Notification: Encodable {
                var title: String?
                var body: String
            }

            struct Android: Encodable {
                struct AndroidNotification: Encodable {
                    var tag: String
                    var notificationCount: Int

                    enum CodingKeys: String, CodingKey {
                        case tag
                        case notificationCount = "notification_count"
                    }
                }

                var collapseKey: String
                var notification: AndroidNotification

                enum CodingKeys: String, CodingKey {
                    case collapseKey = "collapse_key"
                    case notification
                }
            }

            var token: String
            var notification: Notification
            var android: Android
            var data: [String: String]

            init(_ content: PushContent, token: String) {
                self.token = token
                let title = [content.title, content.subtitle].compactMap { $0 }.joined(separator: " · ")
                notification = Notification(title: title.isEmpty ? nil : title, body: content.body)
                android = Android(
                    collapseKey: content.conversationId.rawValue,
                    notification: .init(tag: content.conversationId.rawValue, notificationCount: content.badge))
                data = ["conversationId": content.conversationId.rawValue, "seq": "\(content.seq)"]
            }
        }

        var message: Message
    }

    struct ErrorBody: Decodable {
        struct Detail: Decodable {
            var errorCode: String?
        }

        struct Body: Decodable {
            var code: Int?
            var status: String?
            var details: [Detail]?
        }

        var error: Body
    }
}
