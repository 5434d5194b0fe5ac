import Foundation
import Logging
import NIOCore
import NIOEmbedded
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyTestKit
import Testing
@testable import ParleyGateway

/// A revocation ends the streams its tokens opened, and a stream still opening — its token found
/// valid just before the revocation arrived — is refused when it registers, for one lease.
@Suite(.serialized) struct StreamRevocationTests {
    typealias Flag = LiveEventStreamTests.Flag

    func stream(_ user: UserID, token: String) async throws -> LiveEventStream {
        try await streamOnChannel(user, token: token).stream
    }

    func streamOnChannel(_ user: UserID, token: String) async throws -> (stream: LiveEventStream, channel: NIOAsyncTestingChannel) {
        let channel = NIOAsyncTestingChannel()
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 8443)).get()
        return (LiveEventStream(
            user: user, tokenId: token, sink: ChannelEventSink(channel), cursor: StreamCursor(millis: 1_000), pingTicks: 15, clock: ContinuousClock(),
            logger: Logger(label: "test")), channel)
    }

    @Test func aStreamOpeningWhileItsTokenIsRevokedIsRefused() async throws {
        let cluster = try LoopbackCluster { _, _ in }
        try await cluster.start("node-g", roles: .gateway)
        defer { Task { await cluster.stopAll() } }
        let hub = StreamHub(system: cluster["node-g"], logger: Logger(label: "test"))

        hub.end(revokedBy: .user("u_ann", except: "kept"))
        hub.end(revokedBy: .tokens(["lost"]))
        #expect(hub.register(try await stream("u_ann", token: "phone")) == .revoked, "a token of the suspended user")
        #expect(hub.register(try await stream("u_bob", token: "lost")) == .revoked, "a revoked token")
        if case .registered = hub.register(try await stream("u_ann", token: "kept")) {} else { Issue.record("the kept token was refused") }
        if case .registered = hub.register(try await stream("u_bob", token: "other")) {} else { Issue.record("another token was refused") }

        // Registered, a revocation ends it.
        let (open, channel) = try await streamOnChannel("u_cat", token: "laptop")
        guard case .registered = hub.register(open) else {
            Issue.record("not registered")
            return
        }
        let ended = Flag()
        open.ended.whenComplete { _ in ended.set() }
        await channel.testingEventLoop.run()
        #expect(!ended.isSet)
        hub.end(revokedBy: .user("u_cat", except: nil))
        await channel.testingEventLoop.run()
        #expect(ended.isSet, "the revoked token's stream ended")

        // A lease later, the same token's next stream is the user's actor's to refuse.
        try await Task.sleep(for: UserActor.authenticationLease + .milliseconds(100))
        if case .registered = hub.register(try await stream("u_ann", token: "phone")) {} else { Issue.record("refused past the lease") }
    }
}
