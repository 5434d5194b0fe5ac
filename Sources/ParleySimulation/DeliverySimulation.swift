import ParleyChat
import ParleyModel

/// A seeded, deterministic simulation of how committed messages, and changes to them, reach their
/// readers' streams: workers owning conversations (``DeliveryStateMachine``), gateways holding
/// event streams (``EventStreamStateMachine``, and each stream's lane of changes, as
/// ``StreamSessionStateMachine`` keeps it), a store, clients that send, change messages and resume
/// by cursor, and a network that delays, drops, duplicates and reorders — under node kills,
/// restarts, cut links and broken streams, on a manual timeline.
///
/// After a stretch with faults comes a quiet one (every node back, no new sends). The run fails
/// if any stream ever wrote a message out of order, twice, or past a gap, or a change out of its
/// conversation's order or before the message it follows, or if at the end a connected client
/// lacks a message or change committed to one of its conversations: a stream open and silent
/// while it owes events. The same seed gives the same run.
public struct DeliverySimulation {
    public struct Options: Sendable {
        public var workers = 3
        public var gateways = 2
        /// Group conversations (every member streams) and direct ones, among `users`.
        public var users = 12
        public var groups = 3
        public var groupSize = 6
        public var directs = 4
        public var activeTime: Duration = .seconds(30)
        public var quietTime: Duration = .seconds(20)
        public var sendsPerSecond = 40.0
        /// Changes to messages (edits, deletions, reactions: to delivery all alike), each after
        /// the conversation's last committed message.
        public var changesPerSecond = 10.0
        /// Chances per packet (a batch or an acknowledgement between a worker and a gateway).
        public var dropRate = 0.02
        public var duplicateRate = 0.01
        public var delay: ClosedRange<Int> = 1...40  // milliseconds
        /// Chance that a commit's answer is lost on its way to the owner's fan-out, and that the
        /// client that sent it is gone too (never retries, so nothing republishes it).
        public var lostAnswerRate = 0.02
        public var clientGoneRate = 0.5
        /// Faults in the active stretch: node kills (restarted 2–3 s later), link cuts, broken streams.
        public var faultsPerMinute = 15.0
        /// Kill every worker, one after another, once in the run.
        public var burst = true
        public var failureDetection: Duration = .seconds(2)
        /// A new owner publishes again what was committed this recently (the dead owner may have
        /// acknowledged it without handing it on).
        public var recoveryWindow: Duration = .seconds(10)
        /// A worker that loses a conversation to a ring change keeps handing on what it released
        /// until every gateway acknowledged it.
        public var drainOnHandOver = true
        public var delivery = DeliveryStateMachine<Int, Item>.Policy()
        public var streamGapMax: Duration = .seconds(5)
        public var tick: Duration = .milliseconds(20)

        public init() {}
    }

    /// The guards of the contract, each of which a run can be made without, to see that some
    /// seed fails then.
    public enum Guard: String, CaseIterable, Sendable {
        /// An owner reads the store for seqs it holds back past ``DeliveryStateMachine/Policy/holdMax``.
        case storeRead = "store-read"
        /// A batch not acknowledged is sent again.
        case resend
        /// A stream whose gap is not filled in time ends.
        case streamEnd = "stream-end"
        /// A new owner publishes the recent messages again.
        case recovery
        /// An owner that loses a conversation hands on what it released.
        case drain

        public func remove(from options: inout Options) {
            switch self {
            case .storeRead: options.delivery.holdMax = .seconds(3_600)
            case .resend:
                options.delivery.retry = Backoff(first: .seconds(3_600), max: .seconds(3_600))
                options.delivery.ackTimeout = .seconds(3_600)
            case .streamEnd: options.streamGapMax = .seconds(3_600)
            case .recovery: options.recoveryWindow = .zero
            case .drain: options.drainOnHandOver = false
            }
        }
    }

    /// What an owner hands the gateways: a message (its seq), or a change (its number in the
    /// conversation's order, and the seq it follows).
    public enum Item: Sendable, Hashable {
        case message(Int64)
        case change(Int64, afterSeq: Int64)
    }

    typealias Delivery = DeliveryStateMachine<Int, Item>
    typealias Stream = EventStreamStateMachine<Int, Int64>

