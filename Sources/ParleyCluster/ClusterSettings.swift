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
    /// Set at start; higher on every restart. Milliseconds since 1970 by default.
    public var incarnation: UInt64
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
        incarnation: UInt64 = ClusterSettings.incarnationNow(),
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
        self.incarnation = incarnation
        self.membership = membership
        self.ring = ring
        self.callTimeout = callTimeout
        self.passivateAfter = passivateAfter
    }

    /// Milliseconds since 1970: grows across restarts of a node as long as its clock does.
    public static func incarnationNow() -> UInt64 {
        UInt64(max(1, Date().timeIntervalSince1970 * 1000))
    }
}
