import Distributed
import Foundation
import Logging
import Metrics
import Synchronization

/// Parley's `DistributedActorSystem`: actor IDs every node can resolve, remote calls with deadlines
/// over a ``ClusterTransport``, membership by gossip, placement by a ``HashRing``, and virtual
/// actors activated on their owner by the first call.
///
/// The system is a shell: membership, the ring and the call table are pure values kept under one
/// lock; this class feeds them events (time, frames, calls) and carries out what they return.
public final class ClusterSystem: DistributedActorSystem, ClusterTransportDelegate, Sendable {
    public typealias ActorID = ClusterActorID
    public typealias InvocationEncoder = ClusterInvocationEncoder
    public typealias InvocationDecoder = ClusterInvocationDecoder
    public typealias ResultHandler = ClusterResultHandler
    public typealias SerializationRequirement = any Codable
    typealias Instant = ContinuousClock.Instant

    /// Makes the actor for a virtual ID on its owner. It must create the actor with this system
    /// (the system hands the ID to `assignID`) and may load its state first.
    public typealias Factory = @Sendable (ClusterActorID, ClusterSystem) async throws -> any DistributedActor

    /// Runs one distributed method on a local actor from a call's arguments and answers through
    /// `result`, as `executeDistributedTarget` does — without finding the method's parameter and
    /// result types from its mangled name on every call, which took 2–4 % of a node's CPU under
    /// the standard workload. For the calls on every message's path (``registerDirect(_:_:)``).
    public typealias DirectTarget = @Sendable (
        _ actor: any DistributedActor, _ arguments: inout ClusterInvocationDecoder, _ result: ClusterResultHandler
    ) async throws -> Void

    public let settings: ClusterSettings
    public let logger: Logger
    let transport: any ClusterTransport
    let serialization: any ClusterSerialization
    /// Every instant and every wait of the shell, and of the actors on this system, comes from this
    /// one clock; the state machines get its instants as inputs.
    public let clock: any ClusterClock
    /// What the system and its actors draw at random (no secrets).
    public let random: ClusterRandomness
    let state: Mutex<State>
    /// The direct targets by their call target (a method's mangled name), with the calls each ran.
    let directTargets = Mutex<[String: (run: DirectTarget, calls: Int)]>([:])

    /// The ID `assignID` hands out while a factory runs.
    @TaskLocal static var activatingID: ClusterActorID?

    struct State {
        var membership: MembershipStateMachine
        var ring: HashRing
        var calls = CallTable<Instant, ReplySlot>()
        var local: [ClusterActorID: LocalActor] = [:]
        /// When each active virtual actor was last called, for passivation.
        var lastUsed: [ClusterActorID: Instant] = [:]
        var activations: [ClusterActorID: Task<any DistributedActor, any Error>] = [:]
        var factories: [String: Factory] = [:]
        var address: NodeAddress
        var loops: [Task<Void, Never>] = []
        /// The deadline loop, parked while no call waits for a reply; the next call resumes it.
        var deadlineLoopParked: CheckedContinuation<Void, Never>?
        var isShutDown = false
        var ticks = 0
        /// Set by ``forceRing(_:)``: the ring ignores the membership.
        var forcedRingWorkers: [String]?
        /// When ``start()`` ran.
        var startedAt: Instant?
        /// Called after this node rejoined under a new incarnation (``onRejoin(_:)``).
        var rejoinHandlers: [@Sendable (Member) -> Void] = []
        /// Called when this node learns of members that were up all along while it decided
        /// things without them (``onMerge(_:)``).
        var mergeHandlers: [@Sendable ([Member]) -> Void] = []
        var mergeWatch = MergeWatch()
        var ringChangeHandlers: [@Sendable (_ ring: HashRing, _ previous: HashRing) -> Void] = []
    }

    /// A local actor: virtual ones are held by the system (it owns their lifetime); pinned ones
    /// only weakly, so they go away with their last user.
    enum LocalActor {
        case virtual(any DistributedActor)
        case pinned(WeakActor)

        var actor: (any DistributedActor)? {
            switch self {
            case .virtual(let actor): actor
            case .pinned(let box): box.actor
            }
        }
    }