    struct Worker {
        var alive = true
        var incarnation = 1
        var diedAt: ContinuousClock.Instant?
        /// The cluster knows it died (failure detection ran out).
        var declaredDown = false
    }

    /// A conversation's delivery on a worker: while it owns the conversation, and after, while it
    /// still hands on what it released (draining).
    struct Owner {
        var worker: Int
        var conversation: Int
        var draining = false
        var machine: Delivery
    }

    struct Gateway {
        var alive = true
        var incarnation = 1
        var diedAt: ContinuousClock.Instant?
        var declaredDown = false
    }

    struct Client {
        var conversations: [Int] = []
        /// The last seq received of each conversation, over every stream: the client's cursor.
        var received: [Int: Int64] = [:]
        var stream: (gateway: Int, incarnation: Int, machine: Stream)?
        var reconnectAt: ContinuousClock.Instant?
        /// The last change applied of each conversation, over every stream.
        var changesReceived: [Int: Int64] = [:]
        /// The open stream's changes: per conversation the last it wrote, and those waiting (by
        /// number, with the seq each follows) since when.
        var changesWritten: [Int: Int64] = [:]
        var changesWaiting: [Int: [Int64: Int64]] = [:]
        var changesWaitingSince: ContinuousClock.Instant?
    }

    enum Packet {
        case batch(owner: Int, worker: Int, gateway: Int, gatewayIncarnation: Int, conversation: Int, from: Int64, events: [Item])
        case ack(owner: Int, worker: Int, gateway: Int, through: Int64)
    }

    struct InFlight {
        var at: ContinuousClock.Instant
        var order: Int
        var packet: Packet
    }

    enum Fault {
        case killWorker(Int), killGateway(Int), cut(worker: Int, gateway: Int, for: Duration), breakStream(user: Int)
    }

    public let seed: UInt64
    public let options: Options
    var random: SeededRandom
    var time = ManualTime()
    var workers: [Worker]
    var owners: [Int: Owner] = [:]
    var nextOwner = 0
    var gateways: [Gateway]
    var clients: [Client]
    var members: [[Int]] = []
    var store: [[Int64]] = []
    /// Per conversation, the seq each change follows (change n at n - 1) and when it committed.
    var changes: [[Int64]] = []
    var changeTimes: [[ContinuousClock.Instant]] = []
    var lastCommitAt: [ContinuousClock.Instant?] = []
    var inFlight: [InFlight] = []
    var sentPackets = 0
    var cuts: [(worker: Int, gateway: Int, until: ContinuousClock.Instant)] = []
    var faults: [(at: Duration, fault: Fault)] = []
    var restarts: [(at: ContinuousClock.Instant, worker: Int?, gateway: Int?)] = []
    /// Every notable step, for the trace of a failure.
    public private(set) var trace: [String] = []
    public private(set) var failures: [String] = []
    public private(set) var committed = 0
    public private(set) var changesCommitted = 0
    public private(set) var written = 0
    public private(set) var changesWritten = 0
    public private(set) var streamsEnded = 0
    public private(set) var storeReads = 0

    public init(seed: UInt64, options: Options = Options()) {
        self.seed = seed
        self.options = options
        self.random = SeededRandom(seed: seed)
        self.workers = Array(repeating: Worker(), count: options.workers)
        self.gateways = Array(repeating: Gateway(), count: options.gateways)
        self.clients = Array(repeating: Client(), count: options.users)
        for group in 0..<options.groups {
            var chosen = Set<Int>()
            while chosen.count < min(options.groupSize, options.users) { chosen.insert(Int.random(in: 0..<options.users, using: &random)) }
            addConversation(chosen.sorted(), name: "group \(group)")
        }
        for _ in 0..<options.directs {
            let a = Int.random(in: 0..<options.users, using: &random)
            let b = (a + 1 + Int.random(in: 0..<(options.users - 1), using: &random)) % options.users
            addConversation([a, b].sorted(), name: "direct")
        }
        scheduleFaults()
    }

    var elapsed: Duration { time.origin.duration(to: time.now) }

    mutating func note(_ line: String) {
        let milliseconds = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        let text = String(milliseconds / 1000) + "." + String(1000 + milliseconds % 1000).dropFirst()
        trace.append("t=\(String(repeating: " ", count: max(0, 7 - text.count)))\(text) \(line)")
    }

