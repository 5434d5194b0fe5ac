/// Whether members this node learns of were up all along while it decided things without them.
///
/// Two ways a node comes to be up without knowing members that are:
/// - it formed a cluster alone (a seed that met no one in time): every member it then meets up
///   was left out of what it decided alone;
/// - it formed or joined a cluster in which no gateway was up (every worker restarted while the
///   gateways lived on, and the first back formed a cluster the others joined): the gateways it
///   then meets up hold streams its answers and deliveries left out (cluster simulation seed 8999).
///
/// A member that joins as a new process is met while `joining`, or once up after this node knew a
/// gateway: no merge.
public struct MergeWatch: Sendable {
    public init() {}

    /// Alone in a cluster this incarnation formed: it met no live member before, and none since.
    public private(set) var alone = false
    /// Up, with no gateway up in its view but itself.
    public private(set) var withoutGateways = false

    /// This node (`me`) came up: it `formed` its cluster, or joined one whose members it knows as
    /// `view`. A gateway delivers to no other gateway: it watches only for being alone.
    public mutating func selfUp(formed: Bool, me: Member, view: [Member]) {
        let peers = view.filter { $0.id != me.id && $0.status == .up }
        alone = formed && peers.isEmpty
        withoutGateways = !me.roles.contains(.gateway) && !peers.contains { $0.roles.contains(.gateway) }
    }

    /// This node was declared down: it rejoins as a new incarnation, and what it meets while
    /// joining is no merge.
    public mutating func selfDowned() {
        alone = false
        withoutGateways = false
    }

    private var metMember = false
    private var metGateway = false

    /// This node learned of `member`; true if it was up all along, met in a merge. Every member
    /// one gossip brings is judged alike: what it met counts from ``settle()`` on.
    public mutating func joined(_ member: Member) -> Bool {
        metMember = true
        if member.status == .up && member.roles.contains(.gateway) { metGateway = true }
        guard member.status == .up else { return false }
        return alone || (withoutGateways && member.roles.contains(.gateway))
    }

    /// `member`, known before, is up now: a new process that joined.
    public mutating func up(_ member: Member) {
        if member.roles.contains(.gateway) { metGateway = true }
    }

    /// One gossip's changes are all seen.
    public mutating func settle() {
        if metMember { alone = false }
        if metGateway { withoutGateways = false }
        metMember = false
        metGateway = false
    }
}
