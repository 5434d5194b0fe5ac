import Foundation
import Logging
import NIOCore
@_spi(Testing) import ParleyChat
import ParleyCluster
import ParleyGateway
import ParleyModel
@_spi(Testing) import ParleyStore
import Synchronization

/// A seeded simulation of a whole cluster of real nodes: workers running the real chat actors
/// (conversations, users, presence shards, group commit) over one in-memory store, and gateways
/// with their real inboxes and stream hubs, each client stream a real `LiveEventStream` writing
/// server-sent events into a simulated response — all on one ``SteppedClock`` over a
/// ``SimulatedNetwork``. Clients open streams as `GET /v1/events` does and resume them as apps do,
/// from the `id:` of the last event they read, through the user's actor's replay
/// (`UserActor.replay`), and send through the gateway's retry (its sender's own event written
/// ahead of the delivery, as the route does) under one `clientMessageId` each — or give up after a failed
/// try, as an app that is closed does, leaving a message that may or may not be committed — while
/// workers and gateways are killed and restarted as new incarnations, links are cut and nodes paused.
///
/// After a stretch with faults comes a quiet one (every node back, no new sends). The run fails if
/// a stream wrote a message out of order or twice, or a client got one past a gap (a message it
/// already had may come again only in the replay of a new stream, as API.md allows); if an acknowledged message is not
/// stored exactly once with the seq its sender was given, or a conversation's seqs have a gap;
/// if a send not given up was never acknowledged; or if at the end a client's open stream lacks a committed
/// message of one of its conversations.
///
/// The seed fixes the conversations, what is sent when and by whom, and every fault and its time.
/// Under a ``SimulationExecutor`` (as `parley-simulate` runs it) the nodes' tasks also run one at
/// a time in a fixed order, and a seed is the same run every time; on the usual thread pool (as
/// the Swift tests run it) their interleaving is the runtime's.
public final class ClusterSimulation: Sendable {
    public struct Options: Sendable {
        public var workers = 3
        public var gateways = 2
        public var users = 8
        public var groups = 2
        public var groupSize = 4
        public var directs = 3
        public var activeTime: Duration = .seconds(20)
        public var quietTime: Duration = .seconds(15)
        public var sendsPerSecond = 15.0
        /// Read receipts (a member marks read what it has) and group renames in the active stretch.
        public var receiptsPerSecond = 3.0
        public var renamesPerSecond = 0.4
        /// Notes a bot, a member of every group, puts on (or replaces on) messages it has.
        public var annotationsPerSecond = 1.0
        /// Changes to messages members have: edits and deletions by their senders, reactions
        /// added and taken back by any member, pins by a group's owner (or a direct
        /// conversation's member). One send in five replies to a message its sender has.
        public var changesPerSecond = 4.0
        /// Kills (restarted 2–3 s later), link cuts, pauses, broken streams and apps gone to the
        /// background for 2–8 s in the active stretch.
        public var faultsPerMinute = 15.0
        /// Kill every worker, one after another (1.5–3.5 s apart), once in the run.
        public var burst = true
        /// Once, in the active stretch's last 1.5 s, a conversation's last message of the run: its
        /// owner stops dead as the commit lands (and is then killed) and its sender gives up, as a
        /// closed app does. Only the next owner's recovery brings that message to the streams.
        public var lastWords = true
        /// Chance that a commit's answer is lost after it committed (its appends fail without
        /// saying whether they committed; their senders retry). For half of them the request dies
        /// with it — its gateway killed, its app closed — and nobody sends it again: only the
        /// owner's read of the store brings such a message to the streams.
        public var lostAnswerRate = 0.02
        /// How far the clock moves per step; each step lets the nodes' woken tasks run.
        public var step: Duration = .milliseconds(20)
        /// The workers' delivery timings, and how long a stream waits past a gap before it ends.
        public var delivery = DeliveryTimings()
        public var streamGapMax: Duration = .seconds(5)
        /// The stream guards the clients' sessions run without.
        var streamsWithout: Set<StreamSessionStateMachine.Guard> = []

        public init() {}
    }

    /// The guards of the contract in the nodes, each of which a run can be made without, to see
    /// that some seed fails then.
    public enum Guard: String, CaseIterable, Sendable {
        /// An owner reads the store for seqs it holds back (a commit's answer lost).
        case storeRead = "store-read"
        /// A batch whose call failed is sent again.
        case resend
        /// A stream whose gap is not filled in time ends.
        case streamEnd = "stream-end"
        /// A node that takes over a departed owner's conversations publishes their recent messages again.
        case recovery
        /// A stream holds live events back during its replay.
        case replayQueue = "replay-queue"
        /// A stream does not write a message twice.
        case repeats
        /// A stream writes a message past a gap only after the seqs before it.
        case order
        /// A sender's own message goes ahead of its delivery only as its conversation's next.
        case aheadWhenNext = "ahead-when-next"

        /// The guards `--check-guards` must see caught here. A stream's end on a gap is not among
        /// them: with every gap the cluster's faults leave now filled by resends, the store read and
        /// recovery within the 5 s a stream waits, no seed of 2,200 needs it; the delivery
        /// simulation, whose owners can fail to fill a gap, catches its removal.
        public static let checked: [Guard] = allCases.filter { $0 != .streamEnd }

        public func remove(from options: inout Options) {
            switch self {
            case .storeRead: options.delivery.holdMax = .seconds(3_600)
            case .resend:
                options.delivery.retry = Backoff(first: .seconds(3_600), max: .seconds(3_600))
            case .streamEnd: options.streamGapMax = .seconds(3_600)
            case .recovery: options.delivery.recoveryWindow = .zero
            case .replayQueue: options.streamsWithout.insert(.replayQueue)
            case .repeats: options.streamsWithout.insert(.repeats)
            case .order: options.streamsWithout.insert(.order)
            case .aheadWhenNext: options.streamsWithout.insert(.aheadWhenNext)
            }
        }
    }

    enum Fault: CustomStringConvertible {
        case kill(String)
        case cut(String, String, Duration)
        case pause(String, Duration)
        case breakStream(Int)
        /// The user's app goes to the background: its stream closes, and it resumes this much later.
        case offline(Int, Duration)
        case lastWords

