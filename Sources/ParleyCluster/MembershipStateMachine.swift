import Foundation

/// Membership and failure detection as a pure state machine: no IO, no clock of its own.
///
/// The shell (``ClusterSystem``) feeds it events — a tick, a gossip received, a leave — with the
/// current instant, and carries out the ``MembershipDirective``s it returns: send this gossip,
/// log that a member went down, rejoin under a new incarnation.
///
/// The rules:
/// - A member's entry is owned by that member: only it moves itself `joining → up → left`.
///   Anyone may declare it `down`. For one incarnation, statuses only move forward
///   (`joining < up < left < down`), so merging gossip is taking the maximum.
/// - A higher incarnation of a name replaces the lower one: a restarted node replaces its old self.
/// - Failure detection counts heartbeats (gossip-style failure detection, van Renesse, Minsky and
///   Hayden, 1998): every node counts its own heartbeat up each interval and gossips every member's
///   latest count it knows; a peer whose count has not risen for `suspectAfter` is suspect (a local
///   opinion), for `downAfter` down. A rise relayed by any peer counts, so one cut link does not
///   make a live node suspect, and gossip need not reach every peer from every node.
/// - Each heartbeat a node gossips to `gossipPeersPerRound` peers taken in turn from its sorted
///   live peers (round-robin, so each peer hears from it directly within ⌈peers / that⌉ rounds), or
///   to every peer when it has no more than that, while joining and when leaving.
/// - A node that learns it was declared down rejoins under a new incarnation (the shell supplies
///   it); its old incarnation is gone for good, so a paused node cannot come back as a stale owner.
/// - A node that was itself paused (a tick arrives long after the previous one) does not blame its
///   peers for the silence it caused: it restarts their timers instead of declaring them down.
/// - A node declares others down only while it hears from at least half of the members it
///   considers live (itself included): a node cut off alone does not down the rest of the cluster.
/// - Gossip from an incarnation this node already holds ended is ignored, except what it says
///   about this node itself (so that both sides of a healed split learn they were declared down).
///
/// Not generic over its instant: every clock of the cluster (``ClusterClock``) counts in
/// `ContinuousClock.Instant`, and a generic machine called from another module (the simulations)
/// ran unspecialized, a third of its time spent looking up generic metadata.
public struct MembershipStateMachine: Sendable {
    public typealias Instant = ContinuousClock.Instant
    public let settings: MembershipSettings
    /// This node as it gossips itself.
    public private(set) var me: Member
    private var peers: [String: PeerEntry] = [:]
    /// The keys of `peers` in name order, kept as peers come and go: the gossip, the view and each
    /// round's recipients are in name order, and sorting every peer on every heartbeat was most of
    /// what a simulated 100-node cluster spent its time on.
    private var peerNames: [String] = []
    /// True when this node may form a cluster: it is in the seed list, or there is no list.
    private let isSeed: Bool
    /// The other seeds' addresses.
    private let otherSeeds: Set<NodeAddress>
    /// A lone seed forms its cluster at once — unless it is rejoining: the cluster that declared it
    /// down is still there, and a cluster of one would own every actor until the two merged.
    private var mayFormAtOnce = true
    private var joiningSince: Instant
    private var lastTick: Instant?
    /// This node's own heartbeat counter, counted up each tick.
    private var heartbeat: UInt64 = 0
    /// Where the next round's recipients start in the sorted live peers; each node starts at a
    /// place of its own so that the rounds of different nodes do not all aim at the same peers.
    private var gossipCursor: Int

    struct PeerEntry: Sendable {
        var member: Member
        /// The highest heartbeat count of this incarnation heard, directly or relayed.
        var heartbeat: UInt64
        /// When that count last rose, or this incarnation was heard from directly (or learned of,
        /// as a grace).
        var lastHeard: Instant
        var suspectedSince: Instant?
        /// When the entry became `down` or `left`; it is forgotten `tombstoneTTL` later.
        var endedAt: Instant?
    }

