import ArgumentParser
import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyPush

/// `parley-node run --webhooks FILE`: the endpoints a worker delivers webhooks to, read from a
/// JSON file (it holds their secrets, which do not belong on a command line):
///
/// ```json
/// {"endpoints": [{"name": "bots", "url": "https://bots.example.com/parley",
///                 "secret": "whsec_…", "events": ["message.created", "conversation.*"]}]}
/// ```
///
/// Every worker must be given the same file: each conversation's events go out from its owner.
struct WebhookConfiguration {
    var endpoints: [WebhookEndpoint]
    var trustRoots: String?
    var policy = WebhookPolicy()

    private struct File: Decodable {
        var endpoints: [Endpoint]
    }

    private struct Endpoint: Decodable {
        var name: String
        var url: String
        var secret: String
        var events: [String]
    }

    /// Nil without a file; throws, naming the endpoint and what is wrong, for a file that cannot
    /// be used.
    init?(file: String?, trustRoots: String?, retryMax: Duration?) throws {
        guard let file else {
            if trustRoots != nil || retryMax != nil { throw ValidationError("--webhook-ca and --webhook-retry-max need --webhooks, the file of endpoints") }
            return nil
        }
        let parsed: File
        do {
            parsed = try JSONDecoder().decode(File.self, from: Data(contentsOf: URL(fileURLWithPath: file)))
        } catch {
            throw ValidationError("cannot read the webhook endpoints in \(file) ({\"endpoints\": [{\"name\", \"url\", \"secret\", \"events\"}]}): \(error)")
        }
        var endpoints: [WebhookEndpoint] = []
        for endpoint in parsed.endpoints {
            endpoints.append(try Self.check(endpoint, in: file))
        }
        guard Set(endpoints.map(\.name)).count == endpoints.count else { throw ValidationError("\(file): two webhook endpoints have the same name") }
        self.endpoints = endpoints
        self.trustRoots = trustRoots
        if let retryMax { policy.retry.max = max(retryMax, policy.retry.first) }
    }

    private static func check(_ endpoint: Endpoint, in file: String) throws -> WebhookEndpoint {
        let name = endpoint.name
        guard !name.isEmpty, name.count <= 64, name.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "-_.".unicodeScalars.contains($0)) }) else {
            throw ValidationError("\(file): webhook endpoint name '\(name)' must be 1–64 letters, digits, '-', '_' or '.'")
        }
        guard let url = URL(string: endpoint.url), let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http", url.host?.isEmpty == false else {
            throw ValidationError("\(file): webhook endpoint '\(name)': url '\(endpoint.url)' must be an http or https URL")
        }
        guard let secret = WebhookEndpoint.secretKey(endpoint.secret) else {
            throw ValidationError("\(file): webhook endpoint '\(name)': secret must be whsec_ and the base64 of 24–64 random bytes (e.g. `echo whsec_$(openssl rand -base64 32)`)")
        }
        var types: Set<WebhookEventType> = []
        for pattern in endpoint.events {
            guard let matched = WebhookEventType.matching(pattern) else {
                throw ValidationError("\(file): webhook endpoint '\(name)': unknown event '\(pattern)' (known: \(WebhookEventType.allCases.map(\.rawValue).joined(separator: ", ")), a family such as conversation.*, or *)")
            }
            types.formUnion(matched)
        }
        guard !types.isEmpty else { throw ValidationError("\(file): webhook endpoint '\(name)' subscribes to no events") }
        return WebhookEndpoint(name: name, url: endpoint.url, secret: secret, types: types)
    }

    func settings(clock: any ClusterClock) throws -> WebhookSettings {
        WebhookSettings(endpoints: endpoints, sender: try WebhookHTTPSender(trustRoots: trustRoots, clock: clock), policy: policy)
    }
}