        var description: String {
            switch self {
            case .kill(let node): "kill \(node)"
            case .cut(let a, let b, let length): "cut \(a) – \(b) for \(length)"
            case .pause(let node, let length): "pause \(node) for \(length)"
            case .breakStream(let user): "break user \(user)'s stream"
            case .offline(let user, let length): "user \(user) offline for \(length)"
            case .lastWords: "a conversation's last message, its owner dying as it commits"
            }
        }
    }

    struct Node {
        var system: ClusterSystem
        var incarnation: UInt64
        var gateway: GatewayStreams?
    }

    /// A gateway's streams: its hub, with its inbox (held: the system keeps pinned actors
    /// weakly), the loop its client connections run on, and the hub's ticks.
    struct GatewayStreams {
        var hub: StreamHub
        var inbox: GatewayInbox
        var loop: SimulatedEventLoop
        var ticks: Task<Void, Never>
    }

    struct Stream {
        var gateway: String
        /// Which of the client's streams (they are numbered as it opens them).
        var number: Int
        var sink: SimulatedEventSink
        /// Whether `ready` came.
        var live = false
        /// The last seq this stream wrote of each conversation.
        var written: [ConversationID: Int64] = [:]
        /// Per conversation, the last change this stream wrote.
        var changes: [ConversationID: Int64] = [:]
    }

    struct Client {
        var id: UserID
        var conversations: [ConversationID] = []
        /// The last seq written to this client of each conversation, over all its streams.
        var received: [ConversationID: Int64] = [:]
        /// What the client knows of its conversations' states, from the events it read: each
        /// member's read seq (its receipts, and its own messages), and each group's name (from
        /// `conversation` events, applied in the order read).
        var readSeqs: [ConversationID: [UserID: Int64]] = [:]
        var names: [ConversationID: String] = [:]
        /// The bot's notes on messages, by conversation, seq and key, applied in the order read.
        var annotations: [ConversationID: [Int64: [String: String]]] = [:]
        /// The messages as the client holds them (the first event of each, then every change
        /// applied once), and the changes it applied.
        var messages: [ConversationID: [Int64: Message]] = [:]
        var applied: [ConversationID: Set<Int64>] = [:]
        /// Each conversation's pinned seqs, from the pins and deletions applied.
        var pinned: [ConversationID: [Int64]] = [:]
        /// The cursor of the last event the client got (an event's `id:`): where its next stream
        /// resumes. Registered clients start with the run's start, before any message.
        var cursor: StreamCursor
        var stream: Stream?
        var reconnectAt: ContinuousClock.Instant?
    }

    struct Send {
        var conversation: ConversationID
        var sender: Int
        var clientMessageId: String
        /// The seq it replies to.
        var replyTo: Int64?
        var retryAt: ContinuousClock.Instant?
        var inFlight = false
        var attempts = 0
        /// Not tried again after a failure.
        var once = false
    }

    /// The clientMessageIds whose commit's answer was lost with the request that sent it.
    final class DiedWithAnswer: Sendable {
        let ids = Mutex<Set<String>>([])
    }

    /// The last words' message, the node thought to own it, and whether its commit landed.
    final class LastWords: Sendable {
        let state = Mutex<(clientMessageId: String, owner: String, committed: Bool)?>(nil)
    }

    struct State {
        var nodes: [String: Node] = [:]
        /// Killed nodes: when each restarts, and as which incarnation.
        var down: [String: (at: ContinuousClock.Instant, incarnation: UInt64)] = [:]
        var clients: [Client] = []
        var conversations: [(id: ConversationID, members: [Int])] = []
        var sends: [String: Send] = [:]
        var acknowledged: [String: (ConversationID, Int64)] = [:]
        var trace: [String] = []
        var failures: [String] = []
        var written = 0
        var streamsEnded = 0
        var streamsOpened = 0
        var retries = 0
        var abandoned = 0
        /// Conversations no one sends to any more.
        var silenced: Set<ConversationID> = []
        var changesWritten = 0
        var changesCommitted = 0
    }

    public let seed: UInt64
    public let options: Options
    let clock = SteppedClock()
    let network: SimulatedNetwork
    let store: InMemoryChatStore
    let lastWords = LastWords()
    let diedWithAnswer = DiedWithAnswer()
    let random: ClusterRandomness
    let state = Mutex(State())
    let logger: Logger

    /// What lets the nodes' woken tasks run after each step of the clock.
    let settle: SteppedClock.Settle