    mutating func fail(_ line: String) {
        failures.append(line)
        note("FAILURE \(line)")
    }

    private mutating func addConversation(_ users: [Int], name: String) {
        let id = members.count
        members.append(users)
        store.append([])
        changes.append([])
        changeTimes.append([])
        lastCommitAt.append(nil)
        for user in users { clients[user].conversations.append(id) }
        note("conversation \(id) (\(name)): users \(users)")
    }

    private mutating func scheduleFaults() {
        let seconds = Double(options.activeTime.components.seconds)
        let count = Int((options.faultsPerMinute * seconds / 60).rounded())
        for _ in 0..<count {
            let at = Duration.milliseconds(Int.random(in: 1_000..<Int(seconds * 1000), using: &random))
            let fault: Fault
            switch Int.random(in: 0..<4, using: &random) {
            case 0: fault = .killWorker(Int.random(in: 0..<options.workers, using: &random))
            case 1: fault = .killGateway(Int.random(in: 0..<options.gateways, using: &random))
            case 2:
                fault = .cut(worker: Int.random(in: 0..<options.workers, using: &random), gateway: Int.random(in: 0..<options.gateways, using: &random),
                             for: .milliseconds(Int.random(in: 1_000...15_000, using: &random)))
            default: fault = .breakStream(user: Int.random(in: 0..<options.users, using: &random))
            }
            faults.append((at, fault))
        }
        if options.burst, options.workers > 0 {
            var at = Duration.milliseconds(Int.random(in: 2_000..<max(2_001, Int(seconds * 1000) - 12_000), using: &random))
            for worker in (0..<options.workers).shuffled(using: &random) {
                faults.append((at, .killWorker(worker)))
                at += .milliseconds(Int.random(in: 1_500...3_500, using: &random))
            }
        }
        faults.sort { $0.at < $1.at }
    }

    // MARK: Running

    /// Runs the active stretch and the quiet one, then checks every client.
    public mutating func run() {
        for user in clients.indices { openStream(user) }
        let end = time.origin.advanced(by: options.activeTime + options.quietTime)
        var nextFault = 0
        while time.now < end {
            time.advance(by: options.tick)
            let active = elapsed < options.activeTime
            while nextFault < faults.count, faults[nextFault].at <= elapsed {
                inject(faults[nextFault].fault)
                nextFault += 1
            }
            restartDue()
            detectFailures()
            deliverPackets()
            tickMachines()
            reconnectClients()
            if active {
                sendMessages()
                changeMessages()
            }
            retrySends()
        }
        checkEnd()
    }

    /// The worker that owns `conversation` as the cluster sees it (a dead worker counts until it
    /// is detected): rendezvous hashing over the workers believed up.
    func owner(of conversation: Int) -> Int? {
        var best: (worker: Int, score: UInt64)?
        for (index, worker) in workers.enumerated() where worker.alive || !worker.declaredDown {
            var mix = SeededRandom(seed: UInt64(conversation) &* 0x9E37_79B9 &+ UInt64(index) &* 0x85EB_CA6B)
            let score = mix.next()
            if let current = best, current.score >= score { continue }
            best = (index, score)
        }
        return best?.worker
    }

    func isDetected(_ diedAt: ContinuousClock.Instant?) -> Bool {
        guard let diedAt else { return false }
        return diedAt.advanced(by: options.failureDetection) <= time.now
    }

    /// The gateways holding a stream of a member of `conversation`, as the directory says.
    func directory(_ conversation: Int) -> Set<Int> {
        var result = Set<Int>()
        for user in members[conversation] {
            if let stream = clients[user].stream, gateways[stream.gateway].alive { result.insert(stream.gateway) }
        }
        return result
    }

    // MARK: Faults

