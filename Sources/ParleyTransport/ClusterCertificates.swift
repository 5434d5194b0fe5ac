import Crypto
import Foundation
import SwiftASN1
import X509

/// The cluster's certificate authority and the node certificates it signs, made without openssl.
///
/// A TLS directory holds `ca.pem` (the CA certificate every node trusts), `ca-key.pem` (its key:
/// keep it off the nodes in production) and, per node, `NAME.pem` and `NAME-key.pem`.
public enum ClusterCertificates {
    /// File names inside a TLS directory.
    public static let caCertificateFile = "ca.pem"
    public static let caKeyFile = "ca-key.pem"
    public static func certificateFile(node: String) -> String { "\(node).pem" }
    public static func keyFile(node: String) -> String { "\(node)-key.pem" }
    /// A gateway's client-port certificate and key: `NAME-client.pem`, `NAME-client-key.pem`.
    public static func clientPortCertificateFile(node: String) -> String { "\(node)-client.pem" }
    public static func clientPortKeyFile(node: String) -> String { "\(node)-client-key.pem" }

    /// Why certificates could not be made or read.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Creates a new cluster CA in `directory` (P-256, valid 10 years from `now`). Refuses to
    /// overwrite one.
    @discardableResult
    public static func initAuthority(in directory: URL, commonName: String = "Parley cluster CA", now: Date) throws -> Certificate {
        let certificatePath = directory.appendingPathComponent(caCertificateFile)
        guard !FileManager.default.fileExists(atPath: certificatePath.path) else {
            throw Failure(description: "\(certificatePath.path) already exists; delete it to make a new CA (every node certificate must then be issued again)")
        }
        // 0700: the directory holds the CA's key.
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let key = Certificate.PrivateKey(P256.Signing.PrivateKey())
        let name = try DistinguishedName {
            OrganizationName("Parley")
            CommonName(commonName)
        }
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: key.publicKey,
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(10 * 365 * 86400),
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: key.publicKey)
            },
            issuerPrivateKey: key)
        try write(key.serializeAsPEM().pemString, to: directory.appendingPathComponent(caKeyFile), private: true)
        try write(certificate.serializeAsPEM().pemString, to: certificatePath, private: false)
        return certificate
    }

    /// Issues a certificate for node `name`, signed by the CA in `directory`, valid for the DNS
    /// names and IP addresses given (always `name`, `localhost` and `127.0.0.1` as well), for both
    /// server and client authentication (valid 2 years from `now`).
    ///
    /// With `clientPort`, the certificate of gateway `name`'s client port instead (`NAME-client.pem`):
    /// for server authentication only, and named `client port of NAME` — not a node name, so a
    /// node refuses it in a hello (its name must be the certificate's), and its key, which sits
    /// on the machine that faces the Internet, cannot join the cluster.
    @discardableResult
    public static func issue(
        node name: String, in directory: URL, dnsNames: [String] = [], ipAddresses: [String] = [], clientPort: Bool = false, now: Date
    ) throws -> Certificate {
        guard isValidNodeName(name) else {
            throw Failure(description: "'\(name)' is not a valid node name (1–64 characters of a-z A-Z 0-9 . _ -)")
        }
        let caCertificate = try readCertificate(directory.appendingPathComponent(caCertificateFile))
        let caKey = try readKey(directory.appendingPathComponent(caKeyFile))
        var names: [GeneralName] = []
        for dns in Array(NSOrderedSet(array: [name, "localhost"] + dnsNames)) as? [String] ?? [] {
            names.append(.dnsName(dns))
        }
        for ip in Array(NSOrderedSet(array: ["127.0.0.1"] + ipAddresses)) as? [String] ?? [] {
            guard let bytes = ipAddressBytes(ip) else { throw Failure(description: "'\(ip)' is not an IP address") }
            names.append(.ipAddress(ASN1OctetString(contentBytes: bytes[...])))
        }
        let key = Certificate.PrivateKey(P256.Signing.PrivateKey())
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: key.publicKey,
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(2 * 365 * 86400),
            issuer: caCertificate.subject,
            subject: try DistinguishedName {
                OrganizationName("Parley")
                CommonName(clientPort ? "client port of \(name)" : name)
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true, keyEncipherment: true))
                try ExtendedKeyUsage(clientPort ? [.serverAuth] : [.serverAuth, .clientAuth])
                SubjectAlternativeNames(names)
                if let authorityKeyID = try? caCertificate.extensions.subjectKeyIdentifier {
                    AuthorityKeyIdentifier(keyIdentifier: authorityKeyID.keyIdentifier)
                }
            },
            issuerPrivateKey: caKey)
        let (certificateName, keyName) = clientPort
            ? (clientPortCertificateFile(node: name), clientPortKeyFile(node: name)) : (certificateFile(node: name), keyFile(node: name))
        try write(key.serializeAsPEM().pemString, to: directory.appendingPathComponent(keyName), private: true)
        try write(certificate.serializeAsPEM().pemString, to: directory.appendingPathComponent(certificateName), private: false)
        return certificate
    }

    /// 1–64 characters of `a-z A-Z 0-9 . _ -`: safe as a file name and in logs.
    public static func isValidNodeName(_ name: String) -> Bool {
        (1...64).contains(name.count)
            && name.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "._-".unicodeScalars.contains($0)) }
            && !name.hasPrefix(".")
    }

    static func readCertificate(_ url: URL) throws -> Certificate {
        do {
            return try Certificate(pemEncoded: String(contentsOf: url, encoding: .utf8))
        } catch {
            throw Failure(description: "cannot read certificate \(url.path): \(error)")
        }
    }

    static func readKey(_ url: URL) throws -> Certificate.PrivateKey {
        do {
            return try Certificate.PrivateKey(pemEncoded: String(contentsOf: url, encoding: .utf8))
        } catch {
            throw Failure(description: "cannot read private key \(url.path): \(error)")
        }
    }

    /// Writes `text` to a new file beside `url` and renames it into place, so that a reader sees
    /// the old file or the whole new one. The file is created with its final permissions (0600 for
    /// a key), never readable by others for a moment in between.
    private static func write(_ text: String, to url: URL, private isPrivate: Bool) throws {
        let temporary = url.path + ".\(getpid()).tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, isPrivate ? 0o600 : 0o644)
        guard descriptor >= 0 else {
            throw Failure(description: "cannot create \(temporary): \(String(cString: strerror(errno)))")
        }
        // The mode given to open(2) is narrowed by the umask, never widened: set it exactly.
        let bytes = Array(text.utf8)
        var written = 0
        var failure: String?
        if fchmod(descriptor, isPrivate ? 0o600 : 0o644) != 0 { failure = String(cString: strerror(errno)) }
        while failure == nil, written < bytes.count {
            let result = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress?.advanced(by: written), bytes.count - written) }
            if result < 0 {
                if errno == EINTR { continue }
                failure = String(cString: strerror(errno))
            } else {
                written += result
            }
        }
        if failure == nil, fsync(descriptor) != 0 { failure = String(cString: strerror(errno)) }
        close(descriptor)
        if failure == nil, rename(temporary, url.path) != 0 { failure = String(cString: strerror(errno)) }
        if let failure {
            unlink(temporary)
            throw Failure(description: "cannot write \(url.path): \(failure)")
        }
    }

    static func ipAddressBytes(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { Array($0) }
        }
        return nil
    }
}
