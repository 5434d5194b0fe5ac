/// The member list one node sends to some of its peers each heartbeat.
///
/// Every entry carries its member's heartbeat counter as the sender last heard it: a member counts
/// its own up once per heartbeat, and a receiver that sees a member's counter rise knows that
/// member was alive a moment ago, whoever relayed it. So a node need not hear every peer directly
/// to know it lives, and gossip can go to a few peers per round instead of to all.
public struct Gossip: Sendable, Equatable, Codable {
    /// The sender: its arrival proves this incarnation is alive.
    public var from: NodeID
    /// Every member the sender knows, itself included, with gossiped statuses (never `suspect`).
    public var members: [Member]
    /// Each member's heartbeat counter, in the order of ``members`` (same count).
    public var heartbeats: [UInt64]

    /// - Parameter heartbeats: one per member; omitted, every counter is 0 (it refreshes nobody).
    public init(from: NodeID, members: [Member], heartbeats: [UInt64]? = nil) {
        precondition(heartbeats == nil || heartbeats?.count == members.count, "one heartbeat per member")
        self.from = from
        self.members = members
        self.heartbeats = heartbeats ?? Array(repeating: 0, count: members.count)
    }
}

/// Which peers a gossip goes to.
public enum GossipRecipients: Sendable, Equatable {
    /// Every connected peer, and the seeds not yet named: a joining or leaving node, or a cluster
    /// with no more peers than ``MembershipSettings/gossipPeersPerRound``.
    case everyone
    /// These peers, by name.
    case peers([String])
}
