/// The network under ``ClusterSystem``: connections to peers by node name. `ParleyTransport`
/// implements it on SwiftNIO with mutual TLS; `ParleySimulation` has an in-memory one
/// (`SimulatedNetwork`) on a stepped clock.
public protocol ClusterTransport: Sendable {
    /// Starts accepting and dialing; messages and peer events go to `delegate`.
    /// Returns the address the transport listens on (its port may have been 0).
    func start(identity: PeerIdentity, delegate: any ClusterTransportDelegate) async throws -> NodeAddress

    /// Changes what this node says in its hello (after a rejoin with a new incarnation) and closes
    /// every connection so that peers meet the new incarnation.
    func updateIdentity(_ identity: PeerIdentity)

    /// Sends to a connected peer. Waits (until `deadline`) while the peer's outbound queue is full.
    /// Throws ``ClusterTransportError`` `.notConnected` at once when there is no connection: the
    /// message was certainly not sent.
    func send(_ message: ClusterMessage, to node: String, deadline: ContinuousClock.Instant) async throws

    /// Sends to a connected peer without waiting, past the queue bound if need be: for replies and
    /// greetings, whose number is bounded by what the peer itself sent.
    func sendWithoutWaiting(_ message: ClusterMessage, to node: String) throws

    /// Sends to every connected peer, dropping the message for peers whose queue is full.
    func broadcast(_ message: ClusterMessage)

    /// Dials `address` unless a connection to that node (or address) exists or is being made.
    /// `node` is the expected name, when known.
    func connect(to address: NodeAddress, node: String?)

    /// Names of the peers with an established connection.
    var connectedPeers: [String] { get }

    /// Closes every connection and the listener.
    func shutdown() async

    /// The executor of the event loop the calling thread runs, if it is one of this transport's
    /// (nil elsewhere, and for transports without loops): work started from a delegate callback,
    /// or from a task running there, prefers it, so that it runs where its answer is written.
    var currentLoopExecutor: (any TaskExecutor)? { get }
}

extension ClusterTransport {
    public var currentLoopExecutor: (any TaskExecutor)? { nil }
}

/// What the transport knows about a peer after the hello: who it says it is.
public struct PeerIdentity: Hashable, Sendable {
    public var id: NodeID
    public var roles: NodeRoles
    /// Where its cluster port listens, so that others can dial it.
    public var address: NodeAddress

    public init(id: NodeID, roles: NodeRoles, address: NodeAddress) {
        self.id = id
        self.roles = roles
        self.address = address
    }
}

/// Receives what the transport hears. Called on transport threads: implementations must not block.
public protocol ClusterTransportDelegate: AnyObject, Sendable {
    func transport(received message: ClusterMessage, from peer: PeerIdentity)
    func transport(connectedTo peer: PeerIdentity)
    func transport(disconnectedFrom peer: PeerIdentity)
}

/// Why the transport could not send.
public enum ClusterTransportError: Error, Hashable, Sendable {
    /// No established connection to the peer: nothing was sent.
    case notConnected(String)
    /// The peer's outbound queue stayed full until the deadline: nothing was sent.
    case backpressureTimeout(String)
    /// The message encodes to a frame over the frame limit (`bytes`), which the peer would refuse
    /// by closing the connection: nothing was sent.
    case frameTooLarge(String, bytes: Int)
}