    mutating func inject(_ fault: Fault) {
        switch fault {
        case .killWorker(let index):
            guard workers[index].alive else { return }
            note("worker-\(index) killed (owned \(owners.values.filter { $0.worker == index && !$0.draining }.map(\.conversation).sorted()))")
            workers[index] = Worker(alive: false, incarnation: workers[index].incarnation, diedAt: time.now)
            owners = owners.filter { $0.value.worker != index }
            restarts.append((time.now.advanced(by: .milliseconds(Int.random(in: 2_000...3_000, using: &random))), index, nil))
        case .killGateway(let index):
            guard gateways[index].alive else { return }
            note("gateway-\(index) killed")
            gateways[index].alive = false
            gateways[index].diedAt = time.now
            for user in clients.indices where clients[user].stream?.gateway == index { closeStream(user, reason: "its gateway died") }
            restarts.append((time.now.advanced(by: .milliseconds(Int.random(in: 2_000...3_000, using: &random))), nil, index))
        case .cut(let worker, let gateway, let length):
            note("link worker-\(worker) – gateway-\(gateway) cut for \(length)")
            cuts.append((worker, gateway, time.now.advanced(by: length)))
        case .breakStream(let user):
            guard clients[user].stream != nil else { return }
            closeStream(user, reason: "the connection broke")
        }
    }

    mutating func restartDue() {
        let due = restarts.filter { $0.at <= time.now }
        restarts.removeAll { $0.at <= time.now }
        for restart in due {
            if let index = restart.worker {
                workers[index] = Worker(alive: true, incarnation: workers[index].incarnation + 1)
                note("worker-\(index) restarted (incarnation \(workers[index].incarnation))")
                ringChanged()
            }
            if let index = restart.gateway {
                gateways[index] = Gateway(alive: true, incarnation: gateways[index].incarnation + 1)
                note("gateway-\(index) restarted")
            }
        }
        cuts.removeAll { $0.until <= time.now }
    }

    /// Dead nodes whose death the cluster now knows of.
    mutating func detectFailures() {
        for index in workers.indices where !workers[index].alive && !workers[index].declaredDown && isDetected(workers[index].diedAt) {
            workers[index].declaredDown = true
            note("worker-\(index) declared down")
            ringChanged()
        }
        for index in gateways.indices where !gateways[index].alive && !gateways[index].declaredDown && isDetected(gateways[index].diedAt) {
            gateways[index].declaredDown = true
            note("gateway-\(index) declared down")
            for conversation in members.indices { updateGateways(conversation) }
        }
    }

    /// The ring moved (a worker left, joined, or came back as a new incarnation): a live worker that
    /// lost a conversation drains what it released; when the last owner's incarnation is gone, the
    /// owner now takes a conversation active within the recovery window at once (the dead owner may
    /// have acknowledged messages without handing them on, and no send may come to bring it back).
    /// Otherwise the new owner takes it on its first send.
    mutating func ringChanged() {
        for conversation in members.indices {
            let owner = owner(of: conversation)
            // The last owner is gone when its incarnation is: dead, or restarted (a new incarnation
            // starts with nothing, even when it is back before anyone noticed it died).
            let previousGone = lastOwner[conversation].map { !workers[$0.worker].alive || workers[$0.worker].incarnation != $0.incarnation } ?? false
            for id in owners.keys.sorted() where owners[id]!.conversation == conversation && owners[id]!.worker != owner && !owners[id]!.draining {
                if options.drainOnHandOver {
                    owners[id]!.draining = true
                    note("worker-\(owners[id]!.worker) no longer owns conversation \(conversation); drains what it released")
                } else {
                    note("worker-\(owners[id]!.worker) no longer owns conversation \(conversation); drops what it released")
                    owners[id] = nil
                }
            }
            if let owner, previousGone, workers[owner].alive, ownerID(conversation, on: owner) == nil,
               let last = lastCommitAt[conversation], last.advanced(by: options.recoveryWindow) > time.now {
                activate(conversation, on: owner)
            }
        }
    }

    // MARK: The owner's side

