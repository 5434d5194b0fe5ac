/// Timings of gossip and failure detection. Every node of a cluster should use the same.
public struct MembershipSettings: Sendable, Equatable {
    /// How often a node counts its heartbeat up and sends its member list. A peer's silence is
    /// measured from the last time its counter was seen to rise, directly or through others.
    public var heartbeatInterval: Duration
    /// How many peers a node gossips to each heartbeat, taken in turn from its sorted live peers,
    /// so each hears from it directly at least every ⌈peers / this⌉ heartbeats. A node with no
    /// more peers than this (4: clusters up to 5 nodes) gossips to all of them. Gossip to every
    /// peer costs each node a number of member entries per second that grows with the square of
    /// the cluster: 5 million a second at 1,000 nodes.
    public var gossipPeersPerRound: Int
    /// Silence after which a peer is suspected (shown in the view; it stays on the ring).
    public var suspectAfter: Duration
    /// Silence after which a peer is declared down, for good (its incarnation can never return).
    public var downAfter: Duration
    /// How long a seed waits to reach another member before it forms a cluster on its own.
    public var formClusterAfter: Duration
    /// How long a `down` or `left` member stays in the list, so that stale gossip cannot bring it
    /// back.
    public var tombstoneTTL: Duration

    public init(
        heartbeatInterval: Duration = .milliseconds(200),
        gossipPeersPerRound: Int = 4,
        suspectAfter: Duration = .milliseconds(1000),
        downAfter: Duration = .milliseconds(2000),
        formClusterAfter: Duration = .milliseconds(1500),
        tombstoneTTL: Duration = .seconds(120)
    ) {
        precondition(suspectAfter < downAfter, "suspectAfter \(suspectAfter) must be shorter than downAfter \(downAfter)")
        precondition(heartbeatInterval < suspectAfter, "heartbeatInterval \(heartbeatInterval) must be shorter than suspectAfter \(suspectAfter)")
        precondition(gossipPeersPerRound >= 1, "gossipPeersPerRound \(gossipPeersPerRound) must be at least 1")
        self.heartbeatInterval = heartbeatInterval
        self.gossipPeersPerRound = gossipPeersPerRound
        self.suspectAfter = suspectAfter
        self.downAfter = downAfter
        self.formClusterAfter = formClusterAfter
        self.tombstoneTTL = tombstoneTTL
    }

    /// Detects a SIGKILLed node within `downAfter` + one heartbeat: 2.2 s.
    public static let `default` = MembershipSettings()
}
