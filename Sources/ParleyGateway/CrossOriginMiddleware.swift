import Foundation
import HTTPTypes
import Hummingbird

/// Lets the web client served by one gateway call the API of the others (its failover): requests
/// whose `Origin` is one of the cluster's gateways (``GatewayConfiguration/gatewayURLs``) get
/// `Access-Control-Allow-Origin` for it, and their preflights (`OPTIONS`) an answer that allows
/// the API's methods and the `Authorization` header. Any other origin gets no such header, so a
/// browser keeps other sites' pages from reading the API with a user's token. (The token is
/// never a cookie: a page must hold it to send it.)
struct CrossOriginMiddleware<Context: RequestContext>: RouterMiddleware {
    let origins: Set<String>

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let origin = request.headers[.origin], origins.contains(origin) else {
            return try await next(request, context)
        }
        if request.method == .options, request.headers[.accessControlRequestMethod] != nil {
            return Response(status: .noContent, headers: [
                .accessControlAllowOrigin: origin,
                .accessControlAllowMethods: "GET, HEAD, POST, PUT, PATCH, DELETE",
                .accessControlAllowHeaders: "authorization, content-type, last-event-id",
                .accessControlMaxAge: "600",
                .vary: "Origin",
            ])
        }
        var response = try await next(request, context)
        response.headers[.accessControlAllowOrigin] = origin
        response.headers[values: .vary].append("Origin")
        return response
    }
}

extension GatewayConfiguration {
    /// The origin (`https://host[:port]`) of each URL; nil for one that is not an http(s) URL.
    public static func origins(of urls: [String]) -> Set<String>? {
        var origins: Set<String> = []
        for text in urls {
            guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http",
                let host = url.host?.lowercased(), !host.isEmpty
            else { return nil }
            let port = url.port.flatMap { ($0 == 443 && scheme == "https") || ($0 == 80 && scheme == "http") ? nil : $0 }
            origins.insert("\(scheme)://\(host)" + (port.map { ":\($0)" } ?? ""))
        }
        return origins
    }
}