    /// - Parameters:
    ///   - me: this node; its status is set to `joining`.
    ///   - seeds: the configured seed addresses (this node's own may be among them). A node in the
    ///     list, or with no list at all, may form a cluster: at once when it is the only seed, or
    ///     when it has met every other seed and has the smallest name among them, none of them up;
    ///     otherwise after `formClusterAfter` without meeting an `up` member.
    public init(me: Member, seeds: [NodeAddress], settings: MembershipSettings = .default, now: Instant) {
        self.settings = settings
        var me = me
        me.status = .joining
        self.me = me
        self.isSeed = seeds.isEmpty || seeds.contains(me.address)
        self.otherSeeds = Set(seeds).subtracting([me.address])
        self.joiningSince = now
        self.gossipCursor = Int(truncatingIfNeeded: StableHash.hash(me.name) & 0xFFFF)
    }

    // MARK: Views

    /// Every known member, this node first, with this node's local opinion (`suspect`) applied.
    public var view: [Member] {
        [me] + peerNames.compactMap { peers[$0]?.viewMember }
    }

    /// The member with this name, as in ``view``.
    public func member(named name: String) -> Member? {
        name == me.name ? me : peers[name]?.viewMember
    }

    /// Names of the `up` workers: exactly what the hash ring is built from.
    public var ringWorkers: [String] {
        var names = peers.values.filter { $0.member.status == .up && $0.member.roles.contains(.worker) }.map(\.member.name)
        if me.status == .up && me.roles.contains(.worker) { names.append(me.name) }
        return names.sorted()
    }

    /// Peers this node should keep a connection to: those not ended.
    public var livePeers: [Member] {
        peerNames.compactMap { peers[$0]?.member }.filter { !$0.status.isTerminal }
    }

    /// While rejoining: where the peers it knew live before it was declared down listen, to dial
    /// with the seeds. The seeds alone may all be cut off from it; any member of the cluster it
    /// meets lets it join instead of forming a cluster of its own, which would know no gateway.
    public private(set) var formerPeerAddresses: [NodeAddress] = []

    /// The gossip this node sends now.
    public var gossip: Gossip {
        let others = peerNames.compactMap { peers[$0] }
        return Gossip(from: me.id, members: [me] + others.map(\.member), heartbeats: [heartbeat] + others.map(\.heartbeat))
    }

    // MARK: Events

    /// Time passes: promote this node, suspect and down silent peers, forget old tombstones, and
    /// gossip.
    public mutating func tick(now: Instant) -> [MembershipDirective] {
        var directives: [MembershipDirective] = []
        if let lastTick, lastTick.duration(to: now) > settings.suspectAfter {
            // This node was paused (SIGSTOP, a long GC-like stall): the silence is ours, not theirs.
            for name in peers.keys { peers[name]?.lastHeard = now }
            directives.append(.selfPaused(lastTick.duration(to: now)))
        }
        lastTick = now
        heartbeat += 1

        if me.status == .joining, isSeed, mayFormCluster(now: now) {
            me.status = .up
            directives.append(.selfUp(formedCluster: true))
        }

        let canDown = hasQuorum
        let allowance = spreadAllowance
        for name in peerNames {
            guard var entry = peers[name] else { continue }
            if let endedAt = entry.endedAt {
                if endedAt.duration(to: now) >= settings.tombstoneTTL {
                    removePeer(name)
                }
                continue
            }
            let silence = entry.lastHeard.duration(to: now)
            if silence >= settings.downAfter + allowance, me.status == .up, canDown {
                entry.member.status = .down
                entry.endedAt = now
                entry.suspectedSince = nil
                directives.append(.memberDowned(entry.member, silence: silence))
            } else if silence >= settings.suspectAfter + allowance, entry.suspectedSince == nil {
                entry.suspectedSince = now
                directives.append(.memberSuspected(entry.member, silence: silence))
            }
            peers[name] = entry
        }
        directives.append(.gossip(gossip, to: nextRecipients()))
        return directives
    }

    /// This round's recipients: the next `gossipPeersPerRound` live peers in name order after the
    /// last round's, or everyone.
    private mutating func nextRecipients() -> GossipRecipients {
        let perRound = settings.gossipPeersPerRound
        guard me.status == .up, peers.count > perRound else { return .everyone }
        let live = peerNames.filter { peers[$0]?.endedAt == nil }
        guard live.count > perRound else { return .everyone }
        let start = gossipCursor % live.count
        gossipCursor = start + perRound
        return .peers((start..<start + perRound).map { live[$0 % live.count] })
    }