    final class WeakActor: Sendable {
        weak let actor: (any DistributedActor)?
        init(_ actor: any DistributedActor) { self.actor = actor }
    }

    public init(
        settings: ClusterSettings,
        transport: any ClusterTransport,
        serialization: any ClusterSerialization = BinaryClusterSerialization(),
        clock: any ClusterClock,
        random: ClusterRandomness = ClusterRandomness(),
        logger: Logger? = nil
    ) {
        self.settings = settings
        self.clock = clock
        self.random = random
        var logger = logger ?? Logger(label: "parley.cluster")
        logger[metadataKey: "node.id"] = "\(settings.name)"
        self.logger = logger
        self.transport = transport
        self.serialization = serialization
        let address = settings.advertisedAddress ?? settings.bindAddress
        let me = Member(
            id: NodeID(name: settings.name, incarnation: settings.incarnation),
            address: address, roles: settings.roles, status: .joining)
        let membership = MembershipStateMachine(me: me, seeds: settings.seeds, settings: settings.membership, now: clock.now)
        self.state = Mutex(State(membership: membership, ring: HashRing(workers: [], settings: settings.ring), address: address))
    }

    // MARK: Lifecycle

    /// Starts the transport and the membership and deadline loops. Returns at once; the node
    /// becomes `up` when it meets the cluster (see ``isUp``).
    public func start() async throws {
        let identity = state.withLock { state in
            state.startedAt = clock.now
            return PeerIdentity(id: state.membership.me.id, roles: settings.roles, address: state.address)
        }
        let bound = try await transport.start(identity: identity, delegate: self)
        if settings.bindAddress.port == 0 && settings.advertisedAddress == nil {
            // Tests bind port 0: advertise the port the kernel picked.
            let me = state.withLock { state -> PeerIdentity in
                state.address = NodeAddress(host: settings.bindAddress.host, port: bound.port)
                state.membership = MembershipStateMachine(
                    me: Member(id: state.membership.me.id, address: state.address, roles: settings.roles, status: .joining),
                    seeds: settings.seeds, settings: settings.membership, now: clock.now)
                return PeerIdentity(id: state.membership.me.id, roles: settings.roles, address: state.address)
            }
            transport.updateIdentity(me)
        }
        logger.info("cluster node starting", metadata: [
            "cluster.address": "\(address)", "node.roles": "\(settings.roles)",
            "node.incarnation": "\(settings.incarnation)", "cluster.seeds": "\(settings.seeds.map(\.description))",
        ])
        let membershipLoop = Task { [self] in
            var lastPassivation = clock.now
            while !Task.isCancelled {
                try? await clock.sleep(for: settings.membership.heartbeatInterval)
                if Task.isCancelled { break }
                tick()
                if lastPassivation.duration(to: clock.now) >= .seconds(1) {
                    lastPassivation = clock.now
                    passivateIdleActors()
                }
            }
        }
        // Sweeps every 25 ms while calls wait for replies, and waits for the next call when none
        // do: each sweep is a timer on the global executor and a thread woken, and an idle node
        // woke 40 times a second for nothing (docs/BENCHMARKS.md: an idle cluster's CPU).
        let deadlineLoop = Task { [self] in
            while !Task.isCancelled {
                await untilCallsWait()
                try? await clock.sleep(for: .milliseconds(25))
                expireCalls()
            }
        }
        state.withLock { $0.loops += [membershipLoop, deadlineLoop] }
        tick()
    }

    /// Leaves gracefully: peers take this node off the ring at once. Then stops.
    public func shutdown() async {
        let directives = state.withLock { $0.membership.leave() }
        if !directives.isEmpty {
            logger.info("leaving the cluster")
            perform(directives)
            // One heartbeat for the `left` gossip to go out before the connections close.
            try? await clock.sleep(for: .milliseconds(100))
        }
        await stop()
    }

