import ParleyCluster
import ParleyModel

/// A seeded, deterministic simulation of a cluster's membership: N pure
/// ``MembershipStateMachine``s exchanging gossip over a simulated network with delay, loss,
/// partitions, crashes, restarts and pauses, on a manual timeline.
///
/// The same seed gives the same run, so a failing invariant is reproduced by its seed.
public struct MembershipSimulation {
    public typealias Machine = MembershipStateMachine

    public struct Node {
        public var machine: Machine
        /// Dead nodes neither tick nor receive; paused ones hold what arrives until they resume.
        public var isAlive = true
        public var pausedUntil: ContinuousClock.Instant?
        var inbox: [Gossip] = []
        /// The seeds it dials, as a real node does while joining.
        var seeds: [String] = []
    }

    struct InFlight {
        var deliverAt: ContinuousClock.Instant
        var to: String
        var gossip: Gossip
        var order: Int
    }

    public let settings: MembershipSettings
    public private(set) var time = ManualTime()
    public private(set) var nodes: [String: Node] = [:]
    public var random: SeededRandom
    /// Chance that one gossip message is lost.
    public var lossRate = 0.0
    /// Delivery delay is uniform in this range.
    public var delay: ClosedRange<Duration> = .milliseconds(1)...(.milliseconds(20))
    /// Pairs of nodes that cannot reach each other (both directions).
    public private(set) var cut: Set<[String]> = []
    private var inFlight: [InFlight] = []
    private var sent = 0
    private var nextIncarnation: UInt64 = 1
    /// Every directive each node produced but gossip, for the checks.
    public private(set) var log: [(at: Duration, node: String, directive: MembershipDirective)] = []
    /// Gossip messages sent, and member entries in them.
    public private(set) var gossipSent = 0
    public private(set) var entriesSent = 0

    public init(seed: UInt64, settings: MembershipSettings) {
        self.random = SeededRandom(seed: seed)
        self.settings = settings
    }

    public var names: [String] { nodes.keys.sorted() }
    public var elapsed: Duration { time.origin.duration(to: time.now) }

    /// The address of simulated node `name`.
    public static func address(_ name: String) -> NodeAddress { NodeAddress(host: name, port: 1) }

    /// Adds (or restarts, with a higher incarnation) a node with the given seed list (names).
    public mutating func start(_ name: String, seeds: [String]) {
        let member = Member(
            id: NodeID(name: name, incarnation: nextIncarnation), address: Self.address(name), roles: .worker, status: .joining)
        nextIncarnation += 1
        nodes[name] = Node(machine: Machine(me: member, seeds: seeds.map(Self.address), settings: settings, now: time.now), seeds: seeds)
    }

    public mutating func kill(_ name: String) { nodes[name]?.isAlive = false }

    public mutating func pause(_ name: String, for duration: Duration) {
        nodes[name]?.pausedUntil = time.now.advanced(by: duration)
    }

    public mutating func partition(_ a: String, _ b: String) { cut.insert([a, b].sorted()) }
    public mutating func isolate(_ name: String) { for other in names where other != name { partition(name, other) } }
    public mutating func healAll() { cut = [] }

    public func canReach(_ a: String, _ b: String) -> Bool { !cut.contains([a, b].sorted()) }

    /// Runs for `duration`, ticking every node every heartbeat interval and delivering gossip.
    public mutating func run(for duration: Duration) {
        let end = time.now.advanced(by: duration)
        let step = Duration.milliseconds(1)
        var nextTick = time.now
        while time.now < end {
            time.advance(by: step)
            deliverDue()
            if time.now >= nextTick {
                for name in names { tick(name) }
                nextTick = time.now.advanced(by: settings.heartbeatInterval)
            }
        }
    }

    private mutating func tick(_ name: String) {
        guard nodes[name]?.isAlive == true else { return }
        if let until = nodes[name]?.pausedUntil {
            guard time.now >= until else { return }
            nodes[name]?.pausedUntil = nil
            // On resume, whether its timers fire before it reads what queued in its sockets is a
            // race in a real process: the seed decides.
            if Bool.random(using: &random) {
                tickNow(name)
                readInbox(name)
            } else {
                readInbox(name)
                tickNow(name)
            }
            return
        }
        tickNow(name)
    }

    // The machines are changed where they lie in `nodes` (not copied out and back), so that their
    // member tables are not copied whole on every message.
    private mutating func tickNow(_ name: String) {
        guard nodes[name]?.isAlive == true, let directives = nodes[name]?.machine.tick(now: time.now) else { return }
        handle(directives, from: name)
    }

    private mutating func readInbox(_ name: String) {
        guard let inbox = nodes[name]?.inbox else { return }
        nodes[name]?.inbox = []
        for gossip in inbox { receive(gossip, at: name) }
    }

    private mutating func receive(_ gossip: Gossip, at name: String) {
        guard nodes[name]?.isAlive == true else { return }
        if nodes[name]?.pausedUntil != nil {
            nodes[name]?.inbox.append(gossip)
            return
        }
        guard let directives = nodes[name]?.machine.gossipReceived(gossip, now: time.now) else { return }
        handle(directives, from: name)
    }

    private mutating func handle(_ directives: [MembershipDirective], from name: String) {
        for directive in directives {
            if case .gossip = directive {} else { log.append((elapsed, name, directive)) }
            switch directive {
            case .gossip(let gossip, let recipients):
                let to: [String]
                switch recipients {
                case .everyone:
                    // What a real node is connected to: its live peers, and its seeds and the
                    // peers it knew while it joins.
                    guard let node = nodes[name] else { continue }
                    var connected = Set(node.machine.livePeers.map(\.name))
                    if node.machine.me.status == .joining {
                        connected.formUnion(node.seeds)
                        connected.formUnion(node.machine.formerPeerAddresses.map(\.host))
                    }
                    to = connected.sorted()
                case .peers(let peers):
                    to = peers
                }
                for peer in to where peer != name && canReach(name, peer) {
                    if lossRate > 0, Double.random(in: 0..<1, using: &random) < lossRate { continue }
                    let lower = delay.lowerBound.components, upper = delay.upperBound.components
                    let lowNanos = lower.seconds * 1_000_000_000 + lower.attoseconds / 1_000_000_000
                    let highNanos = upper.seconds * 1_000_000_000 + upper.attoseconds / 1_000_000_000
                    let nanos = Int64.random(in: lowNanos...highNanos, using: &random)
                    sent += 1
                    gossipSent += 1
                    entriesSent += gossip.members.count
                    inFlight.append(InFlight(deliverAt: time.now.advanced(by: .nanoseconds(nanos)), to: peer, gossip: gossip, order: sent))
                }
            case .selfDowned:
                nodes[name]?.machine.rejoin(incarnation: nextIncarnation, now: time.now)
                nextIncarnation += 1
            default:
                break
            }
        }
    }

    private mutating func deliverDue() {
        let due = inFlight.filter { $0.deliverAt <= time.now }.sorted { ($0.deliverAt, $0.order) < ($1.deliverAt, $1.order) }
        guard !due.isEmpty else { return }
        inFlight.removeAll { $0.deliverAt <= time.now }
        for message in due where canReach(message.gossip.from.name, message.to) {
            receive(message.gossip, at: message.to)
        }
    }

    // MARK: Views for checks

    /// Names of the nodes that run (alive and not paused).
    public var running: [String] {
        names.filter { nodes[$0]!.isAlive && nodes[$0]!.pausedUntil == nil }
    }

    /// The ring workers as `name` sees them.
    public func ringWorkers(at name: String) -> [String] { nodes[name]!.machine.ringWorkers }
}