    /// `worker` takes `conversation`: it publishes again what was committed within the recovery
    /// window, which a previous owner may have acknowledged without handing on (streams drop the
    /// seqs they have).
    @discardableResult
    mutating func activate(_ conversation: Int, on worker: Int) -> Bool {
        guard workers[worker].alive else { return false }
        if ownerID(conversation, on: worker) != nil { return true }
        let count = Int64(store[conversation].count)
        let from = max(0, count - recentCount(conversation))
        let id = nextOwner
        nextOwner += 1
        lastOwner[conversation] = (worker, workers[worker].incarnation)
        owners[id] = Owner(worker: worker, conversation: conversation, machine: Delivery(releasedThrough: from, policy: options.delivery))
        note("worker-\(worker) activates conversation \(conversation) (store through \(count), publishing from \(from + 1))")
        updateGateways(conversation)
        var seq = from + 1
        while seq <= count {
            update(id) { $0.committed(seq, .message(seq), now: $1) }
            seq += 1
        }
        // Then the changes committed within the window, each after its message.
        let cutoff = time.now.advanced(by: .zero - options.recoveryWindow)
        for (index, at) in changeTimes[conversation].enumerated() where at > cutoff {
            let afterSeq = changes[conversation][index]
            update(id) { $0.published(.change(Int64(index + 1), afterSeq: afterSeq), afterSeq: afterSeq, now: $1) }
        }
        return true
    }

    /// Messages of `conversation` committed within the recovery window.
    func recentCount(_ conversation: Int) -> Int64 {
        let cutoff = time.now.advanced(by: .zero - options.recoveryWindow)
        return Int64(commitTimes[conversation]?.filter { $0 > cutoff }.count ?? 0)
    }

    var commitTimes: [Int: [ContinuousClock.Instant]] = [:]
    /// The worker that last took each conversation.
    var lastOwner: [Int: (worker: Int, incarnation: Int)] = [:]

    /// The delivery of `conversation` that `worker` owns (not one it drains).
    func ownerID(_ conversation: Int, on worker: Int) -> Int? {
        owners.keys.sorted().first { owners[$0]!.worker == worker && owners[$0]!.conversation == conversation && !owners[$0]!.draining }
    }

    /// Gives owner `id`'s machine an input and performs the directives it returns.
    mutating func update(_ id: Int, _ input: (inout Delivery, ContinuousClock.Instant) -> [Delivery.Directive]) {
        guard owners[id] != nil else { return }
        let now = time.now
        let directives = input(&owners[id]!.machine, now)
        if !directives.isEmpty { perform(directives, owner: id) }
    }

    /// An owner learns where the members' streams are now; a draining one only forgets gateways.
    mutating func updateGateways(_ conversation: Int) {
        let current = directory(conversation)
        for id in owners.keys.sorted() where owners[id]!.conversation == conversation {
            let draining = owners[id]!.draining
            update(id) { machine, now in machine.gateways(draining ? machine.gateways.intersection(current) : current, now: now) }
        }
    }

    /// How many of something that happens `perSecond` on average happen in this tick.
    mutating func draws(perSecond: Double) -> Int {
        let perTick = perSecond * Double(options.tick.components.attoseconds) / 1e18
        var count = Int(perTick)
        if Double.random(in: 0..<1, using: &random) < perTick - Double(count) { count += 1 }
        return count
    }

    mutating func sendMessages() {
        for _ in 0..<draws(perSecond: options.sendsPerSecond) {
            let conversation = Int.random(in: 0..<members.count, using: &random)
            guard let owner = owner(of: conversation), workers[owner].alive else { continue }  // the client retries later; it does not matter which send
            activate(conversation, on: owner)
            store[conversation].append(Int64(store[conversation].count + 1))
            let seq = Int64(store[conversation].count)
            committed += 1
            lastCommitAt[conversation] = time.now
            commitTimes[conversation, default: []].append(time.now)
            if Double.random(in: 0..<1, using: &random) < options.lostAnswerRate {
                let gone = Double.random(in: 0..<1, using: &random) < options.clientGoneRate
                note("conversation \(conversation) seq \(seq) committed on worker-\(owner); its answer lost\(gone ? ", and its client gone" : "")")
                if !gone { retries.append((time.now.advanced(by: .milliseconds(500)), conversation, seq)) }
                // The owner's append failed without saying whether it committed.
                if let id = ownerID(conversation, on: owner) { owners[id]!.machine.commitUncertain(now: time.now) }
                continue
            }
            if let id = ownerID(conversation, on: owner) { update(id) { $0.committed(seq, .message(seq), now: $1) } }
        }
    }