    /// Stops without leaving, like a crash as far as peers can tell (tests use it).
    public func stop() async {
        let (loops, pending) = state.withLock { state -> ([Task<Void, Never>], [(callID: UInt64, pending: ReplySlot)]) in
            state.isShutDown = true
            defer { state.loops = [] }
            return (state.loops, state.calls.removeAll())
        }
        loops.forEach { $0.cancel() }
        for (_, slot) in pending {
            slot.complete(.error(ClusterCallError(code: .shutdown, message: "node \(settings.name) is shutting down")))
        }
        await transport.shutdown()
    }

    // MARK: Views

    /// This node as it gossips itself.
    public var me: Member { state.withLock { $0.membership.me } }

    /// True once this node is an `up` member.
    public var isUp: Bool { me.status == .up }

    /// Up, and its view of the cluster has settled: every seed is known `up`, or the seeds that
    /// are not have had ``settleTime`` since the start to be heard of (they may be dead). Until
    /// then seeds started together may still be merging, and the ring still growing: work routed
    /// meanwhile may land on an owner that gives it up a moment later.
    public var isReady: Bool {
        state.withLock { state in
            guard state.membership.me.status == .up else { return false }
            let upAddresses = Set(state.membership.view.filter { $0.status == .up }.map(\.address))
            if settings.seeds.allSatisfy({ upAddresses.contains($0) || $0 == state.address }) { return true }
            guard let startedAt = state.startedAt else { return false }
            return startedAt.duration(to: clock.now) >= Self.settleTime
        }
    }

    /// How long a node waits for seeds it has not heard of before it reports ready anyway.
    public static let settleTime: Duration = .seconds(5)

    /// Every known member with this node's opinion applied, this node first.
    public var members: [Member] { state.withLock { $0.membership.view } }

    /// The ring as this node sees it now.
    public var ring: HashRing { state.withLock { $0.ring } }

    /// The address peers dial.
    public var address: NodeAddress { state.withLock { $0.address } }

    /// The worker that owns a virtual actor, by this node's ring; nil when no worker is up.
    public func owner(of id: ClusterActorID) -> String? {
        if let node = id.node { return node }
        return state.withLock { $0.ring.owner(of: id.placementKey) }
    }

    /// Pins this node's ring to `workers`, whatever the membership says; nil returns to the
    /// membership's ring. For tests of ownership changes and split brain (two nodes made to
    /// believe they own the same actor).
    @_spi(Testing) public func forceRing(_ workers: [String]?) {
        state.withLock { $0.forcedRingWorkers = workers }
        updateRing()
    }

    /// Lets go of an active virtual actor: the next call for its ID activates it afresh (on
    /// whichever node owns it then). An actor whose writes were fenced off calls this.
    public func deactivate(_ id: ClusterActorID) {
        let released = state.withLock { $0.local.removeValue(forKey: id) }
        if released != nil { logger.debug("actor deactivated", metadata: ["actor.id": "\(id)"]) }
        _ = consume released  // its deinit may call back into the system: outside the lock
    }

    /// IDs of the actors active on this node.
    public var activeActorIDs: [ClusterActorID] {
        // Weak references are loaded outside the lock: a temporary strong reference that turns out
        // to be the last one would run the actor's deinit, which calls back into the system.
        state.withLock { $0.local }.filter { $0.value.actor != nil }.map(\.key)
    }

    /// The executor of the transport's event loop that the calling thread runs, if any: a task
    /// started there that prefers it runs where what it writes goes out, without a thread hop.
    public var currentLoopExecutor: (any TaskExecutor)? { transport.currentLoopExecutor }

    // MARK: Pinned actors with well-known IDs

    /// Creates a pinned actor on this node under a chosen ID, `kind/key@<this node>`, so that other
    /// nodes can address it by name (a gateway's inbox). Keep a strong reference: the system holds
    /// pinned actors weakly.
    public func makePinned<Act: DistributedActor>(kind: String, key: String, _ make: () throws -> Act) rethrows -> Act
    where Act.ID == ClusterActorID {
        try Self.$activatingID.withValue(ClusterActorID(kind: kind, key: key, node: settings.name)) { try make() }
    }

    // MARK: Virtual actors