    /// A peer's gossip arrived: it is alive, and its member list is merged into ours.
    public mutating func gossipReceived(_ gossip: Gossip, now: Instant) -> [MembershipDirective] {
        var directives: [MembershipDirective] = []
        if gossip.from.name == me.name { return [] }
        if let sender = peers[gossip.from.name], sender.endedAt != nil,
            sender.member.id.incarnation >= gossip.from.incarnation
        {
            // A stale incarnation: its opinions of others are not trusted, but it may tell us we are down.
            for member in gossip.members where member.name == me.name {
                merge(member, heartbeat: 0, now: now, into: &directives)
            }
            // Tell it that it ended: it may gossip only to peers it still thinks live, and we may
            // never pick it for a round again, so this answer is how it learns it must rejoin.
            directives.append(.gossip(self.gossip, to: .peers([gossip.from.name])))
            return directives
        }
        for (member, heartbeat) in zip(gossip.members, gossip.heartbeats) {
            merge(member, heartbeat: heartbeat, now: now, into: &directives)
        }
        // The sender's own arrival is a heartbeat for exactly its incarnation.
        if gossip.from.name != me.name, var entry = peers[gossip.from.name],
            entry.member.id == gossip.from, entry.endedAt == nil
        {
            if entry.heard(at: now) { directives.append(.memberReachable(entry.member)) }
            peers[gossip.from.name] = entry
            if me.status == .joining, entry.member.status == .up {
                me.status = .up
                directives.append(.selfUp(formedCluster: false))
            }
        }
        return directives
    }

    /// This node leaves gracefully: it gossips `left` so its peers take it off the ring at once.
    public mutating func leave() -> [MembershipDirective] {
        guard !me.status.isTerminal else { return [] }
        me.status = .left
        return [.gossip(gossip, to: .everyone)]
    }

    /// After ``MembershipDirective/selfDowned``: come back as a new incarnation, joining again.
    public mutating func rejoin(incarnation: UInt64, now: Instant) {
        precondition(incarnation > me.id.incarnation, "rejoin incarnation \(incarnation) must exceed \(me.id.incarnation)")
        me.id.incarnation = incarnation
        me.status = .joining
        joiningSince = now
        lastTick = nil
        // Start afresh, like a restarted process: our old verdicts about others must not spread.
        formerPeerAddresses = peers.values.filter { !$0.member.status.isTerminal }.map(\.member.address).sorted { "\($0)" < "\($1)" }
        peers = [:]
        peerNames = []
        mayFormAtOnce = false
    }

    private mutating func addPeer(_ entry: PeerEntry) {
        let name = entry.member.name
        guard peers.updateValue(entry, forKey: name) == nil else { return }
        var low = 0, high = peerNames.count
        while low < high {
            let middle = (low + high) / 2
            if peerNames[middle] < name { low = middle + 1 } else { high = middle }
        }
        peerNames.insert(name, at: low)
    }

    private mutating func removePeer(_ name: String) {
        peers[name] = nil
        peerNames.removeAll { $0 == name }
    }

    /// Whether a joining seed forms the cluster now (see ``init(me:seeds:settings:now:)``).
    private func mayFormCluster(now: Instant) -> Bool {
        if joiningSince.duration(to: now) >= settings.formClusterAfter { return true }
        if otherSeeds.isEmpty { return mayFormAtOnce }
        let live = peers.values.filter { $0.endedAt == nil }
        guard !live.contains(where: { $0.member.status == .up }) else { return false }  // join it instead
        let seedPeers = live.filter { otherSeeds.contains($0.member.address) }
        return Set(seedPeers.map(\.member.address)) == otherSeeds && seedPeers.allSatisfy { $0.member.name > me.name }
    }

    /// How much later than `suspectAfter` and `downAfter` a silence counts, for the rounds a
    /// heartbeat takes to reach every node when each gossips to only a few peers: none when a round
    /// reaches every peer; else about log₍ₖ₊₁₎ n + ln n / k rounds for n nodes gossiping to k peers
    /// each (how long push gossip takes to reach all, Pittel 1987) — 1.2 s at 1,000 nodes and 4
    /// peers a round. Without it a simulated 300-node cluster suspected 297 running peers in 10
    /// quiet seconds.
    var spreadAllowance: Duration {
        let k = Double(settings.gossipPeersPerRound)
        let n = Double(peers.values.lazy.filter { $0.endedAt == nil }.count + 1)
        guard n - 1 > k else { return .zero }
        let rounds = (log(n) / log(k + 1) + log(n) / k).rounded(.up)
        return settings.heartbeatInterval * Int(rounds)
    }

