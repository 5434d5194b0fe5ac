import Logging
import Metrics
import NIOCore
import NIOPosix
import NIOSSL
import ParleyCluster
import ParleyWire
import Synchronization

/// ``ClusterTransport`` on SwiftNIO: mutual TLS 1.3, length-prefixed frames, one connection per
/// pair of nodes, reconnects with capped backoff, bounded outbound queues.
public final class NIOClusterTransport: ClusterTransport {
    let settings: TransportSettings
    let logger: Logger
    private let tls: ClusterTLS
    private let group: any EventLoopGroup
    private let bindAddress: NodeAddress
    private let state: Mutex<State>
    /// One per event loop of the group, for the calls a connection delivers.
    private let executors: [ObjectIdentifier: EventLoopTaskExecutor]

    struct State {
        var identity: PeerIdentity
        var delegate: (any ClusterTransportDelegate)?
        var table: ConnectionTable<ObjectIdentifier>
        var connections: [ObjectIdentifier: ClusterConnection] = [:]
        /// Outbound connections whose hello is not answered yet.
        var unanswered: Set<ObjectIdentifier> = []
        var listener: (any Channel)?
        var nextSerial: UInt64 = 1
        var isShutDown = false
    }

    public init(
        bindAddress: NodeAddress, tls: ClusterTLS, settings: TransportSettings = .default,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger = Logger(label: "parley.transport")
    ) {
        self.bindAddress = bindAddress
        self.tls = tls
        self.settings = settings
        self.group = group
        self.logger = logger
        var executors: [ObjectIdentifier: EventLoopTaskExecutor] = [:]
        for loop in group.makeIterator() { executors[ObjectIdentifier(loop)] = EventLoopTaskExecutor(loop: loop) }
        self.executors = executors
        let placeholder = PeerIdentity(id: NodeID(name: "", incarnation: 0), roles: [], address: bindAddress)
        self.state = Mutex(State(
            identity: placeholder,
            table: ConnectionTable(me: placeholder.id, backoff: settings.reconnect)))
    }

    var identity: PeerIdentity { state.withLock { $0.identity } }

    /// The loop this thread runs, when it is one of the group's (delegate callbacks run on the
    /// connection's loop).
    public var currentLoopExecutor: (any TaskExecutor)? {
        MultiThreadedEventLoopGroup.currentEventLoop.flatMap { executors[ObjectIdentifier($0)] }
    }

    // MARK: ClusterTransport