    /// Calls `handler` with this node's new self each time it was declared down (paused, cut off)
    /// and rejoined under a new incarnation: what it held for the old one may have moved on — a
    /// gateway, for one, ends its event streams so that their clients resume by cursor.
    public func onRejoin(_ handler: @escaping @Sendable (Member) -> Void) {
        state.withLock { $0.rejoinHandlers.append(handler) }
    }

    /// Calls `handler` with the members already up that this node learns of while it decided
    /// things without them (``MergeWatch``): while it is alone in a cluster it formed (a seed that
    /// met no one in time: every other seed was down or cut off), every member up; while it is a
    /// worker in a cluster with no gateway up, the gateways up. Whatever it decided meanwhile
    /// left those members out. A node that joins a cluster with its gateways, and one that forms
    /// a cluster others then join, never hear of anyone here.
    public func onMerge(_ handler: @escaping @Sendable ([Member]) -> Void) {
        state.withLock { $0.mergeHandlers.append(handler) }
    }

    /// Calls `handler` with the new ring and the one before it each time the ring changes (a worker
    /// joined, left or was declared down), after this node let go of the actors it no longer owns.
    public func onRingChange(_ handler: @escaping @Sendable (_ ring: HashRing, _ previous: HashRing) -> Void) {
        state.withLock { $0.ringChangeHandlers.append(handler) }
    }

    /// Runs `body` every `interval` on this node's clock (the first time one interval after this
    /// call) until the node stops.
    public func every(_ interval: Duration, _ body: @escaping @Sendable () async -> Void) {
        let clock = self.clock
        let loop = Task {
            while !Task.isCancelled {
                do {
                    try await clock.sleep(for: interval)
                } catch {
                    return
                }
                await body()
            }
        }
        let stopped = state.withLock { state in
            if !state.isShutDown { state.loops.append(loop) }
            return state.isShutDown
        }
        if stopped { loop.cancel() }
    }

    /// Registers how to activate actors of `kind` on their owner.
    public func register(kind: String, factory: @escaping Factory) {
        state.withLock { $0.factories[kind] = factory }
    }

    /// Calls to `target` (the `RemoteCallTarget` identifier of a distributed method: its thunk's
    /// mangled name) received by this node run through `run` instead of `executeDistributedTarget`.
    /// A name that matches no call only leaves the calls on the general path; tests check the
    /// names against real calls (``directCalls(to:)``).
    public func registerDirect(_ target: String, _ run: @escaping DirectTarget) {
        directTargets.withLock { $0[target] = (run, 0) }
    }

    /// A direct target for a method taking one argument and returning a value.
    @inlinable
    public func registerDirect<Act: DistributedActor, Argument: Codable & SendableMetatype, Success: Codable & SendableMetatype>(
        _ target: String, of actorType: Act.Type, _ method: @escaping @Sendable (Act, Argument) async throws -> Success
    ) {
        registerDirect(target) { actor, arguments, result in
            let (actor, argument): (Act, Argument) = try Self.directCall(target, actor, &arguments)
            try await Self.answer(result) { try await method(actor, argument) }
        }
    }

    /// A direct target for a method taking two arguments and returning a value.
    @inlinable
    public func registerDirect<
        Act: DistributedActor, First: Codable & SendableMetatype, Second: Codable & SendableMetatype, Success: Codable & SendableMetatype
    >(
        _ target: String, of actorType: Act.Type, _ method: @escaping @Sendable (Act, First, Second) async throws -> Success
    ) {
        registerDirect(target) { actor, arguments, result in
            let (actor, first): (Act, First) = try Self.directCall(target, actor, &arguments)
            let second: Second = try arguments.decodeNextArgument()
            try await Self.answer(result) { try await method(actor, first, second) }
        }
    }

    /// Answers a direct call with what `call` returns or throws, as the general path does.
    @inlinable
    static func answer<Success: Codable>(_ result: ClusterResultHandler, _ call: () async throws -> Success) async throws {
        let value: Success
        do {
            value = try await call()
        } catch {
            try await result.onThrow(error: error)
            return
        }
        try await result.onReturn(value: value)
    }

