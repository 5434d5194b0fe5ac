/// The member list one node sends to its peers; it doubles as that node's heartbeat.
public struct Gossip: Sendable, Equatable, Codable {
    /// The sender: its arrival proves this incarnation is alive.
    public var from: NodeID
    /// Every member the sender knows, itself included, with gossiped statuses (never `suspect`).
    public var members: [Member]

    public init(from: NodeID, members: [Member]) {
        self.from = from
        self.members = members
    }
}
