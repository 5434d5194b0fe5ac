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
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    private let cache = RequestMetricsCache()

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = DispatchTime.now().uptimeNanoseconds
        let active = cache.active(request.method)
        active.increment()
        do {
            var response = try await next(request, context)
            let endpoint = RequestMetricsCache.Endpoint(route: context.endpointPath ?? "Unknown", method: request.method, status: response.status)
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
            let status = (error as? any HTTPResponseError)?.status ?? .internalServerError
            let endpoint = RequestMetricsCache.Endpoint(route: context.endpointPath ?? "NotFound", method: request.method, status: status)
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

        init(_ endpoint: Endpoint) {
            let dimensions = [
                ("http.route", endpoint.route),
                ("http.request.method", endpoint.method.description),
                ("http.response.status_code", endpoint.status.code.description),
            ]
            requests = Counter(label: "hb.requests", dimensions: dimensions)
            duration = Timer(label: "http.server.request.duration", dimensions: dimensions, preferredDisplayUnit: .seconds)
            errors = Counter(label: "hb.request.errors", dimensions: [
                ("http.route", endpoint.route),
                ("http.request.method", endpoint.method.description),
                ("error.type", endpoint.status.code.description),
            ])
        }
    }

    private let byMethod = Mutex([HTTPRequest.Method: Meter]())
    private let byEndpoint = Mutex([Endpoint: EndpointMetrics]())

    func active(_ method: HTTPRequest.Method) -> Meter {
        byMethod.withLock { meters in
            if let meter = meters[method] { return meter }
            let meter = Meter(label: "http.server.active_requests", dimensions: [("http.request.method", method.description)])
            meters[method] = meter
            return meter
        }
    }

    func record(_ endpoint: Endpoint, since start: UInt64, failed: Bool = false) {
        let metrics = byEndpoint.withLock { all in
            if let metrics = all[endpoint] { return metrics }
            let metrics = EndpointMetrics(endpoint)
            all[endpoint] = metrics
            return metrics
        }
        metrics.requests.increment()
        if failed { metrics.errors.increment() }
        metrics.duration.recordNanoseconds(DispatchTime.now().uptimeNanoseconds - start)
    }
}
