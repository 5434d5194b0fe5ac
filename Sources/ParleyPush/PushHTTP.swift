import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
import ParleyChat
import ParleyModel

/// The HTTP client FCM and webhooks talk through (APNs has its own, ``APNsProvider``): one pool
/// of connections per sender, each request bounded in time.
struct PushHTTP: Sendable {
    let client: HTTPClient
    /// Each request's bound: a user's actor answers its conversation's owner within the owner's
    /// call timeout (5 s), else the owner sends the notice again.
    let timeout: TimeAmount

    /// - Parameter trustRoots: a PEM file of certificate authorities to trust instead of the
    ///   system's (a local provider's, in tests); nil: the system's.
    init(trustRoots: String?, timeout: TimeAmount = .seconds(4)) throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let trustRoots { tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(trustRoots)) }
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls, timeout: .init(connect: .seconds(3)))
        configuration.httpVersion = .automatic
        self.client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        self.timeout = timeout
    }

    /// The response's status, headers and up to 64 KiB of its body.
    func post(_ url: String, headers: HTTPHeaders, body: Data) async throws -> (status: HTTPResponseStatus, headers: HTTPHeaders, body: Data) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers = headers
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await client.execute(request, timeout: timeout)
        let received = try await response.body.collect(upTo: 64 * 1024)
        return (response.status, response.headers, Data(received.readableBytesView))
    }

    func shutdown() async throws {
        try await client.shutdown()
    }

    /// `send` to every device at once; the outcomes in the devices' order.
    static func each(_ devices: [Device], _ send: @escaping @Sendable (Device) async -> PushOutcome) async -> [PushOutcome] {
        await withTaskGroup(of: (Int, PushOutcome).self) { group in
            for (index, device) in devices.enumerated() {
                group.addTask { (index, await send(device)) }
            }
            var outcomes = [PushOutcome](repeating: .refused("not sent"), count: devices.count)
            for await (index, outcome) in group { outcomes[index] = outcome }
            return outcomes
        }
    }

    /// A `Retry-After` header's delay: seconds, or an HTTP date (RFC 9110 §10.2.3); nil when absent
    /// or unreadable.
    static func retryAfter(_ header: String?, now: Date) -> Duration? {
        guard let value = header?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int(value), seconds >= 0 { return .seconds(min(seconds, 86_400)) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return .seconds(max(0, min(date.timeIntervalSince(now), 86_400)))
    }

    /// What a status that names no more specific outcome means: try a 429 or 5xx again, else the
    /// provider refused the notification.
    static func outcome(status: Int, retryAfter header: String?, reason: String, now: Date) -> PushOutcome {
        if status == 429 || status >= 500 {
            return .retry(after: retryAfter(header, now: now), reason: "\(status) \(reason)")
        }
        return .refused("\(status) \(reason)")
    }
}