    /// True while this node hears from at least half of the members it considers live.
    var hasQuorum: Bool {
        let live = peers.values.filter { $0.endedAt == nil }
        let reachable = live.filter { $0.suspectedSince == nil }.count + 1
        return reachable * 2 >= live.count + 1
    }

    private mutating func merge(_ incoming: Member, heartbeat: UInt64, now: Instant, into directives: inout [MembershipDirective]) {
        if incoming.name == me.name {
            if incoming.id.incarnation == me.id.incarnation, incoming.status == .down, me.status != .down {
                me.status = .down
                directives.append(.selfDowned(me))
            } else if incoming.id.incarnation > me.id.incarnation {
                directives.append(.selfReplaced(by: incoming))
            }
            return
        }
        let incomingForMerge = incoming.status == .suspect ? with(incoming, status: .up) : incoming
        guard var entry = peers[incoming.name] else {
            let ended = incomingForMerge.status.isTerminal
            addPeer(PeerEntry(member: incomingForMerge, heartbeat: heartbeat, lastHeard: now, endedAt: ended ? now : nil))
            if !ended { directives.append(.memberJoined(incomingForMerge)) }
            return
        }
        if incoming.id.incarnation > entry.member.id.incarnation {
            let old = entry.member
            let ended = incomingForMerge.status.isTerminal
            entry = PeerEntry(member: incomingForMerge, heartbeat: heartbeat, lastHeard: now, endedAt: ended ? now : nil)
            peers[incoming.name] = entry
            directives.append(.memberReplaced(old: old, new: incomingForMerge))
            return
        }
        guard incoming.id.incarnation == entry.member.id.incarnation else { return }
        if heartbeat > entry.heartbeat, entry.endedAt == nil {
            // Alive a moment ago, whoever relayed it.
            entry.heartbeat = heartbeat
            if entry.heard(at: now) { directives.append(.memberReachable(entry.member)) }
            peers[incoming.name] = entry
        }
        guard incomingForMerge.status > entry.member.status else { return }
        entry.member.status = incomingForMerge.status
        entry.member.address = incoming.address
        entry.member.roles = incoming.roles
        switch incomingForMerge.status {
        case .up, .suspect: directives.append(.memberUp(entry.member))
        case .left:
            entry.endedAt = now
            directives.append(.memberLeft(entry.member))
        case .down:
            entry.endedAt = now
            directives.append(.memberDowned(entry.member, silence: nil))
        case .joining: break
        }
        peers[incoming.name] = entry
    }

    private func with(_ member: Member, status: MemberStatus) -> Member {
        var member = member
        member.status = status
        return member
    }
}

extension MembershipStateMachine.PeerEntry {
    /// Alive at `now`: restarts the silence; true when that lifts a suspicion.
    mutating func heard(at now: MembershipStateMachine.Instant) -> Bool {
        lastHeard = now
        let wasSuspected = suspectedSince != nil
        suspectedSince = nil
        return wasSuspected
    }

    var viewMember: Member {
        guard suspectedSince != nil, !member.status.isTerminal else { return member }
        var member = member
        member.status = .suspect
        return member
    }
}

/// What the membership asks its shell to do, or tells it happened.
public enum MembershipDirective: Sendable, Equatable {
    /// Send this gossip to these peers.
    case gossip(Gossip, to: GossipRecipients)
    /// This node became `up`: by meeting an `up` member, or as a seed that found nobody.
    case selfUp(formedCluster: Bool)
    /// This node's ticks stopped for this long; peers' timers were restarted, not blamed.
    case selfPaused(Duration)
    /// The cluster declared this incarnation down: deactivate everything and ``MembershipStateMachine/rejoin(incarnation:now:)``.
    case selfDowned(Member)
    /// A newer process with this node's name exists: this one is stale and should stop.
    case selfReplaced(by: Member)
    /// A member was learned of.
    case memberJoined(Member)
    /// A member became `up`.
    case memberUp(Member)
    /// A member went silent past `suspectAfter`.
    case memberSuspected(Member, silence: Duration)
    /// A suspected member was heard from again.
    case memberReachable(Member)
    /// A member was declared down: by this node after `silence`, or by gossip (`silence` nil).
    case memberDowned(Member, silence: Duration?)
    /// A member left gracefully.
    case memberLeft(Member)
    /// A restarted node replaced its old incarnation.
    case memberReplaced(old: Member, new: Member)
}
