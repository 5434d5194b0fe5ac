import ParleyCluster
import Synchronization

/// Nodes of one process talking through memory instead of sockets, on a shared ``SteppedClock``:
/// what a node sends reaches its peer `latency` later on that clock, in the order it was sent
/// (one connection per pair, as TCP keeps it). A test cuts and heals links — a cut closes the
/// connection on both sides and loses what was on its way — pauses a node (what is sent to it
/// or by it waits, its connections open, as with a stopped process) and resumes it. A node that stops
/// (`ClusterSystem.stop()`) closes its connections as a killed process's would.
public final class SimulatedNetwork: Sendable {
    private struct Link: Hashable {
        var from: String
        var to: String
    }

    private struct Item: Sendable {
        var due: ContinuousClock.Instant
        var generation: Int
        var message: ClusterMessage
    }

    private struct Node {
        var identity: PeerIdentity
        var delegate: (any ClusterTransportDelegate)?
        var running = true
        var paused = false
    }

    private struct State {
        var nodes: [String: Node] = [:]
        /// Open connections, by the pair's names in order, with a generation that changes each
        /// time one opens: what was on its way over a closed one is lost.
        var connections: [Link: Int] = [:]
        var generation = 0
        var cuts: Set<Link> = []
        /// Each direction's queue: one consumer hands its messages over in order.
        var queues: [Link: AsyncStream<Item>.Continuation] = [:]
        var consumers: [Task<Void, Never>] = []
    }

    public let clock: SteppedClock
    public let latency: Duration
    private let state = Mutex(State())

    public init(clock: SteppedClock, latency: Duration = .milliseconds(1)) {
        self.clock = clock
        self.latency = latency
    }

    deinit {
        state.withLock { state in
            state.queues.values.forEach { $0.finish() }
            state.consumers.forEach { $0.cancel() }
        }
    }

    /// A transport for the node `name`, reachable at ``address(of:)``.
    public func transport(for name: String) -> any ClusterTransport {
        SimulatedTransport(network: self, name: name)
    }

    /// Where the node `name` listens.
    public static func address(of name: String) -> NodeAddress {
        NodeAddress(host: name, port: 1)
    }

    /// Closes the connection between `a` and `b` (both sides hear of it, and what was on its way
    /// is lost) and refuses new ones until ``heal(_:_:)``.
    public func cut(_ a: String, _ b: String) {
        let closed = state.withLock { state -> [(any ClusterTransportDelegate, PeerIdentity)] in
            state.cuts.insert(Self.pair(a, b))
            return Self.close(Self.pair(a, b), in: &state)
        }
        for (delegate, peer) in closed { delegate.transport(disconnectedFrom: peer) }
    }

    public func heal(_ a: String, _ b: String) {
        state.withLock { _ = $0.cuts.remove(Self.pair(a, b)) }
    }

    /// What is sent to `name` or by it waits, its connections open, until ``resume(_:)``.
    public func pause(_ name: String) {
        state.withLock { $0.nodes[name]?.paused = true }
    }

    public func resume(_ name: String) {
        state.withLock { $0.nodes[name]?.paused = false }
    }

    // MARK: For the transports

    fileprivate func start(_ name: String, identity: PeerIdentity, delegate: any ClusterTransportDelegate) {
        state.withLock { $0.nodes[name] = Node(identity: identity, delegate: delegate) }
    }

    fileprivate func updateIdentity(_ name: String, _ identity: PeerIdentity) {
        let closed = state.withLock { state -> [(any ClusterTransportDelegate, PeerIdentity)] in
            state.nodes[name]?.identity = identity
            return state.connections.keys.filter { $0.from == name || $0.to == name }.flatMap { Self.close($0, in: &state) }
        }
        for (delegate, peer) in closed { delegate.transport(disconnectedFrom: peer) }
    }

    fileprivate func stop(_ name: String) {
        let closed = state.withLock { state -> [(any ClusterTransportDelegate, PeerIdentity)] in
            state.nodes[name]?.running = false
            state.nodes[name]?.delegate = nil
            return state.connections.keys.filter { $0.from == name || $0.to == name }.flatMap { Self.close($0, in: &state) }
        }
        for (delegate, peer) in closed { delegate.transport(disconnectedFrom: peer) }
    }

    fileprivate func connect(_ name: String, to address: NodeAddress) {
        let opened = state.withLock { state -> [(any ClusterTransportDelegate, PeerIdentity)] in
            guard let (peerName, peer) = state.nodes.first(where: { $0.value.identity.address == address && $0.value.running }),
                  peerName != name, let me = state.nodes[name], me.running,
                  let myDelegate = me.delegate, let peerDelegate = peer.delegate
            else { return [] }
            let pair = Self.pair(name, peerName)
            guard state.connections[pair] == nil, !state.cuts.contains(pair) else { return [] }
            state.generation += 1
            state.connections[pair] = state.generation
            return [(myDelegate, peer.identity), (peerDelegate, me.identity)]
        }
        for (delegate, peer) in opened { delegate.transport(connectedTo: peer) }
    }

