import Foundation

/// Everything a ``ClusterSystem`` needs to know about its node and its cluster.
public struct ClusterSettings: Sendable {
    /// This node's name, unique in the cluster (`worker-1`).
    public var name: String
    public var roles: NodeRoles
    /// Where the cluster port listens. Port 0 picks a free port (tests).
    public var bindAddress: NodeAddress
    /// Where peers should dial this node; defaults to the bound address.
    public var advertisedAddress: NodeAddress?
    /// Cluster ports of the seed nodes. This node's own address in the list is skipped, so every
    /// node can be given the same list.
    public var seeds: [NodeAddress]
    /// This run's incarnation: higher on every restart (from ``incarnations`` unless given).
    public var incarnation: UInt64
    /// Where new incarnations come from (at start, and when the node rejoins after being declared
    /// down): a source that keeps growing across restarts, such as the wall clock in milliseconds.
    /// Injected, like every clock here: this module reads no time of its own.
    public var incarnations: @Sendable () -> UInt64
    public var membership: MembershipSettings
    public var ring: HashRing.Settings
    /// How long a remote call may take, retries on a moved owner included.
    public var callTimeout: Duration
    /// A virtual actor not called for this long is deactivated (passivated); the next call
    /// activates it again from the store.
    public var passivateAfter: Duration

    public init(
        name: String,
        roles: NodeRoles = [.worker],
        bindAddress: NodeAddress,
        advertisedAddress: NodeAddress? = nil,
        seeds: [NodeAddress] = [],
        incarnations: @escaping @Sendable () -> UInt64,
        incarnation: UInt64? = nil,
        membership: MembershipSettings = .default,
        ring: HashRing.Settings = .default,
        callTimeout: Duration = .seconds(5),
        passivateAfter: Duration = .seconds(300)
    ) {
        self.name = name
        self.roles = roles
        self.bindAddress = bindAddress
        self.advertisedAddress = advertisedAddress
        self.seeds = seeds
        self.incarnations = incarnations
        self.incarnation = incarnation ?? incarnations()
        self.membership = membership
        self.ring = ring
        self.callTimeout = callTimeout
        self.passivateAfter = passivateAfter
    }
}