    /// Members change messages: each change is committed by the conversation's owner, numbered
    /// next, after the last message the store has, and handed to the owner's delivery.
    mutating func changeMessages() {
        for _ in 0..<draws(perSecond: options.changesPerSecond) {
            let conversation = Int.random(in: 0..<members.count, using: &random)
            guard !store[conversation].isEmpty, let owner = owner(of: conversation), workers[owner].alive, activate(conversation, on: owner),
                  let id = ownerID(conversation, on: owner)
            else { continue }
            let afterSeq = Int64(store[conversation].count)
            changes[conversation].append(afterSeq)
            changeTimes[conversation].append(time.now)
            changesCommitted += 1
            let number = Int64(changes[conversation].count)
            update(id) { $0.published(.change(number, afterSeq: afterSeq), afterSeq: afterSeq, now: $1) }
        }
    }

    /// Clients whose send's answer was lost send it again with its clientMessageId until it is
    /// acknowledged: the owner then finds it stored and publishes it again.
    mutating func retrySends() {
        let due = retries.filter { $0.at <= time.now }
        retries.removeAll { $0.at <= time.now }
        for retry in due {
            // A send retried with its clientMessageId finds its message stored: the owner publishes it.
            guard let owner = owner(of: retry.conversation), activate(retry.conversation, on: owner) else {
                retries.append((time.now.advanced(by: .milliseconds(500)), retry.conversation, retry.seq))
                continue
            }
            if let id = ownerID(retry.conversation, on: owner) { update(id) { $0.republished(retry.seq, .message(retry.seq), now: $1) } }
        }
    }

    var retries: [(at: ContinuousClock.Instant, conversation: Int, seq: Int64)] = []

    mutating func perform(_ directives: [Delivery.Directive], owner id: Int) {
        guard let owner = owners[id] else { return }
        for directive in directives {
            switch directive {
            case .send(let gateway, let from, let events):
                transmit(.batch(owner: id, worker: owner.worker, gateway: gateway, gatewayIncarnation: gateways[gateway].incarnation,
                                conversation: owner.conversation, from: from, events: events))
            case .readStore(let after, let before):
                storeReads += 1
                note("worker-\(owner.worker) reads conversation \(owner.conversation) seqs \(after + 1)..<\(before) from the store")
                let found = store[owner.conversation].filter { $0 > after && $0 < before }.map { (seq: $0, event: Item.message($0)) }
                update(id) { $0.storeRead(found, now: $1) }
            }
        }
    }

    // MARK: The network

    mutating func transmit(_ packet: Packet) {
        guard Double.random(in: 0..<1, using: &random) >= options.dropRate else { return }
        let copies = Double.random(in: 0..<1, using: &random) < options.duplicateRate ? 2 : 1
        for _ in 0..<copies {
            sentPackets += 1
            let at = time.now.advanced(by: .milliseconds(Int.random(in: options.delay, using: &random)))
            inFlight.append(InFlight(at: at, order: sentPackets, packet: packet))
        }
    }

    func isCut(worker: Int, gateway: Int) -> Bool { cuts.contains { $0.worker == worker && $0.gateway == gateway } }

    mutating func deliverPackets() {
        let due = inFlight.filter { $0.at <= time.now }.sorted { ($0.at, $0.order) < ($1.at, $1.order) }
        inFlight.removeAll { $0.at <= time.now }
        for item in due {
            switch item.packet {
            case .batch(let owner, let worker, let gateway, let gatewayIncarnation, let conversation, let from, let events):
                guard gateways[gateway].alive, gateways[gateway].incarnation == gatewayIncarnation, !isCut(worker: worker, gateway: gateway) else { continue }
                for event in events {
                    for user in members[conversation] where clients[user].stream?.gateway == gateway {
                        switch event {
                        case .message(let seq): streamReceived(user, conversation: conversation, seq: seq)
                        case .change(let number, let afterSeq): changeReceived(user, conversation: conversation, number: number, afterSeq: afterSeq)
                        }
                    }
                }
                transmit(.ack(owner: owner, worker: worker, gateway: gateway, through: from + Int64(events.count) - 1))
            case .ack(let owner, let worker, let gateway, let through):
                // An owner that died with its worker is gone from `owners`: its acknowledgements fall away.
                guard !isCut(worker: worker, gateway: gateway) else { continue }
                update(owner) { $0.acknowledged(gateway, through: through, now: $1) }
            }
        }
    }

