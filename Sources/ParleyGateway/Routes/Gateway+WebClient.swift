import HTTPTypes
import Hummingbird
import NIOCore
import ParleyCluster
import ParleyWebClient

extension Gateway {
    /// Health for load balancers, and the web client's files.
    func addPublicRoutes(to router: Router<GatewayContext>) {
        // Health, for load balancers in front of the client port. The cluster view and metrics
        // are served on the operations port only: the client port faces the Internet.
        router.get("healthz") { request, context in Self.text("ok") }
        if configuration.servesWebClient {
            let origins = GatewayConfiguration.origins(of: configuration.gatewayURLs) ?? []
            let policy = WebClient.contentSecurityPolicy(connectingTo: origins.sorted())
            for (path, file) in WebClient.files {
                router.get(RouterPath(path)) { request, context in Self.webClientFile(file, policy: policy, for: request) }
            }
            // What the page needs to know of the cluster: the gateways it may fail over to.
            let settings = WebClient.File(json: WebClient.Settings(gateways: configuration.gatewayURLs))
            router.get("client.json") { request, context in Self.webClientFile(settings, policy: policy, for: request) }
        }
        router.get("readyz") { request, context in
            if self.system.isReady { return Self.text("ready") }
            return Self.text("not ready", status: .serviceUnavailable)
        }
    }

    /// One of the web client's files: revalidated each time by its content hash (`304` while it
    /// is unchanged), under the page's Content-Security-Policy, never framed.
    static func webClientFile(_ file: WebClient.File, policy: String, for request: Request) -> Response {
        let headers: HTTPFields = [
            .contentType: file.contentType,
            .eTag: file.etag,
            .cacheControl: "no-cache",
            .contentSecurityPolicy: policy,
            HTTPField.Name("X-Frame-Options")!: "DENY",
            HTTPField.Name("X-Content-Type-Options")!: "nosniff",
            HTTPField.Name("Referrer-Policy")!: "no-referrer",
        ]
        if matches(request, etag: file.etag) {
            return Response(status: .notModified, headers: headers)
        }
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: file.bytes)))
    }
}
