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
                try ClusterCertificates.initAuthority(in: directory, commonName: commonName)
            } catch let failure as ClusterCertificates.Failure {
                throw ValidationError(failure.description)
            }
            print("created the cluster CA: \(directory.appendingPathComponent(ClusterCertificates.caCertificateFile).path)")
        }
    }

    struct Issue: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Issue a certificate for node NAME, signed by the CA in DIR: DIR/NAME.pem and DIR/NAME-key.pem.",
            discussion: "The certificate is valid for NAME, localhost and 127.0.0.1, plus any --dns and --ip given, for both server and client authentication.")

        @Argument(help: "The node's name, as given to `parley-node run --name`.")
        var name: String

        @Option(help: "The TLS directory holding the CA.")
        var dir: String

        @Option(help: "An extra DNS name for the certificate (repeatable).")
        var dns: [String] = []

        @Option(help: "An extra IP address for the certificate (repeatable).")
        var ip: [String] = []

        func run() throws {
            let directory = URL(fileURLWithPath: dir)
            do {
                try ClusterCertificates.issue(node: name, in: directory, dnsNames: dns, ipAddresses: ip)
            } catch let failure as ClusterCertificates.Failure {
                throw ValidationError(failure.description)
            }
            print("issued \(directory.appendingPathComponent(ClusterCertificates.certificateFile(node: name)).path)")
        }
    }
}
