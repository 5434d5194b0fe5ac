import Logging
import NIOCore
import NIOSSL
import ParleyCluster
import ParleyWire
import SwiftASN1
import X509

/// The event-loop side of one connection: the hello exchange, then frames in and out.
///
/// Inbound frame bodies come from ``FrameDecoder``; outbound frames come from
/// ``ClusterConnection/write(_:)``, and are flushed once per event-loop turn however many arrived.
final class ClusterConnectionHandler: ChannelInboundHandler, LoopTurnFlushable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    enum State {
        /// Inbound: waiting for the dialer's hello.
        case awaitingHello
        /// Outbound: our hello is sent, waiting for the answer.
        case awaitingAcceptance
        case established(PeerIdentity)
        case closing
    }

    private let transport: NIOClusterTransport
    private let direction: ConnectionTable<ObjectIdentifier>.Direction
    private var state: State
    private var context: ChannelHandlerContext?
    /// Frames written in one turn of the loop go out in one flush.
    private let flusher = LoopTurnFlush(afterTurns: 1)
    private var helloTimeout: Scheduled<Void>?
    /// Senders waiting for the channel to take more (``whenWritable(_:)``).
    private var writableWaiters: [() -> Void] = []
    /// Set once the channel is registered; the transport's view of this connection.
    var connection: ClusterConnection?

    init(transport: NIOClusterTransport, direction: ConnectionTable<ObjectIdentifier>.Direction) {
        self.transport = transport
        self.direction = direction
        self.state = direction == .inbound ? .awaitingHello : .awaitingAcceptance
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        helloTimeout?.cancel()
    }

    func channelActive(context: ChannelHandlerContext) {
        let timeout = transport.settings.helloTimeout
        helloTimeout = context.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(timeout.nanoseconds)) { [weak self] in
            guard let self, case .awaiting = self.phase else { return }
            self.fail("no hello within \(timeout)")
        }
        if direction == .outbound {
            writeFrame(Frame.hello(Hello(identity: transport.identity)).encoded(allocator: context.channel.allocator))
        }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var body = unwrapInboundIn(data)
        let frame: Frame
        do {
            frame = try Frame(decoding: &body)
        } catch {
            fail("bad frame: \(error)")
            return
        }
        switch (state, frame) {
        case (.established(let peer), .message(let message)):
            transport.received(message, from: peer)
        case (.awaitingHello, .hello(let hello)):
            guard let identity = verified(hello, context: context) else { return }
            guard let connection else { return fail("not registered") }
            switch transport.helloReceived(from: identity, on: connection) {
            case .accept:
                helloTimeout?.cancel()
                state = .established(identity)
                writeFrame(Frame.helloAccepted(Hello(identity: transport.identity)).encoded(allocator: context.channel.allocator))
                transport.established(connection, peer: identity)
            case .reject(let reason):
                state = .closing
                writeFrame(Frame.helloRejected(reason).encoded(allocator: context.channel.allocator))
                context.flush()
                context.close(promise: nil)
            }
        case (.awaitingAcceptance, .helloAccepted(let hello)):
            guard let identity = verified(hello, context: context) else { return }
            guard let connection else { return fail("not registered") }
            switch transport.helloAccepted(by: identity, on: connection) {
            case .keep:
                helloTimeout?.cancel()
                state = .established(identity)
                transport.established(connection, peer: identity)
            case .close(let reason):
                state = .closing
                transport.logger.debug("closing connection", metadata: ["peer": "\(identity.id)", "reason": "\(reason)"])
                context.close(promise: nil)
            }
        case (.awaitingAcceptance, .helloRejected(let reason)):
            state = .closing
            if let connection { transport.helloRejected(on: connection, reason: reason) }
            context.close(promise: nil)
        default:
            fail("unexpected \(frame.kind) frame while \(phase)")
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        state = .closing
        helloTimeout?.cancel()
        if let connection { transport.closed(connection) }
        wakeWriters()
        context.fireChannelInactive()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { wakeWriters() }
        context.fireChannelWritabilityChanged()
    }

    /// Runs `action` once the channel is writable (at once if it is, or once it is closed).
    func whenWritable(_ action: @escaping () -> Void) {
        guard let context, context.channel.isActive, !context.channel.isWritable else { return action() }
        writableWaiters.append(action)
    }

    private func wakeWriters() {
        let waiters = writableWaiters
        writableWaiters = []
        for waiter in waiters { waiter() }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail("\(error)")
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? IdleStateHandler.IdleStateEvent, event == .read {
            fail("idle for \(transport.settings.idleTimeout)")
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// Writes a frame and makes sure a flush follows at the end of this loop turn.
    func writeFrame(_ frame: ByteBuffer) {
        guard let context else { return }
        context.write(wrapOutboundOut(frame), promise: nil)
        flusher.request(on: context.eventLoop, for: self)
    }

    func flushWritten() { context?.flush() }

    /// Checks the hello's protocol version and that the claimed name is the certificate's.
    private func verified(_ hello: Hello, context: ChannelHandlerContext) -> PeerIdentity? {
        guard hello.protocolVersion == Frame.protocolVersion else {
            fail("protocol version \(hello.protocolVersion), this node speaks \(Frame.protocolVersion)")
            return nil
        }
        // A gateway's client-port certificate is named `client port of NAME`, no node name: its key
        // (on the machine that faces the Internet) must not make a node.
        guard ClusterCertificates.isValidNodeName(hello.identity.id.name) else {
            fail("peer says it is '\(hello.identity.id.name)', which is not a node name")
            return nil
        }
        if let handler = try? context.pipeline.syncOperations.handler(type: NIOSSLHandler.self) {
            let commonName = handler.peerCertificate.flatMap(Self.commonName(of:))
            guard commonName == hello.identity.id.name else {
                fail("peer says it is '\(hello.identity.id.name)' but its certificate is for '\(commonName ?? "nobody")'")
                return nil
            }
        }
        return hello.identity
    }

    static func commonName(of certificate: NIOSSLCertificate) -> String? {
        guard let der = try? certificate.toDERBytes(), let parsed = try? Certificate(derEncoded: der) else { return nil }
        for rdn in parsed.subject {
            for attribute in rdn where attribute.type == .RDNAttributeType.commonName {
                return String(describing: attribute.value)
            }
        }
        return nil
    }

    private func fail(_ reason: String) {
        guard let context else { return }
        if case .closing = state { return }
        let peer: String
        if case .established(let identity) = state { peer = "\(identity.id)" } else { peer = "\(context.remoteAddress.map { "\($0)" } ?? "?")" }
        transport.logger.info("closing cluster connection", metadata: ["peer": "\(peer)", "reason": "\(reason)"])
        transport.countRefused(established: phase == .established)
        state = .closing
        context.close(promise: nil)
    }

    enum Phase: Equatable { case awaiting, established, closing }

    private var phase: Phase {
        switch state {
        case .awaitingHello, .awaitingAcceptance: .awaiting
        case .established: .established
        case .closing: .closing
        }
    }
}

extension Frame {
    var kind: String {
        switch self {
        case .hello: "hello"
        case .helloAccepted: "hello-accepted"
        case .helloRejected: "hello-rejected"
        case .message(.call): "call"
        case .message(.reply): "reply"
        case .message(.gossip): "gossip"
        }
    }
}