    public func start(identity: PeerIdentity, delegate: any ClusterTransportDelegate) async throws -> NodeAddress {
        state.withLock { state in
            state.identity = identity
            state.delegate = delegate
            _ = state.table.reset(me: identity.id)
        }
        let listener = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 256 << 10, high: 1 << 20))
            .childChannelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try self.configure(channel, direction: .inbound, dialed: nil, sslHandler: NIOSSLServerHandler(context: tls.serverContext))
                }
            }
            .bind(host: bindAddress.host, port: bindAddress.port).get()
        state.withLock { $0.listener = listener }
        let port = listener.localAddress?.port ?? bindAddress.port
        logger.info("cluster transport listening", metadata: ["cluster.address": "\(bindAddress.host):\(port)"])
        return NodeAddress(host: bindAddress.host, port: port)
    }

    public func updateIdentity(_ identity: PeerIdentity) {
        let handles = state.withLock { state -> [ClusterConnection] in
            state.identity = identity
            let established = state.table.reset(me: identity.id).compactMap { state.connections[$0] }
            return established
        }
        for connection in handles { connection.close() }
    }

    public func send(_ message: ClusterMessage, to node: String, deadline: ContinuousClock.Instant) async throws {
        let frame = try encoded(message, for: node)
        while true {
            guard let connection = connection(to: node) else { throw ClusterTransportError.notConnected(node) }
            if connection.hasRoom(outboundBytesMax: settings.outboundBytesMax) {
                connection.write(frame)
                return
            }
            // Back-pressure: the peer (or the network) is slower than we write. Wait for room,
            // woken when the channel takes more rather than polling for it.
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { throw ClusterTransportError.backpressureTimeout(node) }
            Self.backpressureWaits.increment()
            let (seconds, attoseconds) = left.components
            await connection.waitForRoom(
                outboundBytesMax: settings.outboundBytesMax, timeout: .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000 + 1))
        }
    }

    public func sendWithoutWaiting(_ message: ClusterMessage, to node: String) throws {
        let frame = try encoded(message, for: node)
        guard let connection = connection(to: node) else { throw ClusterTransportError.notConnected(node) }
        connection.write(frame)
    }

    public func broadcast(_ message: ClusterMessage) {
        let connections = state.withLock { state in state.table.established.values.compactMap { state.connections[$0.handle] } }
        guard !connections.isEmpty, let frame = try? encoded(message, for: "every peer") else { return }
        for connection in connections where connection.hasRoom(outboundBytesMax: settings.outboundBytesMax) {
            connection.write(frame)
        }
    }

    /// The frame of `message`, unless it is over the frame limit: the peer would refuse it by
    /// closing the connection, failing every call in flight on it.
    private func encoded(_ message: ClusterMessage, for node: String) throws -> ByteBuffer {
        let frame = Frame.message(message).encoded(allocator: Self.allocator)
        let bytes = frame.readableBytes - 4  // the length prefix is not counted
        guard bytes <= settings.frameBytesMax else {
            Self.oversizedFrames.increment()
            logger.warning("a message over the frame limit was not sent", metadata: ["peer": "\(node)", "frame.bytes": "\(bytes)"])
            throw ClusterTransportError.frameTooLarge(node, bytes: bytes)
        }
        return frame
    }

    private static let allocator = ByteBufferAllocator()
    static let oversizedFrames = Counter(label: "parley.transport.oversized_frames")

    public var connectedPeers: [String] {
        state.withLock { Array($0.table.established.keys) }
    }

    public func connect(to address: NodeAddress, node: String?) {
        let go = state.withLock { state in
            !state.isShutDown && state.table.startDial(to: address, node: node, now: .now)
        }
        guard go else { return }
        let timeout = settings.connectTimeout
        ClientBootstrap(group: group)
            .connectTimeout(.nanoseconds(timeout.nanoseconds))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelOption(.writeBufferWaterMark, value: .init(low: 256 << 10, high: 1 << 20))
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let ssl = try NIOSSLClientHandler(context: tls.clientContext, serverHostname: nil)
                    try self.configure(channel, direction: .outbound, dialed: address, sslHandler: ssl)
                }
            }
            .connect(host: address.host, port: address.port)
            .whenFailure { [self] error in
                let backoff = state.withLock { $0.table.dialFailed(to: address, now: .now) }
                logger.debug("dial failed", metadata: ["peer.address": "\(address)", "error": "\(error)", "retry.in": "\(backoff)"])
            }
    }

    public func shutdown() async {
        let (listener, connections) = state.withLock { state -> ((any Channel)?, [ClusterConnection]) in
            state.isShutDown = true
            state.delegate = nil
            return (state.listener, Array(state.connections.values))
        }
        try? await listener?.close()
        for connection in connections {
            try? await connection.channel.close()
        }
    }

    // MARK: Pipeline

    private func configure(_ channel: any Channel, direction: ConnectionTable<ObjectIdentifier>.Direction, dialed: NodeAddress?, sslHandler: some ChannelHandler) throws {
        let handler = ClusterConnectionHandler(transport: self, direction: direction)
        let connection = state.withLock { state -> ClusterConnection in
            defer { state.nextSerial += 1 }
            let connection = ClusterConnection(channel: channel, direction: direction, dialedAddress: dialed, serial: state.nextSerial, handler: handler)
            state.connections[connection.key] = connection
            if direction == .outbound { state.unanswered.insert(connection.key) }
            return connection
        }
        handler.connection = connection
        let idle = settings.idleTimeout
        try channel.pipeline.syncOperations.addHandlers([
            sslHandler,
            // A loop turn's frames in one TLS record.
            WriteCoalescer(),
            IdleStateHandler(readTimeout: .nanoseconds(idle.nanoseconds)),
            ByteToMessageHandler(FrameDecoder(frameBytesMax: settings.frameBytesMax)),
            handler,
        ])
    }

    // MARK: Called by connection handlers (on their event loop)

    func helloReceived(from peer: PeerIdentity, on connection: ClusterConnection) -> ConnectionTable<ObjectIdentifier>.InboundDecision {
        let (decision, replaced) = state.withLock { state -> (ConnectionTable<ObjectIdentifier>.InboundDecision, (ClusterConnection, PeerIdentity)?) in
            let old = state.table.established[peer.id.name]
            let decision = state.table.helloReceived(from: peer, on: connection.key, serial: connection.serial)
            if case .accept(let replacing?) = decision, let old, let replaced = state.connections[replacing] {
                return (decision, (replaced, old.peer))
            }
            return (decision, nil)
        }
        if let (old, oldPeer) = replaced { retire(old, peer: oldPeer) }
        if case .reject(let reason) = decision {
            logger.debug("refused hello", metadata: ["peer": "\(peer.id)", "reason": "\(reason)"])
        }
        return decision
    }

    func helloAccepted(by peer: PeerIdentity, on connection: ClusterConnection) -> ConnectionTable<ObjectIdentifier>.OutboundDecision {
        let (decision, replaced) = state.withLock { state -> (ConnectionTable<ObjectIdentifier>.OutboundDecision, (ClusterConnection, PeerIdentity)?) in
            state.unanswered.remove(connection.key)
            let old = state.table.established[peer.id.name]
            let decision = state.table.helloAccepted(
                by: peer, on: connection.key, serial: connection.serial,
                dialed: connection.dialedAddress ?? peer.address)
            if case .keep(let replacing?) = decision, let old, let replaced = state.connections[replacing] {
                return (decision, (replaced, old.peer))
            }
            return (decision, nil)
        }
        if let (old, oldPeer) = replaced { retire(old, peer: oldPeer) }
        return decision
    }

    func helloRejected(on connection: ClusterConnection, reason: String) {
        let isSelf = reason.hasPrefix("that is this node")
        state.withLock { state in
            state.unanswered.remove(connection.key)
            if let address = connection.dialedAddress {
                state.table.helloRejected(dialed: address, reason: reason, isSelf: isSelf)
            }
        }
        logger.debug("hello refused by peer", metadata: ["peer.address": "\(connection.dialedAddress.map { "\($0)" } ?? "?")", "reason": "\(reason)"])
    }

    func established(_ connection: ClusterConnection, peer: PeerIdentity) {
        Self.connectionsOpened.increment()
        logger.debug("cluster connection established", metadata: ["peer": "\(peer.id)", "direction": "\(connection.direction)"])
        delegate?.transport(connectedTo: peer)
    }

    func received(_ message: ClusterMessage, from peer: PeerIdentity) {
        delegate?.transport(received: message, from: peer)
    }

    func closed(_ connection: ClusterConnection) {
        let (peer, dialFailed) = state.withLock { state -> (PeerIdentity?, Bool) in
            state.connections[connection.key] = nil
            let peer = state.table.closed(connection.key)
            var dialFailed = false
            if state.unanswered.remove(connection.key) != nil, let address = connection.dialedAddress {
                _ = state.table.dialFailed(to: address, now: .now)
                dialFailed = true
            }
            return (peer, dialFailed)
        }
        if dialFailed {
            logger.debug("dial closed before its hello was answered", metadata: ["peer.address": "\(connection.dialedAddress.map { "\($0)" } ?? "?")"])
        }
        if let peer {
            logger.info("cluster connection closed", metadata: ["peer": "\(peer.id)"])
            delegate?.transport(disconnectedFrom: peer)
        }
    }

    func countRefused(established: Bool) {
        (established ? Self.connectionsFailed : Self.connectionsRefused).increment()
    }

    /// A connection replaced by a better one: its calls are failed, then it is closed.
    private func retire(_ connection: ClusterConnection, peer: PeerIdentity) {
        logger.debug("replacing cluster connection", metadata: ["peer": "\(peer.id)"])
        delegate?.transport(disconnectedFrom: peer)
        connection.close()
    }

    private var delegate: (any ClusterTransportDelegate)? { state.withLock { $0.delegate } }

    private func connection(to node: String) -> ClusterConnection? {
        state.withLock { state in state.table.established[node].flatMap { state.connections[$0.handle] } }
    }

    static let connectionsOpened = Counter(label: "parley.transport.connections", dimensions: [("event", "established")])
    static let connectionsRefused = Counter(label: "parley.transport.connections", dimensions: [("event", "refused")])
    static let connectionsFailed = Counter(label: "parley.transport.connections", dimensions: [("event", "failed")])
    static let backpressureWaits = Counter(label: "parley.transport.backpressure_waits")
}
