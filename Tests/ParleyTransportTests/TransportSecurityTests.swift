import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import ParleyCluster
import ParleyTransport
import Synchronization
import ParleyTestKit
import Testing

@testable import ParleyTransport
@testable import ParleyWire

/// Connects to a node's cluster port as an outsider: records what comes back and whether the
/// node closed the connection.
final class OutsiderHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let closed: EventLoopPromise<Int>
    let received = Mutex(0)

    init(closed: EventLoopPromise<Int>) { self.closed = closed }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let count = unwrapInboundIn(data).readableBytes
        received.withLock { $0 += count }
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed.succeed(received.withLock { $0 })
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

@Suite(.serialized) struct TransportSecurityTests {
    enum Credentials {
        case plainTCP
        case tlsWithoutCertificate
        case tls(directory: URL, node: String)
    }

    /// Dials `address`, sends `payload`, and returns how many (decrypted) bytes came back before the
    /// node closed the connection; nil if it was still open after `wait`.
    static func outsider(_ address: NodeAddress, trusting caDirectory: URL, _ credentials: Credentials, payload: ByteBuffer, wait: TimeAmount = .seconds(5)) async throws -> Int? {
        let group = MultiThreadedEventLoopGroup.singleton
        let closed = group.next().makePromise(of: Int.self)
        let handler = OutsiderHandler(closed: closed)
        let ca = try NIOSSLCertificate.fromPEMFile(caDirectory.appendingPathComponent("ca.pem").path)
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(ca)
        tls.certificateVerification = .noHostnameVerification
        if case .tls(let directory, let node) = credentials {
            tls.certificateChain = try NIOSSLCertificate.fromPEMFile(directory.appendingPathComponent("\(node).pem").path).map { .certificate($0) }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: directory.appendingPathComponent("\(node)-key.pem").path, format: .pem))
        }
        let context = try NIOSSLContext(configuration: tls)
        let channel = try await ClientBootstrap(group: group)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if case .plainTCP = credentials {} else {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: nil))
                    }
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
            .connect(host: address.host, port: address.port).get()
        channel.writeAndFlush(payload, promise: nil)
        let timeout = channel.eventLoop.scheduleTask(in: wait) { closed.fail(Timeout(description: "still open")) }
        defer { timeout.cancel() }
        do {
            return try await closed.futureResult.get()
        } catch {
            try? await channel.close()
            return nil
        }
    }

    static func hello(claiming name: String) -> ByteBuffer {
        let identity = PeerIdentity(id: NodeID(name: name, incarnation: 1), roles: .worker, address: NodeAddress(host: "127.0.0.1", port: 1))
        return Frame.hello(Hello(identity: identity)).encoded(allocator: ByteBufferAllocator())
    }

    @Test func outsidersAreRefusedAndTheNodeKeepsServingItsPeers() async throws {
        let cluster = try makeTestCluster()
        try await cluster.start("node-a")
        try await cluster.start("node-b")
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])
        let target = cluster["node-a"].address

        // A rogue CA issuing a certificate with a legitimate node's name.
        let rogue = URL(fileURLWithPath: Scratch.path("parley-rogue"))
        defer { try? FileManager.default.removeItem(at: rogue) }
        try ClusterCertificates.initAuthority(in: rogue, commonName: "Rogue CA", now: Date())
        try ClusterCertificates.issue(node: "node-b", in: rogue, now: Date())
        // A real certificate whose holder claims to be someone else.
        try ClusterCertificates.issue(node: "intruder", in: cluster.directory, now: Date())
        // A gateway's client-port certificate (its key sits on the machine facing the Internet).
        try ClusterCertificates.issue(node: "gateway-x", in: cluster.directory, clientPort: true, now: Date())

        let attempts: [(String, Credentials, ByteBuffer, URL)] = [
            ("plain TCP garbage", .plainTCP, ByteBuffer(bytes: (0..<512).map { UInt8(truncatingIfNeeded: $0 &* 37) }), cluster.directory),
            ("TLS without a certificate", .tlsWithoutCertificate, Self.hello(claiming: "node-b"), cluster.directory),
            ("a certificate from another CA", .tls(directory: rogue, node: "node-b"), Self.hello(claiming: "node-b"), rogue),
            ("a real certificate claiming another name", .tls(directory: cluster.directory, node: "intruder"), Self.hello(claiming: "node-b"), cluster.directory),
            ("a client-port certificate claiming its own name", .tls(directory: cluster.directory, node: "gateway-x-client"),
             Self.hello(claiming: "client port of gateway-x"), cluster.directory),
            ("a client-port certificate claiming its gateway's name", .tls(directory: cluster.directory, node: "gateway-x-client"),
             Self.hello(claiming: "gateway-x"), cluster.directory),
            ("a real certificate with an oversized frame", .tls(directory: cluster.directory, node: "intruder"), ByteBuffer(bytes: [0x7f, 0xff, 0xff, 0xff, 1]), cluster.directory),
        ]
        for (what, credentials, payload, trust) in attempts {
            // The outsider trusts the CA of whoever it thinks it talks to; the rogue trusts its own
            // CA, so its own handshake fails too, which is still a refusal.
            let answered = try await Self.outsider(target, trusting: trust == rogue ? cluster.directory : trust, credentials, payload: payload)
            #expect(answered != nil, "\(what): the node must close the connection")
            if case .plainTCP = credentials {} else {
                // Application data would be a hello answer: none may come back.
                #expect(answered == 0, "\(what): \(answered ?? -1) bytes of application data came back")
            }
        }
        // The control: the same client with its own name is answered and kept.
        let honest = try await Self.outsider(
            target, trusting: cluster.directory, .tls(directory: cluster.directory, node: "intruder"),
            payload: Self.hello(claiming: "intruder"), wait: .seconds(1))
        #expect(honest == nil, "a client with a certificate from the cluster CA and its own name is accepted")
        // The node still serves its peers.
        let key = try #require((0..<100).map { "k\($0)" }.first { cluster["node-b"].owner(of: ClusterActorID(kind: "probe", key: $0)) == "node-a" })
        #expect(try await Probe.resolve(id: ClusterActorID(kind: "probe", key: key), using: cluster["node-b"]).whereAreYou() == "node-a")
        #expect(cluster["node-a"].members.filter { $0.status == .up }.map(\.name) == ["node-a", "node-b"])
    }

    /// Keys are readable by their owner only, whatever the umask, and the folder holding the CA's
    /// key is the owner's alone. (That a key is never readable by others for a moment is by
    /// construction: it is created with its mode, `ClusterCertificates.write`.)
    @Test func keysAreCreatedReadableByTheirOwnerOnly() throws {
        let directory = URL(fileURLWithPath: Scratch.path("parley-keys")).appendingPathComponent("tls")
        defer { try? FileManager.default.removeItem(at: directory.deletingLastPathComponent()) }
        let previous = umask(0)  // the widest: the files' modes must not depend on it
        defer { umask(previous) }
        try ClusterCertificates.initAuthority(in: directory, now: Date())
        try ClusterCertificates.issue(node: "worker-1", in: directory, now: Date())
        try ClusterCertificates.issue(node: "gateway-1", in: directory, clientPort: true, now: Date())
        func mode(_ name: String) throws -> Int {
            let path = name.isEmpty ? directory.path : directory.appendingPathComponent(name).path
            return try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        }
        #expect(try mode("") == 0o700)
        for key in ["ca-key.pem", "worker-1-key.pem", "gateway-1-client-key.pem"] { #expect(try mode(key) == 0o600, "\(key)") }
        for certificate in ["ca.pem", "worker-1.pem", "gateway-1-client.pem"] { #expect(try mode(certificate) == 0o644, "\(certificate)") }
    }
}
