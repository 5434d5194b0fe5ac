import ParleyCluster
import ParleyModel

/// Which connection to each peer is the one, and when to dial. Pure: the transport asks it on each
/// hello and each dial, and carries out the answer.
///
/// One connection per pair of nodes. When two exist (both nodes dialed at once, or a peer
/// reconnected), both nodes apply the same rule to the same two connections, so they keep the same
/// one: a higher peer incarnation wins (a restarted process); then the connection dialed by the
/// node with the smaller name; then the newer connection (the peer redialed because it lost the
/// old one). A node that already has a dial in flight to a peer with a larger name refuses that
/// peer's dial, since its own is the one both will keep.
struct ConnectionTable<Handle: Hashable & Sendable>: Sendable {
    enum Direction: Sendable { case inbound, outbound }

    struct Entry: Sendable {
        var handle: Handle
        var direction: Direction
        var peer: PeerIdentity
        /// Grows with every connection this node makes or accepts.
        var serial: UInt64
    }

    struct Dial: Sendable {
        var node: String?
        var inFlight = false
        var failures = 0
        var notBefore: ContinuousClock.Instant
    }

    enum InboundDecision: Equatable, Sendable {
        case accept(replacing: Handle?)
        case reject(String)
    }

    enum OutboundDecision: Equatable, Sendable {
        case keep(replacing: Handle?)
        case close(String)
    }

    var me: NodeID
    private(set) var established: [String: Entry] = [:]
    private var dials: [NodeAddress: Dial] = [:]
    /// Addresses that turned out to be this node (a seed list naming us under another address).
    private var selfAddresses: Set<NodeAddress> = []
    let backoff: Backoff

    init(me: NodeID, backoff: Backoff = Backoff(first: .milliseconds(50), max: .seconds(2))) {
        self.me = me
        self.backoff = backoff
    }

    // MARK: Hellos

    /// A peer dialed us and said hello on `handle`.
    mutating func helloReceived(from peer: PeerIdentity, on handle: Handle, serial: UInt64) -> InboundDecision {
        if peer.id.name == me.name {
            return .reject("that is this node (\(me.name)) itself")
        }
        let candidate = Entry(handle: handle, direction: .inbound, peer: peer, serial: serial)
        if let existing = established[peer.id.name] {
            guard wins(candidate, over: existing) else {
                return .reject("duplicate connection: \(me.name) keeps its existing connection to \(peer.id.name)")
            }
            established[peer.id.name] = candidate
            return .accept(replacing: existing.handle)
        }
        if me.name < peer.id.name, dials.values.contains(where: { $0.inFlight && $0.node == peer.id.name }) {
            return .reject("simultaneous dial: \(me.name)'s own dial to \(peer.id.name) is the one kept")
        }
        established[peer.id.name] = candidate
        return .accept(replacing: nil)
    }

    /// The peer we dialed at `address` accepted our hello on `handle`.
    mutating func helloAccepted(by peer: PeerIdentity, on handle: Handle, serial: UInt64, dialed address: NodeAddress) -> OutboundDecision {
        dials[address] = nil
        if peer.id.name == me.name {
            selfAddresses.insert(address)
            return .close("that is this node itself")
        }
        let candidate = Entry(handle: handle, direction: .outbound, peer: peer, serial: serial)
        if let existing = established[peer.id.name], existing.handle != handle {
            guard wins(candidate, over: existing) else {
                return .close("duplicate connection: keeping the existing one to \(peer.id.name)")
            }
            established[peer.id.name] = candidate
            return .keep(replacing: existing.handle)
        }
        established[peer.id.name] = candidate
        return .keep(replacing: nil)
    }

    /// The peer we dialed refused our hello. A duplicate is no failure: no backoff.
    mutating func helloRejected(dialed address: NodeAddress, reason: String, isSelf: Bool) {
        dials[address] = nil
        if isSelf { selfAddresses.insert(address) }
    }

    /// A connection closed. Returns its peer if it was that peer's connection.
    mutating func closed(_ handle: Handle) -> PeerIdentity? {
        guard let (name, entry) = established.first(where: { $0.value.handle == handle }) else { return nil }
        established[name] = nil
        return entry.peer
    }

    func peer(on handle: Handle) -> PeerIdentity? {
        established.values.first { $0.handle == handle }?.peer
    }

    private func wins(_ candidate: Entry, over existing: Entry) -> Bool {
        if candidate.peer.id.incarnation != existing.peer.id.incarnation {
            return candidate.peer.id.incarnation > existing.peer.id.incarnation
        }
        let candidatePreferred = isPreferred(candidate)
        if candidatePreferred != isPreferred(existing) { return candidatePreferred }
        return candidate.serial > existing.serial
    }

    /// Dialed by the node with the smaller name.
    private func isPreferred(_ entry: Entry) -> Bool {
        let dialer = entry.direction == .outbound ? me.name : entry.peer.id.name
        return dialer == min(me.name, entry.peer.id.name)
    }

    // MARK: Dials

    /// Whether to dial `address` now; if so, the dial is recorded as in flight.
    mutating func startDial(to address: NodeAddress, node: String?, now: ContinuousClock.Instant) -> Bool {
        guard !selfAddresses.contains(address) else { return false }
        if let node, node == me.name || established[node] != nil { return false }
        if established.values.contains(where: { $0.peer.address == address }) { return false }
        var dial = dials[address] ?? Dial(node: node, notBefore: now)
        guard !dial.inFlight, dial.notBefore <= now else { return false }
        dial.inFlight = true
        dial.node = node ?? dial.node
        dials[address] = dial
        return true
    }

    /// The dial failed (refused, timed out, TLS refused, closed before the hello): back off.
    mutating func dialFailed(to address: NodeAddress, now: ContinuousClock.Instant) -> Duration {
        var dial = dials[address] ?? Dial(node: nil, notBefore: now)
        dial.inFlight = false
        dial.failures += 1
        let wait = backoff.delay(afterFailures: dial.failures)
        dial.notBefore = now.advanced(by: wait)
        dials[address] = dial
        return wait
    }

    /// Forgets every connection (after a change of identity, all are closed).
    mutating func reset(me: NodeID) -> [Handle] {
        self.me = me
        defer { established = [:] }
        return established.values.map(\.handle)
    }
}
