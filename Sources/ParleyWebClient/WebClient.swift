import Crypto
import Foundation
import ParleyMedia

/// Parley's reference web client (`Web/`: plain JavaScript modules and CSS, no build step),
/// embedded in the binary so that every gateway serves it at `/`.
public enum WebClient {
    public struct File: Sendable {
        public let contentType: String
        public let bytes: [UInt8]
        /// The quoted start of the bytes' SHA-256: a browser revalidates with it and gets `304`
        /// until the file changes.
        public let etag: String

        init(contentType: String, bytes: [UInt8]) {
            self.contentType = contentType
            self.bytes = bytes
            self.etag = "\"\(SHA256.hash(data: bytes).hex.prefix(24))\""
        }

        /// `value` as a JSON file.
        public init(json value: some Encodable) {
            self.init(contentType: "application/json", bytes: Array((try? JSONEncoder().encode(value)) ?? Data("{}".utf8)))
        }
    }

    /// `/client.json`: what the page knows of the cluster.
    public struct Settings: Codable, Sendable {
        /// Every gateway's URL, the page's own among them; empty: its own gateway only.
        public var gateways: [String]

        public init(gateways: [String]) {
            self.gateways = gateways
        }
    }

    /// The files by the path they are served at.
    public static let files: [String: File] = {
        let javascript = "text/javascript; charset=utf-8"
        let list: [(String, String, [UInt8])] = [
            ("/", "text/html; charset=utf-8", PackageResources.index_html),
            ("/app.js", javascript, PackageResources.app_js),
            ("/api.js", javascript, PackageResources.api_js),
            ("/outbox.js", javascript, PackageResources.outbox_js),
            ("/app.css", "text/css; charset=utf-8", PackageResources.app_css),
        ]
        var files: [String: File] = [:]
        for (path, contentType, bytes) in list { files[path] = File(contentType: contentType, bytes: bytes) }
        return files
    }()

    /// What the page may do: its own scripts and styles only (no inline code, nothing from
    /// elsewhere), requests and send sockets to its own gateway and to `origins` (the other
    /// gateways), images from it or from blobs it made (photos are fetched with the token and
    /// shown from a blob), never framed.
    public static func contentSecurityPolicy(connectingTo origins: [String]) -> String {
        // `'self'` covers the page's own `wss:`, but Chromium does not let `https://host` cover
        // `wss://host` (it blocked the socket to another gateway), so each is listed both ways.
        let sockets = origins.compactMap { $0.hasPrefix("https://") ? "wss://" + $0.dropFirst("https://".count) : nil }
        return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src "
            + (["'self'"] + origins + sockets).joined(separator: " ") + "; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    }
}
