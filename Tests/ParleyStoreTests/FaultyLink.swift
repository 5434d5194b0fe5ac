import NIOCore
import NIOPosix
import Synchronization

/// A TCP relay in front of a server that a test breaks the way a failover breaks the road to
/// PostgreSQL: `refusing` closes every connection and closes new ones as soon as they are
/// accepted (HAProxy with no primary to route to); `swallowingAnswers` passes what clients send
/// and drops what the server answers (a link cut after a commit left).
final class FaultyLink: Sendable {
    enum Mode: Sendable, Equatable { case open, refusing, swallowingAnswers }

    private final class Shared: Sendable {
        private struct State {
            var mode = Mode.open
            var channels: [ObjectIdentifier: any Channel] = [:]
        }
        private let state = Mutex(State())

        var mode: Mode { state.withLock { $0.mode } }

        /// Sets the mode; returns the connections it breaks (refusing), for the caller to close.
        func set(_ mode: Mode) -> [any Channel] {
            state.withLock { state in
                state.mode = mode
                guard mode == .refusing else { return [] }
                defer { state.channels = [:] }
                return Array(state.channels.values)
            }
        }

        /// Tracks `channel` unless the link refuses; false: close it.
        func admit(_ channel: any Channel) -> Bool {
            state.withLock { state in
                guard state.mode != .refusing else { return false }
                state.channels[ObjectIdentifier(channel)] = channel
                return true
            }
        }

        func forget(_ channel: any Channel) {
            _ = state.withLock { $0.channels.removeValue(forKey: ObjectIdentifier(channel)) }
        }
    }

    /// Copies what one side reads to the other; the server's side drops it while answers are swallowed.
    private final class Relay: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let peer: any Channel
        let shared: Shared
        let carriesAnswers: Bool

        init(to peer: any Channel, shared: Shared, carriesAnswers: Bool) {
            self.peer = peer
            self.shared = shared
            self.carriesAnswers = carriesAnswers
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if carriesAnswers, shared.mode == .swallowingAnswers { return }
            peer.writeAndFlush(unwrapInboundIn(data), promise: nil)
        }

        // The client's side does not read on its own (`autoRead` off until the server's side is
        // connected): it asks for each read.
        func channelActive(context: ChannelHandlerContext) {
            context.read()
            context.fireChannelActive()
        }

        func channelReadComplete(context: ChannelHandlerContext) {
            if !carriesAnswers { context.read() }
            context.fireChannelReadComplete()
        }

        func channelInactive(context: ChannelHandlerContext) {
            shared.forget(context.channel)
            peer.close(promise: nil)
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }

    private let shared = Shared()
    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    private let listener: any Channel
    /// The port to connect to on 127.0.0.1.
    let port: Int

    init(toHost host: String, port targetPort: Int) async throws {
        let shared = shared
        listener = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.autoRead, value: false)
            .childChannelInitializer { inbound in
                guard shared.admit(inbound) else { return inbound.close() }
                return ClientBootstrap(group: inbound.eventLoop)
                    .channelInitializer { outbound in
                        outbound.eventLoop.makeCompletedFuture {
                            try outbound.pipeline.syncOperations.addHandler(Relay(to: inbound, shared: shared, carriesAnswers: true))
                        }
                    }
                    .connect(host: host, port: targetPort)
                    .flatMapThrowing { outbound in
                        guard shared.admit(outbound) else { throw ChannelError.ioOnClosedChannel }
                        try inbound.pipeline.syncOperations.addHandler(Relay(to: outbound, shared: shared, carriesAnswers: false))
                    }
                    .flatMapError { _ in inbound.close() }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        guard let port = listener.localAddress?.port else { throw ChannelError.unknownLocalAddress }
        self.port = port
    }

    /// Returns once the connections `refusing` breaks are closed: nothing a client sends after
    /// this reaches the server (a close left to happen later let a commit through).
    func set(_ mode: Mode) async {
        for channel in shared.set(mode) { try? await channel.close() }
    }

    func close() async throws {
        await set(.refusing)
        try await listener.close()
        try await group.shutdownGracefully()
    }
}
