/// The cluster as one node sees it, in the shape of `GET /v1/cluster` (docs/OPERATIONS.md, "The admin token").
public struct ClusterView: Codable, Sendable, Equatable {
    public struct MemberView: Codable, Sendable, Equatable {
        public var name: String
        public var address: String
        public var roles: [String]
        public var status: String
        public var incarnation: UInt64
    }

    public struct RingView: Codable, Sendable, Equatable {
        /// The `up` workers on the ring, sorted.
        public var workers: [String]
        /// Points per worker.
        public var virtualNodes: Int
        /// The fraction of keys each worker owns, estimated over 10,000 sample keys.
        public var shares: [String: Double]
    }

    /// This node's name.
    public var `self`: String
    public var members: [MemberView]
    public var ring: RingView
}

extension ClusterSystem {
    /// What `GET /v1/cluster` shows.
    public var view: ClusterView {
        let ring = self.ring
        return ClusterView(
            self: settings.name,
            members: members.map {
                .init(name: $0.name, address: $0.address.description, roles: $0.roles.names, status: $0.status.rawValue, incarnation: $0.id.incarnation)
            },
            ring: .init(workers: ring.workers, virtualNodes: ring.settings.virtualNodes, shares: Self.shares(of: ring)))
    }

    static func shares(of ring: HashRing, samples: Int = 10_000) -> [String: Double] {
        var counts: [String: Int] = [:]
        for sample in 0..<samples {
            if let owner = ring.owner(of: "ring-share-sample-\(sample)") { counts[owner, default: 0] += 1 }
        }
        return counts.mapValues { (Double($0) / Double(samples) * 1000).rounded() / 1000 }
    }
}