    /// The peers `name` has a connection with.
    public func connectedPeers(of name: String) -> [String] {
        state.withLock { state in
            state.connections.keys.compactMap { $0.from == name ? $0.to : $0.to == name ? $0.from : nil }.sorted()
        }
    }

    fileprivate func send(_ message: ClusterMessage, from name: String, to peer: String) throws {
        let link = Link(from: name, to: peer)
        try state.withLock { state in
            guard let generation = state.connections[Self.pair(name, peer)] else { throw ClusterTransportError.notConnected(peer) }
            let item = Item(due: clock.now.advanced(by: latency), generation: generation, message: message)
            if let queue = state.queues[link] {
                queue.yield(item)
            } else {
                let (stream, queue) = AsyncStream<Item>.makeStream()
                state.queues[link] = queue
                queue.yield(item)
                state.consumers.append(Task { [weak self] in await self?.carry(stream, over: link) })
            }
        }
    }

    /// One direction's consumer: hands each message over when its time comes, in order, unless
    /// its connection closed meanwhile; a paused end holds everything behind.
    private func carry(_ stream: AsyncStream<Item>, over link: Link) async {
        for await item in stream {
            try? await clock.sleep(until: item.due)
            while state.withLock({ $0.nodes[link.to]?.paused == true || $0.nodes[link.from]?.paused == true }) {
                try? await clock.sleep(for: .milliseconds(10))
                if Task.isCancelled { return }
            }
            let receiver = state.withLock { state -> (any ClusterTransportDelegate, PeerIdentity)? in
                guard state.connections[Self.pair(link.from, link.to)] == item.generation,
                      let delegate = state.nodes[link.to]?.delegate, let sender = state.nodes[link.from]
                else { return nil }
                return (delegate, sender.identity)
            }
            if let (delegate, sender) = receiver { delegate.transport(received: item.message, from: sender) }
        }
    }

    private static func pair(_ a: String, _ b: String) -> Link {
        a < b ? Link(from: a, to: b) : Link(from: b, to: a)
    }

    /// Closes a connection: the delegates to tell, each with the peer it lost.
    private static func close(_ pair: Link, in state: inout State) -> [(any ClusterTransportDelegate, PeerIdentity)] {
        guard state.connections.removeValue(forKey: pair) != nil else { return [] }
        var told: [(any ClusterTransportDelegate, PeerIdentity)] = []
        if let a = state.nodes[pair.from], let b = state.nodes[pair.to] {
            if let delegate = a.delegate { told.append((delegate, b.identity)) }
            if let delegate = b.delegate { told.append((delegate, a.identity)) }
        }
        return told
    }
}

/// A node's end of a ``SimulatedNetwork``.
final class SimulatedTransport: ClusterTransport {
    let network: SimulatedNetwork
    let name: String
    /// Shut down: this incarnation's process is dead. A restarted node of the same name has a
    /// transport of its own; what this one's leftover tasks send must not reach the network
    /// through the new one's connections (a dead process sends nothing).
    private let stopped = Atomic(false)

    init(network: SimulatedNetwork, name: String) {
        self.network = network
        self.name = name
    }

    func start(identity: PeerIdentity, delegate: any ClusterTransportDelegate) async throws -> NodeAddress {
        network.start(name, identity: identity, delegate: delegate)
        return identity.address
    }

    func updateIdentity(_ identity: PeerIdentity) {
        network.updateIdentity(name, identity)
    }

    func send(_ message: ClusterMessage, to node: String, deadline: ContinuousClock.Instant) async throws {
        try sendWithoutWaiting(message, to: node)
    }

    func sendWithoutWaiting(_ message: ClusterMessage, to node: String) throws {
        guard !stopped.load(ordering: .relaxed) else { throw ClusterTransportError.notConnected(node) }
        try network.send(message, from: name, to: node)
    }

    func broadcast(_ message: ClusterMessage) {
        guard !stopped.load(ordering: .relaxed) else { return }
        for peer in connectedPeers { try? network.send(message, from: name, to: peer) }
    }

    func connect(to address: NodeAddress, node: String?) {
        guard !stopped.load(ordering: .relaxed) else { return }
        network.connect(name, to: address)
    }

    var connectedPeers: [String] { network.connectedPeers(of: name) }

    func shutdown() async {
        stopped.store(true, ordering: .relaxed)
        network.stop(name)
    }
}
