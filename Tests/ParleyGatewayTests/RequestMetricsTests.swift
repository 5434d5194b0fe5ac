import HTTPTypes
import Hummingbird
import Logging
import MetricsTestKit
import NIOCore
import NIOEmbedded
import ParleyModel
import Testing
@testable import ParleyGateway

/// The gateway's request metrics count a failed request under the status its client got.
@Suite struct RequestMetricsTests {
    @Test func aFailedRequestIsCountedUnderTheStatusItsClientIsAnswered() async throws {
        let metrics = TestMetrics()
        let router = Router(context: GatewayContext.self)
        router.add(middleware: APIErrorMiddleware(logger: Logger(label: "test")))
        router.add(middleware: RequestMetricsMiddleware(cache: RequestMetricsCache(factory: metrics)))
        router.post("/v1/users") { _, _ -> Response in throw ChatError(.conflict, "handle alice is taken") }
        router.get("/v1/users/me") { _, _ -> Response in throw APIError.unauthorized("unknown, expired or revoked token") }
        router.get("/v1/conversations") { _, _ -> Response in Response(status: .ok, body: .init(byteBuffer: ByteBuffer(string: "{}"))) }
        let responder = router.buildResponder()
        let context = GatewayContext(source: .init(channel: EmbeddedChannel(), logger: Logger(label: "test")))

        for (method, path, expected) in [
            (HTTPRequest.Method.post, "/v1/users", HTTPResponse.Status.conflict),
            (.get, "/v1/users/me", .unauthorized),
            (.get, "/v1/conversations", .ok),
        ] {
            let request = Request(head: HTTPRequest(method: method, scheme: "https", authority: "localhost", path: path), body: .init(buffer: ByteBuffer()))
            let response = try await responder.respond(to: request, context: context)
            #expect(response.status == expected)
            let dimensions = [("http.route", path), ("http.request.method", method.rawValue), ("http.response.status_code", "\(expected.code)")]
            #expect(try metrics.expectCounter("hb.requests", dimensions).totalValue == 1)
            if expected.code >= 400 {
                let error = [("http.route", path), ("http.request.method", method.rawValue), ("error.type", "\(expected.code)")]
                #expect(try metrics.expectCounter("hb.request.errors", error).totalValue == 1)
            }
        }
        let statuses = metrics.counters.filter { $0.label == "hb.requests" }.compactMap { counter in
            counter.dimensions.first { $0.0 == "http.response.status_code" }?.1
        }
        #expect(statuses.sorted() == ["200", "401", "409"])
    }

    /// A method a client makes up is counted as `other`: any token is a valid method, and no
    /// client may add series to `/metrics` by choosing new ones.
    @Test func madeUpMethodsAddNoSeries() async throws {
        let metrics = TestMetrics()
        let router = Router(context: GatewayContext.self)
        router.add(middleware: APIErrorMiddleware(logger: Logger(label: "test")))
        router.add(middleware: RequestMetricsMiddleware(cache: RequestMetricsCache(factory: metrics)))
        router.get("/healthz") { _, _ -> Response in Response(status: .ok) }
        let responder = router.buildResponder()
        let context = GatewayContext(source: .init(channel: EmbeddedChannel(), logger: Logger(label: "test")))
        for index in 0..<200 {
            let method = HTTPRequest.Method("X\(index)Y")!
            let request = Request(head: HTTPRequest(method: method, scheme: "https", authority: "localhost", path: "/nothing/\(index)"), body: .init(buffer: ByteBuffer()))
            _ = try? await responder.respond(to: request, context: context)
        }
        let request = Request(head: HTTPRequest(method: .get, scheme: "https", authority: "localhost", path: "/healthz"), body: .init(buffer: ByteBuffer()))
        _ = try await responder.respond(to: request, context: context)
        let methods = Set((metrics.counters.map(\.dimensions) + metrics.meters.map(\.dimensions)).compactMap { dimensions in
            dimensions.first { $0.0 == "http.request.method" }?.1
        })
        #expect(methods == ["other", "GET"])
        #expect(metrics.counters.filter { $0.label == "hb.requests" }.count == 2, "one series for the made-up methods, one for GET")
    }
}