    /// - Parameter settle: after each step of the clock, what lets the tasks it woke run: a real
    ///   millisecond on the usual thread pool, or, run under a ``SimulationExecutor``,
    ///   `{ await SimulationExecutor.shared.settled() }` — which makes the run the same every time.
    public init(seed: UInt64, options: Options = Options(), settle: @escaping SteppedClock.Settle = SteppedClock.realMillisecond) {
        self.seed = seed
        self.options = options
        self.settle = settle
        self.random = ClusterRandomness(SeededRandom(seed: seed))
        let network = SimulatedNetwork(clock: clock)
        self.network = network
        let losses = ClusterRandomness(SeededRandom(seed: seed &+ 0x5EED))
        let rate = options.lostAnswerRate
        let diedWithAnswer = self.diedWithAnswer
        let lastWords = self.lastWords
        self.store = InMemoryChatStore(losesAnswer: { appends in
            lastWords.state.withLock { words in
                guard let id = words?.clientMessageId, appends.contains(where: { $0.clientMessageId == id }) else { return }
                // The owner stops dead as the commit lands: nothing it would send after it leaves.
                if let owner = words?.owner { network.pause(owner) }
                words?.committed = true
            }
            guard Double(losses.next() % 1_000_000) / 1e6 < rate else { return false }
            if losses.next() % 2 == 0 { diedWithAnswer.ids.withLock { $0.formUnion(appends.map(\.clientMessageId)) } }
            return true
        })
        var logger = Logger(label: "parley.simulation")
        // The nodes' own logs, for finding out why a seed failed: PARLEY_SIMULATION_LOG=debug.
        logger.logLevel = ProcessInfo.processInfo.environment["PARLEY_SIMULATION_LOG"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        self.logger = logger
    }

    public var failures: [String] { state.withLock { $0.failures } }
    public var acknowledgedCount: Int { state.withLock { $0.acknowledged.count } }
    public var writtenCount: Int { state.withLock { $0.written } }
    public var trace: [String] { state.withLock { $0.trace } }

    public var summary: String {
        let acknowledged = state.withLock { $0.acknowledged.count }
        return state.withLock { state in
            "\(state.failures.isEmpty ? "passed" : "FAILED (\(state.failures.count))"): \(acknowledged) sends acknowledged "
                + "(\(state.retries) retried, \(state.abandoned) given up), \(state.written) messages written to streams, "
                + "\(state.changesCommitted) changes to messages (\(state.changesWritten) written to streams), \(state.streamsEnded) streams ended by their gateway"
        }
    }

    var elapsed: Duration { clock.origin.duration(to: clock.now) }

    func note(_ line: String) {
        let milliseconds = Int(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
        let text = "t=\(milliseconds / 1000).\(String(1000 + milliseconds % 1000).dropFirst()) \(line)"
        state.withLock { $0.trace.append(text) }
        // With the nodes' logs on, each line also goes to standard error at once, so it stands among them in order.
        if logger.logLevel < .critical { FileHandle.standardError.write(Data("  \(text)\n".utf8)) }
    }

    func fail(_ line: String) {
        state.withLock { $0.failures.append(line) }
        note("FAILURE \(line)")
    }

    var workerNames: [String] { (0..<options.workers).map { "worker-\($0)" } }
    var gatewayNames: [String] { (0..<options.gateways).map { "gateway-\($0)" } }

    // MARK: Running

    /// Runs the whole simulation: forms the cluster, creates the conversations, runs the active
    /// and the quiet stretch, and checks the contract.
    public func run() async throws {
        try await registerUsers()
        for name in workerNames + gatewayNames { try await startNode(name, incarnation: 1) }
        let names = Set(workerNames + gatewayNames)
        guard try await advance(until: { self.everyNodeSeesUp(names) }, limit: .seconds(60)) else {
            fail("the cluster did not form within 60 s on the clock")
            return
        }
        note("cluster up: \(names.sorted())")
        try await createConversations()
        for user in 0..<options.users { openStream(user) }
        let faults = scheduleFaults()
        var nextFault = 0
        let end = options.activeTime + options.quietTime
        while elapsed < end {
            clock.advance(by: options.step)
            try await settle()
            if let owner = lastWords.state.withLock({ words -> String? in
                guard let owner = words?.owner, words?.committed == true else { return nil }
                words = nil
                return owner
            }) {
                note("\(owner) dies as the last words commit")
                await inject(.kill(owner))
            }
            while nextFault < faults.count, faults[nextFault].at <= elapsed {
                await inject(faults[nextFault].fault)
                nextFault += 1
            }
            try await restartDue()
            reconnectDue()
            if elapsed < options.activeTime {
                sendNew()
                changeStates()
                annotate()
                changeMessages()
            }
            retryDue()
        }
        try await check()
        try await resumeEveryStream()
        try await checkStates()
        for node in state.withLock({ Array($0.nodes.values) }) { await node.system.stop() }
    }

    /// Moves the clock on until `condition` holds; false past `limit`.
    func advance(until condition: () -> Bool, limit: Duration) async throws -> Bool {
        try await clock.advance(until: condition, step: options.step, limit: limit, settle: settle) != nil
    }

    /// Runs `body` while the clock moves on.
    func whileAdvancing<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await clock.advance(step: options.step, settle: settle, while: body).outcome.get()
    }

    func everyNodeSeesUp(_ names: Set<String>) -> Bool {
        let systems = state.withLock { $0.nodes.values.map(\.system) }
        return systems.allSatisfy { system in Set(system.members.filter { $0.status == .up }.map(\.id.name)) == names }
    }

    // MARK: Nodes

    func startNode(_ name: String, incarnation: UInt64) async throws {
        let isWorker = name.hasPrefix("worker")
        let settings = ClusterSettings(
            name: name, roles: isWorker ? .worker : .gateway, bindAddress: SimulatedNetwork.address(of: name),
            seeds: workerNames.map(SimulatedNetwork.address(of:)), incarnations: { incarnation }, incarnation: incarnation,
            membership: MembershipSettings(
                heartbeatInterval: .milliseconds(100), suspectAfter: .milliseconds(500), downAfter: .milliseconds(1000),
                formClusterAfter: .milliseconds(300)),
            callTimeout: .seconds(2))
        var nodeLogger = logger
        // The process's incarnation: a killed process's tasks run on, cut off, and log too.
        nodeLogger[metadataKey: "node"] = "\(name)#\(incarnation)"
        let system = ClusterSystem(
            settings: settings, transport: network.transport(for: name), clock: clock,
            random: ClusterRandomness(SeededRandom(seed: seed &* 1_000 &+ incarnation &* 100 &+ UInt64((workerNames + gatewayNames).firstIndex(of: name) ?? 0))),
            logger: nodeLogger)
        var gateway: GatewayStreams?
        system.onRejoin { [weak self] member in self?.note("\(name) was declared down; rejoined as \(member.id)") }
        if isWorker {
            // The commit interval SQLite nodes run with, on the simulation's clock.
            let services = ChatServices(
                store: store, committer: GroupCommitter(store: store, minInterval: .milliseconds(5), clock: clock), delivery: options.delivery, clock: clock)
            ConversationActor.register(on: system, services: services)
            UserActor.register(on: system, services: services)
            PresenceShard.register(on: system)
        } else {
            // The gateway's own hub and inbox: declared down (paused, cut off), it ends its
            // streams, as it may have missed deliveries.
            let (hub, inbox) = StreamHub.serving(system, logger: nodeLogger)
            gateway = GatewayStreams(hub: hub, inbox: inbox, loop: SimulatedEventLoop(clock: clock), ticks: Task { await hub.run() })
        }
        try await system.start()
        state.withLock { $0.nodes[name] = Node(system: system, incarnation: incarnation, gateway: gateway) }
    }

    func system(_ name: String) -> ClusterSystem? { state.withLock { $0.nodes[name]?.system } }

    /// A live gateway, chosen by the seed.
    func anyGateway() -> String? {
        let live = state.withLock { state in gatewayNames.filter { state.nodes[$0] != nil } }
        return live.isEmpty ? nil : live[random.int(in: 0..<live.count)]
    }

    // MARK: Setup

    func registerUsers() async throws {
        var clients: [Client] = []
        for index in 0..<options.users {
            let id = UserID(rawValue: "u_sim\(index)")
            let user = User(id: id, handle: "sim\(index)", displayName: "User \(index)", createdAt: clock.wallNow)
            try await store.createUser(StoredUser(user: user, passwordHash: "not-a-hash"))
            clients.append(Client(id: id, cursor: StreamCursor(clock.wallNow)))
        }
        let bot = User(id: Self.bot, handle: "simbot", displayName: "Bot", createdAt: clock.wallNow, bot: true)
        try await store.createUser(StoredUser(user: bot, passwordHash: "not-a-hash"))
        state.withLock { $0.clients = clients }
    }

    func createConversations() async throws {
        var plans: [(members: [Int], name: String?)] = []
        for group in 0..<options.groups {
            var chosen = Set<Int>()
            while chosen.count < min(options.groupSize, options.users) { chosen.insert(random.int(in: 0..<options.users)) }
            plans.append((chosen.sorted(), "group \(group)"))
        }
        for _ in 0..<options.directs {
            let a = random.int(in: 0..<options.users)
            let b = (a + 1 + random.int(in: 0..<(options.users - 1))) % options.users
            plans.append(([a, b].sorted(), nil))
        }
        let ids = state.withLock { $0.clients.map(\.id) }
        for plan in plans {
            let id = plan.name == nil ? ConversationActor.directID(ids[plan.members[0]], ids[plan.members[1]]) : ConversationID(rawValue: "c_sim\(seed)_\(plan.name!.split(separator: " ")[1])")
            guard let gateway = anyGateway(), let system = system(gateway) else { continue }
            // The bot is a member of every group (a direct chat is two people).
            let request = CreateConversation(
                creatorId: ids[plan.members[0]], memberIds: plan.members.map { ids[$0] } + (plan.name == nil ? [] : [Self.bot]), name: plan.name)
            let created = try await whileAdvancing { try await ConversationActor.resolve(id, using: system).create(request) }
            guard created.created || plan.name == nil else { continue }
            state.withLock { state in
                guard !state.conversations.contains(where: { $0.id == id }) else { return }
                state.conversations.append((id, plan.members))
                for member in plan.members {
                    state.clients[member].conversations.append(id)
                    if let name = plan.name { state.clients[member].names[id] = name }
                }
            }
            note("conversation \(id): users \(plan.members)")
        }
    }

    func scheduleFaults() -> [(at: Duration, fault: Fault)] {
        let seconds = Int(options.activeTime.components.seconds)
        let count = Int((options.faultsPerMinute * Double(seconds) / 60).rounded())
        var faults: [(at: Duration, fault: Fault)] = []
        for _ in 0..<count {
            let at = Duration.milliseconds(random.int(in: 1_000..<(seconds * 1000)))
            let nodes = workerNames + gatewayNames
            let fault: Fault
            switch random.int(in: 0..<5) {
            case 0: fault = .kill(nodes[random.int(in: 0..<nodes.count)])
            case 1:
                fault = .cut(workerNames[random.int(in: 0..<workerNames.count)], nodes[random.int(in: 0..<nodes.count)],
                             .milliseconds(random.int(in: 500..<5_000)))
            case 2: fault = .pause(nodes[random.int(in: 0..<nodes.count)], .milliseconds(random.int(in: 500..<3_000)))
            case 3: fault = .breakStream(random.int(in: 0..<options.users))
            default: fault = .offline(random.int(in: 0..<options.users), .milliseconds(random.int(in: 2_000..<8_000)))
            }
            faults.append((at, fault))
        }
        if options.burst {
            var at = Duration.milliseconds(random.int(in: 2_000..<max(2_001, seconds * 1000 - 10_000)))
            for index in (0..<options.workers).map({ ($0, random.next()) }).sorted(by: { $0.1 < $1.1 }).map(\.0) {
                faults.append((at, .kill(workerNames[index])))
                at += .milliseconds(random.int(in: 1_500..<3_500))
            }
        }
        if options.lastWords {
            faults.append((options.activeTime - .milliseconds(random.int(in: 500..<1_500)), .lastWords))
        }
        return faults.sorted { $0.at < $1.at }
    }

    // MARK: Faults

    func inject(_ fault: Fault) async {
        switch fault {
        case .kill(let name):
            guard let node = state.withLock({ $0.nodes.removeValue(forKey: name) }) else { return }
            note("\(name) killed")
            node.gateway?.ticks.cancel()
            await node.system.stop()
            for user in streams(on: name) { endStream(user, reason: "its gateway died") }
            // Above every incarnation the process had (rejoins raise it), as the wall clock makes
            // a restarted node's: an older one would be taken for the dead incarnation's past.
            let at = clock.now.advanced(by: .milliseconds(random.int(in: 2_000..<3_000)))
            let incarnation = max(node.incarnation, node.system.me.id.incarnation) + 1
            state.withLock { $0.down[name] = (at, incarnation) }
        case .cut(let a, let b, let length):
            guard a != b else { return }
            note("link \(a) – \(b) cut for \(length)")
            network.cut(a, b)
            let clock = self.clock, network = self.network
            Task {
                try? await clock.sleep(for: length)
                network.heal(a, b)
            }
        case .pause(let name, let length):
            note("\(name) paused for \(length)")
            network.pause(name)
            let clock = self.clock, network = self.network
            Task {
                try? await clock.sleep(for: length)
                network.resume(name)
            }
        case .breakStream(let user):
            endStream(user, reason: "its connection broke")
        case .offline(let user, let length):
            endStream(user, reason: "its app went to the background for \(length)")
            state.withLock { $0.clients[user].reconnectAt = clock.now.advanced(by: length) }
        case .lastWords:
            let (conversation, members) = state.withLock { $0.conversations[random.int(in: 0..<$0.conversations.count)] }
            guard let gateway = anyGateway(), let owner = system(gateway)?.owner(of: ConversationActor.id(conversation)) else { return }
            let sender = members[random.int(in: 0..<members.count)]
            let clientMessageId = random.uuid().uuidString.lowercased()
            note("last words in \(conversation) from user \(sender): \(clientMessageId.prefix(8)), owned by \(owner)")
            state.withLock { state in
                state.silenced.insert(conversation)
                state.sends[clientMessageId] = Send(conversation: conversation, sender: sender, clientMessageId: clientMessageId, once: true)
            }
            lastWords.state.withLock { $0 = (clientMessageId, owner, false) }
            attempt(clientMessageId)
        }
    }

    func restartDue() async throws {
        let due = state.withLock { state -> [(String, UInt64)] in
            let due = state.down.filter { $0.value.at <= clock.now }.map { ($0.key, $0.value.incarnation) }.sorted { $0.0 < $1.0 }
            for (name, _) in due { state.down[name] = nil }
            return due
        }
        for (name, incarnation) in due {
            try await startNode(name, incarnation: incarnation)
            note("\(name) restarted as incarnation \(incarnation)")
        }
    }

    // MARK: Streams

    func streams(on gateway: String) -> [Int] {
        state.withLock { state in state.clients.indices.filter { state.clients[$0].stream?.gateway == gateway } }
    }

    /// Opens a stream for `user` on a live gateway, as `GET /v1/events` does, through the
    /// gateway's own hub (``StreamHub/open(_:resumingFrom:streamsPerUserMax:replayMessagesMax:)``
    /// and ``StreamHub/serve(_:replayFrom:)``) and a `LiveEventStream` writing into a simulated
    /// response: registered, its presence session opened, the replay from the client's cursor
    /// page by page, `ready`, then live events. The client reads what is flushed
    /// (``read(_:user:stream:)``) and opens another stream when this one ends.
    func openStream(_ user: Int) {
        guard let gateway = anyGateway(), let streams = state.withLock({ $0.nodes[gateway]?.gateway }) else {
            state.withLock { $0.clients[user].reconnectAt = clock.now.advanced(by: .milliseconds(500)) }
            return
        }
        let (id, cursor, number) = state.withLock { state -> (UserID, StreamCursor, Int) in
            state.streamsOpened += 1
            return (state.clients[user].id, state.clients[user].cursor, state.streamsOpened)
        }
        let sink = SimulatedEventSink(loop: streams.loop) { [weak self] frames in self?.read(frames, user: user, stream: number) }
        let stream = LiveEventStream(
            user: id, sink: sink, cursor: cursor, pingTicks: 15, unwritableBytesMax: .max, unwritableFor: .seconds(86_400),
            gapMax: options.streamGapMax, without: options.streamsWithout, clock: clock, logger: logger)
        state.withLock { state in
            state.clients[user].stream = Stream(gateway: gateway, number: number, sink: sink)
            state.clients[user].reconnectAt = nil
        }
        let hub = streams.hub
        Task {
            do {
                let firstPage = try await hub.open(stream, resumingFrom: cursor, streamsPerUserMax: .max, replayMessagesMax: 5_000)
                await hub.serve(stream, replayFrom: firstPage)
                if sink.closedByGateway { state.withLock { $0.streamsEnded += 1 } }
                endStream(user, number: number, reason: sink.closedByGateway ? "ended by its gateway" : "finished by its gateway")
            } catch {
                endStream(user, number: number, reason: "it could not open: \(error)")
            }
        }
    }

    /// What `user`'s stream `number` flushed to its client: each event's `id:` is the cursor the
    /// client resumes from; messages are checked as they arrive (``wrote(_:_:_:_:)``).
    func read(_ frames: [SimulatedEventSink.Frame], user: Int, stream number: Int) {
        for frame in frames {
            guard state.withLock({ $0.clients[user].stream?.number == number }) else { return }
            if frame.event == "ready" {
                state.withLock { $0.clients[user].stream?.live = true }
                note("user \(user) streams on stream \(number)")
            }
            do {
                switch frame.event {
                case "message":
                    let message = try Self.decoder.decode(API.MessageEvent.self, from: Data(frame.data.utf8)).message
                    wrote(user, message.conversationId, message.seq)
                    state.withLock { state in
                        if state.clients[user].messages[message.conversationId]?[message.seq] == nil {
                            state.clients[user].messages[message.conversationId, default: [:]][message.seq] = message
                        }
                    }
                    // Sending moves the sender's own read seq to its message, with no receipt.
                    state.withLock { $0.clients[user].readSeqs[message.conversationId, default: [:]][message.senderId, default: 0].formMax(message.seq) }
                case "receipt":
                    let receipt = try Self.decoder.decode(API.ReceiptEvent.self, from: Data(frame.data.utf8))
                    // Watermarks only move forward: a receipt replayed after a later one is older news.
                    state.withLock { $0.clients[user].readSeqs[receipt.conversationId, default: [:]][receipt.userId, default: 0].formMax(receipt.readSeq) }
                case "message_annotated":
                    let annotation = try Self.decoder.decode(API.AnnotationEvent.self, from: Data(frame.data.utf8)).annotation
                    state.withLock { $0.clients[user].annotations[annotation.conversationId, default: [:]][annotation.seq, default: [:]][annotation.key] = annotation.value }
                case let name where MessageChange.Kind(eventName: name) != nil:
                    wrote(user, try Self.decoder.decode(API.ChangeEvent.self, from: Data(frame.data.utf8)).change)
                case "conversation":
                    let conversation = try Self.decoder.decode(API.ConversationEvent.self, from: Data(frame.data.utf8)).conversation
                    state.withLock { $0.clients[user].names[conversation.id] = conversation.name }
                default:
                    break
                }
            } catch {
                fail("user \(user)'s stream \(number) wrote a \(frame.event) event that does not read as one (\(error)): \(frame.data.prefix(200))")
                continue
            }
            if let id = frame.id {
                guard let cursor = StreamCursor(token: id) else {
                    fail("user \(user)'s stream \(number) wrote an id that is no cursor: \(id)")
                    continue
                }
                state.withLock { $0.clients[user].cursor = cursor }
            }
        }
    }

    static let decoder = API.makeDecoder()

    /// `user`'s stream is over (stream `number` only, if given): the client lets go of it (its
    /// gateway then ends it, and closes its presence session) and opens another a moment later.
    func endStream(_ user: Int, number: Int? = nil, reason: String) {
        let ended = state.withLock { state -> Stream? in
            guard let stream = state.clients[user].stream, number == nil || stream.number == number else { return nil }
            state.clients[user].stream = nil
            state.clients[user].reconnectAt = clock.now.advanced(by: .milliseconds(random.int(in: 200..<1_000)))
            return stream
        }
        guard let ended else { return }
        ended.sink.clientGone()
        note("user \(user)'s stream \(ended.number) on \(ended.gateway) ended: \(reason)")
    }

    func reconnectDue() {
        let due = state.withLock { state in
            state.clients.indices.filter { state.clients[$0].stream == nil && (state.clients[$0].reconnectAt.map { $0 <= clock.now } ?? false) }
        }
        for user in due { openStream(user) }
    }

    /// A message written to `user` by its open stream: each stream writes a conversation's seqs
    /// in order, each once, and the client gets none past a gap. One it got on an earlier stream
    /// may come again (a resume's replay reaches back before its cursor): API.md's duplicates
    /// across a reconnect, which clients drop by seq.
    func wrote(_ user: Int, _ conversation: ConversationID, _ seq: Int64) {
        let (inStream, last, replaying) = state.withLock { state -> (Int64?, Int64, Bool) in
            let inStream = state.clients[user].stream?.written[conversation]
            state.clients[user].stream?.written[conversation] = seq
            let last = state.clients[user].received[conversation] ?? 0
            state.clients[user].received[conversation] = max(last, seq)
            state.written += 1
            return (inStream, last, state.clients[user].stream?.live == false)
        }
        if let inStream, seq <= inStream { fail("user \(user)'s stream wrote \(conversation) seq \(seq) after seq \(inStream)") }
        if seq > last + 1 { fail("user \(user) was written \(conversation) seq \(seq) after seq \(last)\(replaying ? " (replay)" : "")") }
    }

    /// A change written to `user` by its open stream: each stream writes a conversation's
    /// changes in order, each once, and each after the message it follows; the client applies
    /// each once (a resume's replay may bring one again).
    func wrote(_ user: Int, _ change: MessageChange) {
        let conversation = change.conversationId
        let (inStream, received) = state.withLock { state -> (Int64?, Int64) in
            let inStream = state.clients[user].stream?.changes[conversation]
            state.clients[user].stream?.changes[conversation] = change.changeSeq
            state.changesWritten += 1
            let reader = state.clients[user].id
            if state.clients[user].applied[conversation, default: []].insert(change.changeSeq).inserted {
                // The message changed, and the quotes of the replies to it.
                for (seq, message) in state.clients[user].messages[conversation] ?? [:] where seq == change.seq || message.replyTo?.seq == change.seq {
                    state.clients[user].messages[conversation]?[seq] = change.applied(to: message, as: reader)
                }
                state.clients[user].pinned[conversation] = change.applied(toPinned: state.clients[user].pinned[conversation] ?? [])
            }
            return (inStream, state.clients[user].received[conversation] ?? 0)
        }
        if let inStream, change.changeSeq <= inStream {
            fail("user \(user)'s stream wrote \(conversation) change \(change.changeSeq) after change \(inStream)")
        }
        if received < change.afterSeq {
            fail("user \(user) was written \(conversation) change \(change.changeSeq) (after seq \(change.afterSeq)) holding seqs up to \(received) only")
        }
    }

    // MARK: Sends

    func sendNew() {
        for _ in 0..<draws(perSecond: options.sendsPerSecond) {
            let open = state.withLock { state in state.conversations.filter { !state.silenced.contains($0.id) } }
            guard !open.isEmpty else { return }
            let (conversation, members) = open[random.int(in: 0..<open.count)]
            let sender = members[random.int(in: 0..<members.count)]
            let clientMessageId = random.uuid().uuidString.lowercased()
            let reply = random.int(in: 0..<5) == 0
            state.withLock { state in
                let received = state.clients[sender].received[conversation] ?? 0
                let replyTo = reply && received > 0 ? Int64(random.int(in: 1..<Int(received) + 1)) : nil
                state.sends[clientMessageId] = Send(conversation: conversation, sender: sender, clientMessageId: clientMessageId, replyTo: replyTo)
            }
            attempt(clientMessageId)
        }
    }

    /// Members mark read what they have, and groups are renamed, through a live gateway as their
    /// routes do; a failure is left (the state is the store's either way, and what a client
    /// learns of it is checked against the store).
    func changeStates() {
        for _ in 0..<draws(perSecond: options.receiptsPerSecond) {
            let (id, conversation, seq) = state.withLock { state -> (UserID, ConversationID?, Int64) in
                let client = state.clients[random.int(in: 0..<state.clients.count)]
                let conversation = client.conversations.isEmpty ? nil : client.conversations[random.int(in: 0..<client.conversations.count)]
                return (client.id, conversation, conversation.flatMap { client.received[$0] } ?? 0)
            }
            guard let conversation, seq > 0, let gateway = anyGateway(), let system = system(gateway) else { continue }
            Task {
                do {
                    let stored = try await ConversationActor.resolve(conversation, using: system).markReceipts(for: id, deliveredSeq: seq, readSeq: seq)
                    note("\(id) read \(conversation) through \(stored.readSeq)")
                } catch {
                    note("\(id) could not mark \(conversation) read: \(error)")
                }
            }
        }
        for _ in 0..<draws(perSecond: options.renamesPerSecond) {
            let groups = state.withLock { $0.conversations.filter { $0.id.rawValue.hasPrefix("c_") } }
            guard !groups.isEmpty, let gateway = anyGateway(), let system = system(gateway) else { continue }
            let (conversation, members) = groups[random.int(in: 0..<groups.count)]
            let by = state.withLock { $0.clients[members[random.int(in: 0..<members.count)]].id }
            let name = "named \(random.int(in: 0..<1_000_000))"
            note("\(conversation) renamed \(name) by \(by)")
            Task { _ = try? await ConversationActor.resolve(conversation, using: system).change(name: name, metadata: nil, by: by) }
        }
    }

    /// The bot notes what a member has read so far, under one of two keys, through a live gateway.
    func annotate() {
        for _ in 0..<draws(perSecond: options.annotationsPerSecond) {
            let groups = state.withLock { $0.conversations.filter { $0.id.rawValue.hasPrefix("c_") } }
            guard !groups.isEmpty, let gateway = anyGateway(), let system = system(gateway) else { continue }
            let (conversation, members) = groups[random.int(in: 0..<groups.count)]
            let seq = state.withLock { $0.clients[members[random.int(in: 0..<members.count)]].received[conversation] ?? 0 }
            guard seq > 0 else { continue }
            let key = ["translation", "summary"][random.int(in: 0..<2)]
            let value = "note \(random.int(in: 0..<1_000_000))"
            Task {
                do {
                    _ = try await ConversationActor.resolve(conversation, using: system).annotate(seq: seq, key: key, value: value, by: Self.bot)
                    note("the bot noted \(conversation) seq \(seq)'s \(key)")
                } catch {
                    note("the bot could not note \(conversation) seq \(seq)'s \(key): \(error)")
                }
            }
        }
    }

    /// Members change messages they have, through a live gateway as the routes do: the sender
    /// edits or deletes theirs, anyone reacts with one of three emoji or takes theirs back, a
    /// group's owner pins or unpins. The harness reads the store for who sent a message and who
    /// owns the group (an app knows); a refusal (a deletion that came first) is left.
    func changeMessages() {
        for _ in 0..<draws(perSecond: options.changesPerSecond) {
            let (member, conversation, seq) = state.withLock { state -> (Int, ConversationID?, Int64) in
                let member = random.int(in: 0..<state.clients.count)
                let client = state.clients[member]
                let conversation = client.conversations.isEmpty ? nil : client.conversations[random.int(in: 0..<client.conversations.count)]
                let received = conversation.flatMap { client.received[$0] } ?? 0
                return (member, conversation, received > 0 ? Int64(random.int(in: 1..<Int(received) + 1)) : 0)
            }
            guard let conversation, seq > 0, let gateway = anyGateway(), let system = system(gateway) else { continue }
            let roll = random.int(in: 0..<12)
            let emoji = ["👍", "❤️", "😂"][random.int(in: 0..<3)]
            let id = state.withLock { $0.clients[member].id }
            let key = random.uuid().uuidString.lowercased()
            let store = self.store
            Task {
                do {
                    let actor = try ConversationActor.resolve(conversation, using: system)
                    guard let sender = try await store.messages(in: conversation, after: seq - 1, limit: 1).first?.senderId else { return }
                    switch roll {
                    case 0..<3: _ = try await actor.edit(seq: seq, text: "edited \(key.prefix(8))", clientChangeId: key, by: sender)
                    case 3: _ = try await actor.delete(seq: seq, by: sender)
                    case 4..<8: _ = try await actor.react(seq: seq, emoji: emoji, adding: true, by: id)
                    case 8..<10: _ = try await actor.react(seq: seq, emoji: emoji, adding: false, by: id)
                    default:
                        guard let owner = try await store.conversation(conversation)?.ownerId else { return }
                        _ = try await actor.pin(seq: seq, pinning: roll == 10, by: owner)
                    }
                    state.withLock { $0.changesCommitted += 1 }
                    note("\(conversation) seq \(seq) changed (\(roll < 3 ? "edit" : roll == 3 ? "delete" : roll < 10 ? "reaction \(emoji)" : roll == 10 ? "pin" : "unpin"))")
                } catch {
                    note("\(conversation) seq \(seq) not changed: \(error)")
                }
            }
        }
    }

    static let bot: UserID = "u_simbot"

    /// How many of something that happens `perSecond` on average happen in this step.
    func draws(perSecond: Double) -> Int {
        let perStep = perSecond * Double(options.step.components.attoseconds) / 1e18
        var count = Int(perStep)
        if Double(random.next() % 1_000_000) / 1e6 < perStep - Double(count) { count += 1 }
        return count
    }

    func retryDue() {
        let due = state.withLock { state in
            state.sends.values.filter { !$0.inFlight && ($0.retryAt.map { $0 <= clock.now } ?? false) }.map(\.clientMessageId).sorted()
        }
        for clientMessageId in due { attempt(clientMessageId) }
    }

    /// One try of a send through a live gateway, as the gateway sends it (its retry while the
    /// owner cannot take it, ``SendRetry``, for the gateway's 5 s window on the simulation's
    /// clock); a failure is tried again 500 ms later with the same clientMessageId, as an app's
    /// outbox does.
    func attempt(_ clientMessageId: String) {
        guard let gateway = anyGateway(), let system = system(gateway) else {
            state.withLock { $0.sends[clientMessageId]?.retryAt = clock.now.advanced(by: .milliseconds(500)) }
            return
        }
        guard let send = state.withLock({ state -> Send? in
            state.sends[clientMessageId]?.inFlight = true
            state.sends[clientMessageId]?.attempts += 1
            if (state.sends[clientMessageId]?.attempts ?? 0) > 1 { state.retries += 1 }
            return state.sends[clientMessageId]
        }) else { return }
        let sender = state.withLock { $0.clients[send.sender].id }
        Task {
            do {
                let message = SendMessage(senderId: sender, clientMessageId: clientMessageId, text: "m \(clientMessageId.prefix(8))", replyTo: send.replyTo)
                let result = try await SendRetry.send(within: .seconds(5), clock: clock, logger: logger, conversation: send.conversation) {
                    // A gateway killed mid-request answers nothing more: its client sees the request fail.
                    guard self.system(gateway) === system else { throw RequestDied(clientGone: false) }
                    guard !self.diedWithAnswer.ids.withLock({ $0.contains(clientMessageId) }) else { throw RequestDied(clientGone: true) }
                    return try await ConversationActor.resolve(send.conversation, using: system).send(message)
                }
                note("\(send.conversation) seq \(result.message.seq) acknowledged to user \(send.sender) through \(gateway)\(result.created ? "" : " (found stored)")")
                // As the send's route does, on the connection's loop: the sender's own event to
                // its streams there, ahead of the delivery, if they take it.
                if let streams = state.withLock({ $0.nodes[gateway]?.gateway }), self.system(gateway) === system {
                    streams.loop.execute { streams.hub.deliverAhead(result.message, json: result.message.wrappedJSON, to: sender) }
                }
                let previous = state.withLock { state -> (ConversationID, Int64)? in
                    defer { state.sends[clientMessageId] = nil }
                    let previous = state.acknowledged[clientMessageId]
                    state.acknowledged[clientMessageId] = (send.conversation, result.message.seq)
                    return previous
                }
                if let previous, previous.1 != result.message.seq {
                    fail("clientMessageId \(clientMessageId) was acknowledged with seq \(previous.1) and then \(result.message.seq)")
                }
            } catch {
                // One failed send in four is not tried again. Its message may be committed all the
                // same (the answer was lost, the owner died after the commit), and then only the
                // owners' own repair brings it to the streams: a retry would publish it again.
                // A refusal (a reply to a message deleted meanwhile) is not tried again either.
                let refused = (error as? ChatError)?.code == .invalidRequest
                let givesUp = random.int(in: 0..<4) == 0 || send.once || refused || (error as? RequestDied)?.clientGone == true
                if givesUp { note("user \(send.sender) gives up on \(clientMessageId.prefix(8)) in \(send.conversation)") }
                state.withLock { state in
                    if givesUp {
                        state.sends[clientMessageId] = nil
                        state.abandoned += 1
                    } else {
                        state.sends[clientMessageId]?.inFlight = false
                        state.sends[clientMessageId]?.retryAt = clock.now.advanced(by: .milliseconds(500))
                    }
                }
            }
        }
    }

    /// The request of a send died before it was answered: its gateway was killed, or (a lost
    /// answer's fault) it died with its client, which does not send it again.
    struct RequestDied: Error {
        var clientGone: Bool
    }

    // MARK: The verdict

    func check() async throws {
        let (pending, acknowledged, conversations, clients) = state.withLock { state in
            (state.sends.values.sorted { $0.clientMessageId < $1.clientMessageId }, state.acknowledged, state.conversations, state.clients)
        }
        if !pending.isEmpty {
            let which = pending.map { "\($0.clientMessageId.prefix(8)) in \($0.conversation) (\($0.attempts) attempts\($0.inFlight ? ", one in flight" : ""))" }
            fail("\(pending.count) sends were never acknowledged, through the quiet stretch: \(which.joined(separator: ", "))")
        }
        var stored: [String: [Int64]] = [:]
        var lastSeq: [ConversationID: Int64] = [:]
        var lastChangeSeq: [ConversationID: Int64] = [:]
        for (conversation, _) in conversations {
            let messages = try await store.messages(in: conversation, after: 0, limit: 100_000)
            if messages.map(\.seq) != (0..<Int64(messages.count)).map({ $0 + 1 }) {
                fail("\(conversation)'s seqs are not 1…\(messages.count) in order")
            }
            lastSeq[conversation] = messages.last?.seq ?? 0
            lastChangeSeq[conversation] = try await store.conversation(conversation)?.lastChangeSeq ?? 0
            for message in messages { stored[message.clientMessageId, default: []].append(message.seq) }
        }
        for (clientMessageId, (conversation, seq)) in acknowledged.sorted(by: { $0.key < $1.key }) where stored[clientMessageId] != [seq] {
            fail("clientMessageId \(clientMessageId) was acknowledged as \(conversation) seq \(seq) but is stored as \(stored[clientMessageId] ?? [])")
        }
        for (user, client) in clients.enumerated() {
            guard let stream = client.stream, stream.live else {
                fail("user \(user) has no open stream at the end")
                continue
            }
            for conversation in client.conversations {
                let have = client.received[conversation] ?? 0
                let committed = lastSeq[conversation] ?? 0
                if have < committed {
                    fail("user \(user)'s stream on \(stream.gateway) is open and silent: \(conversation) seqs \(have + 1)...\(committed) never arrived")
                }
                let changes = lastChangeSeq[conversation] ?? 0
                let missing = (Int64(1)...max(1, changes)).filter { $0 <= changes && client.applied[conversation]?.contains($0) != true }
                if !missing.isEmpty {
                    fail("user \(user)'s stream on \(stream.gateway) is open and silent: \(conversation)'s changes \(missing.prefix(10)) never arrived")
                }
            }
        }
    }

    /// Every client resumes once more, as after any break, from the `id:` of the last event it
    /// read, with every node up: the contract's "a client that reconnects with its cursor gets
    /// every durable event after it" then leaves each knowing its conversations' states.
    func resumeEveryStream() async throws {
        for user in 0..<options.users {
            endStream(user, reason: "the final resume")
            state.withLock { $0.clients[user].reconnectAt = clock.now }
        }
        let allLive = try await advance(until: { [self] in
            reconnectDue()
            return state.withLock { $0.clients.allSatisfy { $0.stream?.live == true } }
        }, limit: .seconds(30))
        if !allLive { fail("the final resume: not every stream reached ready within 30 s") }
    }

    /// What each client learned from `receipt`, `conversation` and `message_annotated` events is
    /// the store's state: every member's read seq, every group's name, every note on a message.
    func checkStates() async throws {
        let (conversations, clients) = state.withLock { ($0.conversations, $0.clients) }
        for (id, members) in conversations {
            guard let record = try await store.conversation(id) else { continue }
            let history = try await store.messages(in: id, after: 0, limit: 100_000)
            for user in members {
                let client = clients[user]
                let missing = Set(1...max(1, record.lastChangeSeq)).subtracting(client.applied[id] ?? []).filter { $0 <= record.lastChangeSeq }
                if !missing.isEmpty { fail("user \(user) never got \(id)'s changes \(missing.sorted().prefix(10))") }
                if (client.pinned[id] ?? []) != record.pinned {
                    fail("user \(user) holds \(id)'s pins as \(client.pinned[id] ?? []), the store as \(record.pinned)")
                }
                let held = Set(try await store.reactions(of: client.id, in: id, seqs: 1...max(1, record.lastSeq)))
                for stored in history {
                    var expected = stored
                    expected.reactions = stored.reactions?.map { Reaction(emoji: $0.emoji, count: $0.count, me: held.contains(HeldReaction(seq: stored.seq, emoji: $0.emoji))) }
                    let got = client.messages[id]?[stored.seq]
                    if got?.text != expected.text || got?.editedAt != expected.editedAt || got?.deleted != expected.deleted
                        || got?.deletedBy != expected.deletedBy || Set(got?.reactions ?? []) != Set(expected.reactions ?? []) || got?.replyTo != expected.replyTo {
                        fail("user \(user) holds \(id) seq \(stored.seq) as \(got.map { String(describing: $0) } ?? "nothing"); history has \(expected)")
                    }
                }
            }
            let notes = record.lastSeq > 0 ? try await store.annotations(in: id, seqs: 1...record.lastSeq) : []
            for user in members {
                let client = clients[user]
                if record.kind == .group, client.names[id] != record.name {
                    fail("user \(user) knows \(id) as \(client.names[id] ?? "nil"), the store as \(record.name ?? "nil")")
                }
                for note in notes where client.annotations[id]?[note.seq]?[note.key] != note.value {
                    fail("user \(user) knows \(id) seq \(note.seq)'s \(note.key) as \(client.annotations[id]?[note.seq]?[note.key] ?? "nil"), the store as \(note.value)")
                }
                for member in record.members where member.readSeq > 0 && client.readSeqs[id]?[member.userId] != member.readSeq {
                    fail("user \(user) knows \(member.userId)'s read seq in \(id) as \(client.readSeqs[id]?[member.userId] ?? 0), the store as \(member.readSeq)")
                }
            }
        }
    }

}

extension Int64 {
    mutating func formMax(_ other: Int64) { self = Swift.max(self, other) }
}