    mutating func tickMachines() {
        for id in owners.keys.sorted() {
            update(id) { $0.tick(now: $1) }
            if let owner = owners[id], owner.draining, owner.machine.isIdle {
                owners[id] = nil
                note("worker-\(owner.worker) drained conversation \(owner.conversation)")
            }
        }
        let now = time.now
        for user in clients.indices where clients[user].stream?.machine.isWaiting == true {
            let directives = clients[user].stream!.machine.tick(now: now)
            applyStream(directives, user: user)
        }
        // A change waiting as long as a gap may ends its stream too: the client resumes.
        for user in clients.indices where clients[user].stream != nil {
            if let since = clients[user].changesWaitingSince, since.advanced(by: options.streamGapMax) <= now {
                streamsEnded += 1
                closeStream(user, reason: "a change waited \(options.streamGapMax) for the one before it or its message")
            }
        }
    }

    // MARK: Clients and their streams

    mutating func openStream(_ user: Int) {
        let live = gateways.indices.filter { gateways[$0].alive }
        guard !live.isEmpty else {
            clients[user].reconnectAt = time.now.advanced(by: .milliseconds(500))
            return
        }
        let gateway = live[Int.random(in: 0..<live.count, using: &random)]
        // Register first, so that every owner sends here from now on; then replay what the store
        // holds after the client's cursor.
        clients[user].stream = (gateway, gateways[gateway].incarnation, Stream(written: [:], gapMax: options.streamGapMax))
        clients[user].reconnectAt = nil
        for conversation in clients[user].conversations.sorted() { updateGateways(conversation) }
        var written: [Int: Int64] = [:]
        for conversation in clients[user].conversations.sorted() {
            for seq in store[conversation] where seq > clients[user].received[conversation, default: 0] {
                clientWrote(user, conversation: conversation, seq: seq, replay: true)
            }
            written[conversation] = Int64(store[conversation].count)
        }
        let machine = Stream(written: written, gapMax: options.streamGapMax)
        clients[user].stream?.machine = machine
        // The replay's changes come after its messages, each conversation's in order.
        clients[user].changesWaiting = [:]
        clients[user].changesWaitingSince = nil
        for conversation in clients[user].conversations.sorted() {
            let from = clients[user].changesReceived[conversation, default: 0]
            for (index, afterSeq) in changes[conversation].enumerated() where Int64(index + 1) > from {
                clientWroteChange(user, conversation: conversation, number: Int64(index + 1), afterSeq: afterSeq, replay: true)
            }
            clients[user].changesWritten[conversation] = Int64(changes[conversation].count)
        }
        note("user \(user) streams on gateway-\(gateway) (replayed through \(written.sorted { $0.key < $1.key }.map { "c\($0.key):\($0.value)" }.joined(separator: " ")))")
    }

    mutating func closeStream(_ user: Int, reason: String) {
        guard let stream = clients[user].stream else { return }
        note("user \(user)'s stream on gateway-\(stream.gateway) ended: \(reason)")
        clients[user].stream = nil
        clients[user].reconnectAt = time.now.advanced(by: .milliseconds(Int.random(in: 200...1_000, using: &random)))
        for conversation in clients[user].conversations.sorted() { updateGateways(conversation) }
    }

    mutating func reconnectClients() {
        for user in clients.indices where clients[user].stream == nil {
            if let at = clients[user].reconnectAt, at <= time.now { openStream(user) }
        }
    }

    mutating func streamReceived(_ user: Int, conversation: Int, seq: Int64) {
        guard clients[user].stream != nil else { return }
        let now = time.now
        let directives = clients[user].stream!.machine.received(conversation, seq: seq, seq, now: now)
        applyStream(directives, user: user)
    }

    /// A change reaches a stream: written in its conversation's order, each once, once the stream
    /// wrote the message it follows; until then it waits.
    mutating func changeReceived(_ user: Int, conversation: Int, number: Int64, afterSeq: Int64) {
        guard clients[user].stream != nil, number > clients[user].changesWritten[conversation, default: 0] else { return }
        clients[user].changesWaiting[conversation, default: [:]][number] = afterSeq
        releaseChanges(user, conversation: conversation)
    }

