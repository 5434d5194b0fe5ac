import Foundation
import NIOSSL

/// The TLS material of one node: the cluster CA it trusts, and its own certificate and key.
///
/// Both directions are TLS 1.3 with certificates required and verified against the cluster CA:
/// a peer without a certificate from that CA never gets past the handshake. Host names are not
/// checked (nodes dial each other by whatever address they advertise); instead the name a peer
/// claims in its hello must be the common name of its certificate.
public struct ClusterTLS: Sendable {
    public let serverContext: NIOSSLContext
    public let clientContext: NIOSSLContext

    /// Loads `ca.pem`, `NAME.pem` and `NAME-key.pem` from `directory`.
    public static func load(directory: URL, node: String) throws -> ClusterTLS {
        func path(_ file: String) throws -> String {
            let path = directory.appendingPathComponent(file).path
            guard FileManager.default.fileExists(atPath: path) else {
                throw ClusterCertificates.Failure(description: "missing \(path) (make it with `parley-node certs init` / `certs issue \(node)`)")
            }
            return path
        }
        do {
            let ca = try NIOSSLCertificate.fromPEMFile(try path(ClusterCertificates.caCertificateFile))
            let chain = try NIOSSLCertificate.fromPEMFile(try path(ClusterCertificates.certificateFile(node: node)))
            let key = try NIOSSLPrivateKey(file: try path(ClusterCertificates.keyFile(node: node)), format: .pem)
            return try ClusterTLS(trustRoots: ca, certificateChain: chain, privateKey: key)
        } catch let failure as ClusterCertificates.Failure {
            throw failure
        } catch {
            throw ClusterCertificates.Failure(description: "cannot load TLS files for \(node) from \(directory.path): \(error)")
        }
    }

    public init(trustRoots: [NIOSSLCertificate], certificateChain: [NIOSSLCertificate], privateKey: NIOSSLPrivateKey) throws {
        var server = TLSConfiguration.makeServerConfiguration(
            certificateChain: certificateChain.map { .certificate($0) }, privateKey: .privateKey(privateKey))
        server.minimumTLSVersion = .tlsv13
        server.trustRoots = .certificates(trustRoots)
        server.certificateVerification = .noHostnameVerification  // client certificate required
        var client = TLSConfiguration.makeClientConfiguration()
        client.minimumTLSVersion = .tlsv13
        client.trustRoots = .certificates(trustRoots)
        client.certificateVerification = .noHostnameVerification
        client.certificateChain = certificateChain.map { .certificate($0) }
        client.privateKey = .privateKey(privateKey)
        self.serverContext = try NIOSSLContext(configuration: server)
        self.clientContext = try NIOSSLContext(configuration: client)
    }
}
