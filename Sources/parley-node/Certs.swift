import ArgumentParser
import Foundation
import ParleyTransport

struct Certs: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Make the cluster's certificate authority and node certificates (no openssl needed).",
        subcommands: [Init.self, Issue.self])

    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a new cluster CA: DIR/ca.pem (give it to every node) and DIR/ca-key.pem (keep it safe).")

        @Option(help: "The TLS directory.")
        var dir: String

        @Option(help: "The CA certificate's common name.")
        var commonName = "Parley cluster CA"

        func run() throws {
            let directory = URL(fileURLWithPath: dir)
            do {
                try ClusterCertificates.initAuthority(in: directory, commonName: commonName, now: Date())
            } catch let failure as ClusterCertificates.Failure {
                throw ValidationError(failure.description)
            }
            print("created the cluster CA: \(directory.appendingPathComponent(ClusterCertificates.caCertificateFile).path)")
        }
    }

    struct Issue: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Issue a certificate for node NAME, signed by the CA in DIR: DIR/NAME.pem and DIR/NAME-key.pem.",
            discussion: """
                The certificate is valid for NAME, localhost and 127.0.0.1, plus any --dns and --ip given, for both server and \
                client authentication. With --client: gateway NAME's client-port certificate instead, DIR/NAME-client.pem and \
                DIR/NAME-client-key.pem, for server authentication only and not usable as a node's identity (so the key on the \
                machine that faces the Internet cannot join the cluster). A gateway serves it by default.
                """)

        @Argument(help: "The node's name, as given to `parley-node run --name`.")
        var name: String

        @Option(help: "The TLS directory holding the CA.")
        var dir: String

        @Option(help: "An extra DNS name for the certificate (repeatable).")
        var dns: [String] = []

        @Option(help: "An extra IP address for the certificate (repeatable).")
        var ip: [String] = []

        @Flag(help: "Issue gateway NAME's client-port certificate (NAME-client.pem) instead of its node certificate.")
        var client = false

        func run() throws {
            let directory = URL(fileURLWithPath: dir)
            do {
                try ClusterCertificates.issue(node: name, in: directory, dnsNames: dns, ipAddresses: ip, clientPort: client, now: Date())
            } catch let failure as ClusterCertificates.Failure {
                throw ValidationError(failure.description)
            }
            let file = client ? ClusterCertificates.clientPortCertificateFile(node: name) : ClusterCertificates.certificateFile(node: name)
            print("issued \(directory.appendingPathComponent(file).path)")
        }
    }
}