    /// A direct target for a method taking one argument and returning nothing.
    @inlinable
    public func registerDirect<Act: DistributedActor, Argument: Codable & SendableMetatype>(
        _ target: String, of actorType: Act.Type, _ method: @escaping @Sendable (Act, Argument) async throws -> Void
    ) {
        registerDirect(target) { actor, arguments, result in
            let (actor, argument): (Act, Argument) = try Self.directCall(target, actor, &arguments)
            do {
                try await method(actor, argument)
            } catch {
                try await result.onThrow(error: error)
                return
            }
            try await result.onReturnVoid()
        }
    }

    /// The actor as the method's type and the call's first argument (an error here answers the call
    /// as one that could not be invoked, as the general path does).
    @inlinable
    static func directCall<Act: DistributedActor, Argument: Codable>(
        _ target: String, _ actor: any DistributedActor, _ arguments: inout ClusterInvocationDecoder
    ) throws -> (Act, Argument) {
        guard let typed = actor as? Act else {
            throw ClusterCallError(code: .serialization, message: "\(target) is a method of \(Act.self), not of \(type(of: actor))")
        }
        return (typed, try arguments.decodeNextArgument())
    }

    /// How many calls `target`'s direct target ran on this node (nil: none is registered).
    @_spi(Testing) public func directCalls(to target: String) -> Int? {
        directTargets.withLock { $0[target]?.calls }
    }

    // MARK: DistributedActorSystem

    public func makeInvocationEncoder() -> InvocationEncoder {
        ClusterInvocationEncoder()
    }

    public func assignID<Act: DistributedActor>(_ actorType: Act.Type) -> ActorID where Act.ID == ActorID {
        if let id = Self.activatingID { return id }
        return ClusterActorID(kind: "\(actorType)", key: random.uuid().uuidString.lowercased(), node: settings.name)
    }

    public func actorReady<Act: DistributedActor>(_ actor: Act) where Act.ID == ActorID {
        state.withLock { state in
            state.local[actor.id] = actor.id.isVirtual ? .virtual(actor) : .pinned(WeakActor(actor))
        }
    }

    public func resignID(_ id: ActorID) {
        state.withLock { state in
            if case .pinned = state.local[id] { state.local[id] = nil }
        }
    }

    public func resolve<Act: DistributedActor>(id: ActorID, as actorType: Act.Type) throws -> Act? where Act.ID == ActorID {
        // Virtual actors are always reached through `remoteCall`, which checks the ring on every
        // call: a direct reference would outlive a move of the actor to another node.
        guard let node = id.node, node == settings.name else { return nil }
        return state.withLock { $0.local[id] }?.actor as? Act  // loaded outside the lock (see activeActorIDs)
    }

    public func remoteCall<Act, Err, Res>(
        on actor: Act, target: RemoteCallTarget, invocation: inout InvocationEncoder,
        throwing: Err.Type, returning: Res.Type
    ) async throws -> Res where Act: DistributedActor, Act.ID == ActorID, Err: Error, Res: Codable {
        switch await call(actor.id, target: target.identifier, arguments: invocation.arguments) {
        case .value(let returned):
            guard let value = returned.value as? Res else {
                throw ClusterCallError(code: .serialization, message: "expected a \(Res.self) result, the target returned a \(type(of: returned.value))")
            }
            return value
        case .outcome(.value(let bytes)):
            do {
                return try serialization.decode(Res.self, from: bytes)
            } catch {
                throw ClusterCallError(code: .serialization, message: "cannot decode result as \(Res.self): \(error)")
            }
        case .outcome(.void):
            throw ClusterCallError(code: .serialization, message: "expected a \(Res.self) result, the target returned nothing")
        case .outcome(.error(let error)):
            throw error
        }
    }

    public func remoteCallVoid<Act, Err>(
        on actor: Act, target: RemoteCallTarget, invocation: inout InvocationEncoder, throwing: Err.Type
    ) async throws where Act: DistributedActor, Act.ID == ActorID, Err: Error {
        switch await call(actor.id, target: target.identifier, arguments: invocation.arguments) {
        case .value, .outcome(.value), .outcome(.void): return
        case .outcome(.error(let error)): throw error
        }
    }
}
