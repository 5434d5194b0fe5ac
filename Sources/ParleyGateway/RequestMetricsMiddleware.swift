import Dispatch
import HTTPTypes
import Hummingbird
import Metrics
import Synchronization

/// Counts requests and times them, under the labels of Hummingbird's `MetricsMiddleware`
/// (`hb.requests`, `http.server.request.duration`, `hb.request.errors`,
/// `http.server.active_requests`), with one difference that matters on the hot path: a response
/// whose body has a known length (a buffer: every JSON reply) is recorded when the handler
/// returns it, and its body is left as it is. Hummingbird's middleware wraps every body in a
/// closure to record after the write, and a closure body is written in three parts — head, body,
/// end — each flushed on its own: three TLS records and three `write`s per reply instead of one.
/// Only streaming bodies (the event stream) are still recorded after their last byte.
///
/// A request that failed is recorded under the status the client is answered with
/// (``APIError/from(_:)``, as ``APIErrorMiddleware`` answers it): a taken handle is a 409 here too,
/// not the 500 that Hummingbird's middleware records for an error it cannot read a status from.
///
/// Labels come from closed sets, never from what a client chose: a method the API does not use
/// is `other` (any token is a valid method, and each would otherwise add series to `/metrics`
/// for good, without a login), and a path no route matched is `NotFound`.
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    private let cache: RequestMetricsCache

    init(cache: RequestMetricsCache = RequestMetricsCache()) {
        self.cache = cache
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = DispatchTime.now().uptimeNanoseconds
        let method = RequestMetricsCache.label(request.method)
        let active = cache.active(method)
        active.increment()
        do {
            var response = try await next(request, context)
            let endpoint = RequestMetricsCache.Endpoint(route: context.endpointPath ?? "Unknown", method: method, status: response.status)
            if response.body.contentLength != nil {
                cache.record(endpoint, since: start)
                active.decrement()
            } else {
                let cache = self.cache
                let body = response.body
                response.body = ResponseBody { writer in
                    defer {
                        cache.record(endpoint, since: start)
                        active.decrement()
                    }
                    try await body.write(writer)
                }
            }
            return response
        } catch {
            let status = APIError.from(error).status
            let endpoint = RequestMetricsCache.Endpoint(route: context.endpointPath ?? "NotFound", method: method, status: status)
            cache.record(endpoint, since: start, failed: true)
            active.decrement()
            throw error
        }
    }
}

/// The metrics objects of each method and of each route, method and status, made once.
final class RequestMetricsCache: Sendable {
    struct Endpoint: Hashable, Sendable {
        let route: String
        let method: HTTPRequest.Method
        let status: HTTPResponse.Status
    }

    private struct EndpointMetrics {
        let requests: Counter
        let duration: Timer
        let errors: Counter

        init(_ endpoint: Endpoint, factory: any MetricsFactory) {
            let dimensions = [
                ("http.route", endpoint.route),
                ("http.request.method", endpoint.method.description),
                ("http.response.status_code", endpoint.status.code.description),
            ]
            requests = Counter(label: "hb.requests", dimensions: dimensions, factory: factory)
            duration = Timer(label: "http.server.request.duration", dimensions: dimensions, preferredDisplayUnit: .seconds, factory: factory)
            errors = Counter(label: "hb.request.errors", dimensions: [
                ("http.route", endpoint.route),
                ("http.request.method", endpoint.method.description),
                ("error.type", endpoint.status.code.description),
            ], factory: factory)
        }
    }

    /// The methods counted under their own name.
    static let methods: Set<HTTPRequest.Method> = [.get, .head, .post, .put, .patch, .delete, .options, .connect]
    static let otherMethod = HTTPRequest.Method("other")!

    /// The label a request's method is counted under.
    static func label(_ method: HTTPRequest.Method) -> HTTPRequest.Method {
        methods.contains(method) ? method : otherMethod
    }

    private let factory: any MetricsFactory
    private let byMethod = Mutex([HTTPRequest.Method: Meter]())
    private let byEndpoint = Mutex([Endpoint: EndpointMetrics]())

    /// `factory`: where the metrics are made (the process's metrics system unless a test says).
    init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
    }

    func active(_ method: HTTPRequest.Method) -> Meter {
        byMethod.withLock { meters in
            if let meter = meters[method] { return meter }
            let meter = Meter(label: "http.server.active_requests", dimensions: [("http.request.method", method.description)], factory: factory)
            meters[method] = meter
            return meter
        }
    }

    func record(_ endpoint: Endpoint, since start: UInt64, failed: Bool = false) {
        let metrics = byEndpoint.withLock { all in
            if let metrics = all[endpoint] { return metrics }
            let metrics = EndpointMetrics(endpoint, factory: factory)
            all[endpoint] = metrics
            return metrics
        }
        metrics.requests.increment()
        if failed { metrics.errors.increment() }
        metrics.duration.recordNanoseconds(DispatchTime.now().uptimeNanoseconds - start)
    }
}
