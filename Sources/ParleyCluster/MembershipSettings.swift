/// Timings of gossip and failure detection. Every node of a cluster should use the same.
public struct MembershipSettings: Sendable, Equatable {
    /// How often a node sends its member list to every connected peer. The gossip is also the
    /// heartbeat: a peer's silence is measured from its last message.
    public var heartbeatInterval: Duration
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
        suspectAfter: Duration = .milliseconds(1000),
        downAfter: Duration = .milliseconds(2000),
        formClusterAfter: Duration = .milliseconds(1500),
        tombstoneTTL: Duration = .seconds(120)
    ) {
        precondition(suspectAfter < downAfter, "suspectAfter \(suspectAfter) must be shorter than downAfter \(downAfter)")
        precondition(heartbeatInterval < suspectAfter, "heartbeatInterval \(heartbeatInterval) must be shorter than suspectAfter \(suspectAfter)")
        self.heartbeatInterval = heartbeatInterval
        self.suspectAfter = suspectAfter
        self.downAfter = downAfter
        self.formClusterAfter = formClusterAfter
        self.tombstoneTTL = tombstoneTTL
    }

    /// Detects a SIGKILLed node within `downAfter` + one heartbeat: 2.2 s.
    public static let `default` = MembershipSettings()
}
