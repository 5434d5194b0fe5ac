import Foundation
import NIOCore
import NIOHTTP1
import ParleyChat
import ParleyCluster

/// Posts webhook deliveries as Standard Webhooks describes them (standardwebhooks.com): a JSON
/// body with `webhook-id`, `webhook-timestamp` and `webhook-signature` headers, so receivers can
/// check them with that specification's libraries.
public struct WebhookHTTPSender: WebhookSender {
    private let http: PushHTTP
    /// What `webhook-timestamp` says.
    private let clock: any ClusterClock

    /// - Parameter trustRoots: a PEM file of certificate authorities to trust for `https`
    ///   endpoints instead of the system's; nil: the system's.
    public init(trustRoots: String? = nil, clock: any ClusterClock) throws {
        self.clock = clock
        // A receiver gets 10 s per delivery: enough for one that does its work before answering.
        self.http = try PushHTTP(trustRoots: trustRoots, timeout: .seconds(10))
    }

    public func deliver(_ delivery: WebhookDelivery, to endpoint: WebhookEndpoint) async -> WebhookOutcome {
        let timestamp = Int64(clock.wallNow.timeIntervalSince1970)
        var headers = HTTPHeaders()
        headers.add(name: "content-type", value: "application/json")
        headers.add(name: "user-agent", value: "Parley-Webhooks/1")
        headers.add(name: "webhook-id", value: delivery.id)
        headers.add(name: "webhook-timestamp", value: "\(timestamp)")
        headers.add(name: "webhook-signature", value: WebhookDelivery.signature(id: delivery.id, timestamp: timestamp, body: delivery.body, secret: endpoint.secret))
        do {
            let response = try await http.post(endpoint.url, headers: headers, body: Data(delivery.body))
            if (200..<300).contains(response.status.code) { return .delivered }
            return .failed(retryAfter: PushHTTP.retryAfter(response.headers.first(name: "retry-after"), now: clock.wallNow), reason: "\(response.status.code) \(response.status.reasonPhrase)")
        } catch {
            return .failed(retryAfter: nil, reason: "\(error)")
        }
    }

    public func shutdown() async throws {
        try await http.shutdown()
    }
}
