/// The identity of a distributed actor, readable by every node: what it is and which one.
///
/// A *virtual* actor (`conversation/8f3a…`) has no fixed node: the hash ring says which worker
/// owns it, and that worker activates it on the first call. A *pinned* actor
/// (`delivery/…@gateway-1`) lives on the node it was created on, for as long as that node runs.
public struct ClusterActorID: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The actor kind, which selects the factory that activates it (`conversation`, `user`).
    public var kind: String
    /// Which actor of that kind; hashed onto the ring for virtual actors.
    public var key: String
    /// The hosting node's name for a pinned actor; nil for a virtual actor.
    public var node: String?

    /// A virtual actor, placed by the ring.
    public init(kind: String, key: String) {
        self.kind = kind
        self.key = key
        self.node = nil
    }

    /// A pinned actor on `node`.
    public init(kind: String, key: String, node: String) {
        self.kind = kind
        self.key = key
        self.node = node
    }

    public var isVirtual: Bool { node == nil }

    /// What the ring hashes: `kind/key`.
    public var placementKey: String { "\(kind)/\(key)" }

    public var description: String {
        if let node { return "\(kind)/\(key)@\(node)" }
        return "\(kind)/\(key)"
    }
}