    mutating func releaseChanges(_ user: Int, conversation: Int) {
        while true {
            let next = clients[user].changesWritten[conversation, default: 0] + 1
            guard let afterSeq = clients[user].changesWaiting[conversation]?[next], clients[user].received[conversation, default: 0] >= afterSeq else { break }
            clients[user].changesWaiting[conversation]?[next] = nil
            clients[user].changesWritten[conversation] = next
            clientWroteChange(user, conversation: conversation, number: next, afterSeq: afterSeq, replay: false)
        }
        if clients[user].changesWaiting[conversation]?.isEmpty == true { clients[user].changesWaiting[conversation] = nil }
        let waiting = !clients[user].changesWaiting.isEmpty
        clients[user].changesWaitingSince = waiting ? clients[user].changesWaitingSince ?? time.now : nil
    }

    mutating func clientWroteChange(_ user: Int, conversation: Int, number: Int64, afterSeq: Int64, replay: Bool) {
        let last = clients[user].changesReceived[conversation, default: 0]
        changesWritten += 1
        if number != last + 1 {
            fail("user \(user) was written conversation \(conversation) change \(number) after change \(last)\(replay ? " (replay)" : "")")
        }
        if clients[user].received[conversation, default: 0] < afterSeq {
            fail("user \(user) was written conversation \(conversation) change \(number) (after seq \(afterSeq)) holding seqs up to \(clients[user].received[conversation, default: 0])")
        }
        clients[user].changesReceived[conversation] = max(last, number)
    }

    mutating func applyStream(_ directives: [Stream.Directive], user: Int) {
        for directive in directives {
            switch directive {
            case .write(let events):
                for event in events { clientWrote(user, conversation: event.conversation, seq: event.seq, replay: false) }
                for conversation in Set(events.map(\.conversation)).sorted() where clients[user].changesWaiting[conversation] != nil {
                    releaseChanges(user, conversation: conversation)
                }
            case .end(let conversation):
                streamsEnded += 1
                closeStream(user, reason: "a gap in conversation \(conversation) was not filled in time")
            }
        }
    }

    mutating func clientWrote(_ user: Int, conversation: Int, seq: Int64, replay: Bool) {
        let last = clients[user].received[conversation, default: 0]
        written += 1
        if seq != last + 1 {
            fail("user \(user) was written conversation \(conversation) seq \(seq) after seq \(last)\(replay ? " (replay)" : "")")
        }
        clients[user].received[conversation] = max(last, seq)
    }

    // MARK: The verdict

    mutating func checkEnd() {
        for user in clients.indices {
            guard let stream = clients[user].stream else {
                fail("user \(user) has no stream at the end")
                continue
            }
            for conversation in clients[user].conversations.sorted() {
                let have = clients[user].received[conversation, default: 0]
                let committed = Int64(store[conversation].count)
                if have < committed {
                    fail("user \(user)'s stream on gateway-\(stream.gateway) is open and silent: conversation \(conversation) seqs \(have + 1)...\(committed) never arrived")
                }
                let applied = clients[user].changesReceived[conversation, default: 0]
                if applied < Int64(changes[conversation].count) {
                    fail("user \(user)'s stream on gateway-\(stream.gateway) is open and silent: conversation \(conversation) changes \(applied + 1)...\(changes[conversation].count) never arrived")
                }
            }
        }
    }

    public var summary: String {
        "\(failures.isEmpty ? "passed" : "FAILED (\(failures.count))"): \(committed) committed, \(written) written to streams, "
            + "\(changesCommitted) changes committed, \(changesWritten) written, "
            + "\(streamsEnded) streams ended on a gap, \(storeReads) store reads"
    }

    /// The lines of the trace that concern what failed: the conversations, users and nodes its
    /// failures name, and every fault.
    public var failureTrace: [String] {
        let words = Set(failures.flatMap { line -> [String] in
            var found: [String] = []
            let parts = line.split(separator: " ")
            for (index, part) in parts.enumerated() where index + 1 < parts.count {
                if part == "conversation" || part == "user" { found.append("\(part) \(parts[index + 1])") }
            }
            return found
        })
        return trace.filter { line in
            line.contains("killed") || line.contains("restarted") || line.contains("declared down") || line.contains("cut for")
                || line.contains("FAILURE") || words.contains { line.contains($0 + " ") || line.hasSuffix($0) || line.contains($0 + ")") || line.contains($0 + "'") || line.contains($0 + ";") || line.contains($0 + ":") }
        }
    }
}
