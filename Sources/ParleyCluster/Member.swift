/// One running `parley-node` process: its configured name plus the incarnation it started with.
///
/// A node that restarts keeps its name and gets a higher incarnation, so every other node can tell
/// the new process from the dead one and let the new one replace it.
public struct NodeID: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The operator-given name (`worker-1`), unique in the cluster.
    public var name: String
    /// Grows with every start (and every rejoin) of the node with this name.
    public var incarnation: UInt64

    public init(name: String, incarnation: UInt64) {
        self.name = name
        self.incarnation = incarnation
    }

    public var description: String { "\(name)#\(incarnation)" }
}

/// What a node does: host actors (`worker`), serve clients (`gateway`), or both.
public struct NodeRoles: OptionSet, Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Hosts actors; only workers are placed on the hash ring.
    public static let worker = NodeRoles(rawValue: 1 << 0)
    /// Serves clients over HTTP/2.
    public static let gateway = NodeRoles(rawValue: 1 << 1)

    /// Parses `worker`, `gateway` or `worker,gateway`; nil for anything else.
    public init?(parsing text: String) {
        var roles: NodeRoles = []
        for part in text.split(separator: ",") {
            switch part.trimmingCharacters(in: " ") {
            case "worker": roles.insert(.worker)
            case "gateway": roles.insert(.gateway)
            default: return nil
            }
        }
        guard !roles.isEmpty else { return nil }
        self = roles
    }

    /// The names, in a fixed order: `["worker", "gateway"]`.
    public var names: [String] {
        var names: [String] = []
        if contains(.worker) { names.append("worker") }
        if contains(.gateway) { names.append("gateway") }
        return names
    }

    public var description: String { names.joined(separator: ",") }
}

/// Where a node's cluster port listens (host and port), as the node advertises it.
public struct NodeAddress: Hashable, Sendable, Codable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `host:port`; IPv6 hosts in brackets (`[::1]:7000`).
    public init?(parsing text: String) {
        let text = text.trimmingCharacters(in: " ")
        guard let colon = text.lastIndex(of: ":") else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty, let port = Int(text[text.index(after: colon)...]), (1...65535).contains(port)
        else { return nil }
        self.init(host: host, port: port)
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// Where a member stands, as gossip spreads it.
///
/// Statuses of one incarnation only move forward: `joining < up < left < down`. `suspect` is never
/// gossiped: it is one node's own failure-detector opinion, shown in that node's view.
public enum MemberStatus: String, Sendable, Codable, Comparable, CaseIterable {
    /// Started and talking to the cluster; not yet on the ring.
    case joining
    /// A full member; an `up` worker is on the ring.
    case up
    /// Silent for longer than the suspicion threshold (local opinion only).
    case suspect
    /// Left gracefully; its actors moved at once.
    case left
    /// Declared dead by failure detection; final for this incarnation.
    case down

    var rank: Int {
        switch self {
        case .joining: 0
        case .up, .suspect: 1
        case .left: 2
        case .down: 3
        }
    }

    public static func < (lhs: MemberStatus, rhs: MemberStatus) -> Bool { lhs.rank < rhs.rank }

    /// `left` and `down` end an incarnation.
    public var isTerminal: Bool { self == .left || self == .down }
}

/// A node as the membership knows it.
public struct Member: Hashable, Sendable, Codable, CustomStringConvertible {
    public var id: NodeID
    public var address: NodeAddress
    public var roles: NodeRoles
    public var status: MemberStatus

    public init(id: NodeID, address: NodeAddress, roles: NodeRoles, status: MemberStatus) {
        self.id = id
        self.address = address
        self.roles = roles
        self.status = status
    }

    public var name: String { id.name }

    public var description: String { "\(id)@\(address)[\(roles)] \(status.rawValue)" }
}

extension String {
    func trimmingCharacters(in set: Character) -> Substring {
        self[...].trimmingCharacters(in: set)
    }
}

extension Substring {
    func trimmingCharacters(in set: Character) -> Substring {
        var slice = self
        while slice.first == set { slice = slice.dropFirst() }
        while slice.last == set { slice = slice.dropLast() }
        return slice
    }
}
