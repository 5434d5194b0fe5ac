import Distributed
import Foundation
import Logging
import ParleyCluster
import ParleyModel
import ParleyStore

/// What the chat actors of a node share: the store, the node's group commit, the limits, the
/// delivery's timings.
public struct ChatServices: Sendable {
    public let store: any ChatStore
    public let committer: GroupCommitter
    public let limits: ChatLimits
    public let delivery: DeliveryTimings
    /// How this node sends push notifications; nil: it sends none.
    public let pushes: PushSettings?
    /// Where this node delivers webhooks; nil: nowhere.
    public let webhooks: WebhookSettings?
    /// Called with the name of each step a long process (an account's deletion) passed, once it is
    /// durable: where a crash test kills the process.
    public let checkpoint: @Sendable (String) -> Void

    /// - Parameter clock: the time of the default committer's commit interval (the node's).
    public init(
        store: any ChatStore, committer: GroupCommitter? = nil, limits: ChatLimits = ChatLimits(), delivery: DeliveryTimings = DeliveryTimings(),
        pushes: PushSettings? = nil, webhooks: WebhookSettings? = nil, checkpoint: @escaping @Sendable (String) -> Void = { _ in },
        clock: any ClusterClock
    ) {
        self.store = store
        self.committer = committer ?? GroupCommitter(store: store, clock: clock)
        self.limits = limits
        self.delivery = delivery
        self.pushes = pushes
        self.webhooks = webhooks
        self.checkpoint = checkpoint
    }

    /// Runs a store operation; a store failure reaches the caller as `unavailable`.
    public func withStore<T>(_ body: (any ChatStore) async throws -> T) async throws -> T {
        do {
            return try await body(store)
        } catch let error as ChatStoreError {
            throw ChatError(.unavailable, "the store is unavailable: \(error.message)")
        }
    }
}

/// The single writer of one conversation: it orders sends, commits them through the node's group
/// commit, and enforces who may do what. A thin shell over ``ConversationState``.
///
/// The seq is assigned inside the commit transaction, under the owner's epoch: an owner that lost
/// the conversation to another node (its epoch is stale) cannot append; it deactivates and answers
/// `not_owner`, and the caller retries on the real owner.
public distributed actor ConversationActor {
    public typealias ActorSystem = ClusterSystem

    /// The actor kind on the ring.
    public static let kind = "conversation"

    /// Nil until the conversation exists in the store (an ID activated before ``create(_:)``).
    var loaded: ConversationState?
    /// Creations under way: an empty actor is not let go while one is.
    private var creating = 0
    var epoch: Int64
    /// The seqs of the recent messages that went out again as this owner activated, until a
    /// retry of one's send or ``takenOver()`` would publish it once more.
    private var republishedAtActivation: Set<Int64> = []
    let services: ChatServices
    private let directory: GatewayDirectory
    private let courier: GatewayCourier
    var logger: Logger
    /// Events to the gateways of the members' streams; set once the conversation exists.
    var fanOut: ConversationFanOut?
    /// Events to webhook endpoints; set once the conversation exists, when the node has endpoints.
    var webhooks: ConversationWebhooks?
    /// The blocks between members, as the store had them at activation or when a member's actor
    /// last said they changed (``blocksChanged()``, before its block or unblock answers).
    private var blocks: Set<Block>
    /// Whether a change to a message is being committed, and the changes waiting for their turn:
    /// changes are numbered one by one (``MessageChange/changeSeq``), so one commits at a time.
    var changing = false
    var changeWaiters: [CheckedContinuation<Void, Never>] = []

    public static func id(_ conversation: ConversationID) -> ClusterActorID {
        ClusterActorID(kind: kind, key: conversation.rawValue)
    }

    public static func resolve(_ conversation: ConversationID, using system: ClusterSystem) throws -> ConversationActor {
        try resolve(id: id(conversation), using: system)
    }

    /// The one ID of the direct conversation between two users, whoever creates it: creating it
    /// twice reaches the same actor, which returns the existing conversation.
    public static func directID(_ a: UserID, _ b: UserID) -> ConversationID {
        let (first, second) = a < b ? (a, b) : (b, a)
        return ConversationID(rawValue: "d_\(first.rawValue)_\(second.rawValue)")
    }

    /// Makes `system` activate conversations from the store on their owner's first call.
    public static func register(on system: ClusterSystem, services: ChatServices) {
        let directory = GatewayDirectory(system: system)
        let courier = GatewayCourier(system: system)
        system.register(kind: kind) { id, system in
            try await activate(id, system: system, services: services, directory: directory, courier: courier)
        }
        registerDirectTargets(on: system)
        ConversationRecovery.register(on: system, store: services.store, window: services.delivery.recoveryWindow, webhooks: services.webhooks != nil)
    }

    /// ``send(_:)``'s name on the cluster (its distributed thunk's mangled name; a test checks it
    /// against a real call).
    public static let sendTarget = "$s10ParleyChat17ConversationActorC4sendyAA10SendResultVAA0F7MessageVYaKFTE"

    /// Sends, on every message's path, run without the runtime's lookup of the method
    /// (``ClusterSystem/DirectTarget``).
    public static func registerDirectTargets(on system: ClusterSystem) {
        system.registerDirect(sendTarget, of: ConversationActor.self) { actor, request in try await actor.send(request) }
    }

    /// Loads the conversation and takes ownership of it (a new epoch fences off any earlier owner).
    /// An ID not in the store activates empty, waiting for ``create(_:)``.
    static func activate(
        _ id: ClusterActorID, system: ClusterSystem, services: ChatServices, directory: GatewayDirectory, courier: GatewayCourier
    ) async throws -> ConversationActor {
        let conversation = ConversationID(rawValue: id.key)
        do {
            // An ID that names nothing is read, never written: taking ownership is a write (on
            // SQLite, the one write transaction of every process).
            guard try await services.store.conversation(conversation) != nil else { throw ChatStoreError(.notFound, "no conversation \(conversation)") }
            let (record, epoch) = try await takeOwnership(of: conversation, store: services.store)
            let cursors = services.webhooks == nil ? [] : try await services.store.webhookCursors(in: conversation)
            let windowStart = system.clock.wallNow.addingTimeInterval(-services.delivery.recoveryWindow.seconds)
            let recent = try await recentMessages(of: record, since: windowStart, store: services.store)
            let erased = try await services.store.erasures(in: conversation, since: windowStart, limit: Self.republishErasuresMax)
            let changes = try await services.store.recentChanges(in: conversation, since: windowStart)
            let messageChanges = try await services.store.messageChanges(in: conversation, since: windowStart, limit: Self.republishErasuresMax)
            let blocks = try await services.store.blocks(among: record.members.map(\.userId))
            return ConversationActor(
                id: conversation, record: record, epoch: epoch, webhookCursors: cursors, recent: recent, recentErasures: erased, recentChanges: changes,
                recentMessageChanges: messageChanges, blocks: blocks, services: services, directory: directory, courier: courier, actorSystem: system)
        } catch let error as ChatStoreError where error.kind == .notFound {
            return ConversationActor(id: conversation, record: nil, epoch: 0, services: services, directory: directory, courier: courier, actorSystem: system)
        } catch let error as ChatStoreError {
            throw ChatError(.unavailable, "cannot load conversation: \(error)")
        }
    }

    /// A new epoch, then the record as of that epoch: nothing older can be written from now on.
    private static func takeOwnership(of conversation: ConversationID, store: any ChatStore) async throws -> (ConversationRecord, Int64) {
        let epoch = try await store.acquireOwnership(of: conversation)
        guard let record = try await store.conversation(conversation) else {
            throw ChatStoreError(.notFound, "conversation \(conversation) vanished")
        }
        return (record, epoch)
    }

    /// - Parameter recent: the conversation's messages committed within the recovery window, which
    ///   its earlier owner may not have handed on: they go out again before anything this owner
    ///   commits, so that no stream is written a new seq before the ones it missed (a stream that
    ///   knows nothing of the conversation yet could not tell them missing: cluster simulation
    ///   seed 3621). Streams drop a seq they already wrote.
    /// - Parameter recentErasures: the erasures committed within the window, `recentChanges` the
    ///   changes of name and members, and `recentMessageChanges` the changes to messages: they go
    ///   out again after those messages for the same reason (a client applies any of them twice
    ///   harmlessly, and streams drop a change they wrote already).
    init(
        id conversation: ConversationID, record: ConversationRecord?, epoch: Int64, webhookCursors: [WebhookCursorRecord] = [],
        recent: [Message] = [], recentErasures: [Erasure] = [], recentChanges: [RecentChange] = [], recentMessageChanges: [MessageChange] = [],
        blocks: Set<Block> = [], services: ChatServices, directory: GatewayDirectory, courier: GatewayCourier,
        actorSystem: ClusterSystem
    ) {
        self.actorSystem = actorSystem
        self.blocks = blocks
        self.directory = directory
        self.courier = courier
        self.loaded = record.map { ConversationState(record: $0) }
        self.epoch = epoch
        self.services = services
        var logger = actorSystem.logger
        logger[metadataKey: "conversation.id"] = "\(conversation)"
        // An owner fenced off keeps delivering what it had until it is gone: its epoch tells its
        // lines from its successor's.
        logger[metadataKey: "conversation.epoch"] = "\(epoch)"
        self.logger = logger
        if let record {
            logger.debug("conversation activated", metadata: ["last.seq": "\(record.lastSeq)"])
            self.fanOut = Self.fanOut(
                for: record, epoch: epoch, directory: directory, courier: courier, services: services, system: actorSystem, logger: logger)
            self.webhooks = Self.webhooks(for: record, epoch: epoch, cursors: webhookCursors, services: services, system: actorSystem, logger: logger)
            let members = record.members.map(\.userId)
            for message in recent {
                fanOut?.republish(message, members: members, pushTo: Self.pushRecipients(of: message, in: record, blocks: blocks, services: services))
            }
            Self.publishAgain(recentErasures, recentChanges, recentMessageChanges, of: record, through: fanOut)
            republishedAtActivation = Set(recent.map(\.seq))
        }
    }

    deinit {
        webhooks?.stop()
    }

    private static func webhooks(
        for record: ConversationRecord, epoch: Int64, cursors: [WebhookCursorRecord], services: ChatServices, system: ClusterSystem, logger: Logger
    ) -> ConversationWebhooks? {
        guard let settings = services.webhooks, !settings.endpoints.isEmpty else { return nil }
        let store = services.store
        let conversation = record.id
        return ConversationWebhooks(
            record: record, settings: settings, cursors: cursors, firstSeen: settings.firstSeen, clock: system.clock, logger: logger,
            load: { after, limit in try await store.messages(in: conversation, after: after, limit: limit) },
            loadChanges: { after, limit in try await store.messageChanges(in: conversation, after: after, limit: limit) },
            save: { cursor in
                do {
                    try await store.saveWebhookCursor(cursor, in: conversation, epoch: epoch)
                    return .saved
                } catch let error as ChatStoreError where error.kind == .staleEpoch || error.kind == .notFound {
                    return .fenced
                } catch {
                    logger.info("a webhook cursor was not stored; trying again", metadata: ["error": "\(error)"])
                    return .failed
                }
            })
    }

    private static func fanOut(
        for record: ConversationRecord, epoch: Int64, directory: GatewayDirectory, courier: GatewayCourier, services: ChatServices,
        system: ClusterSystem, logger: Logger
    ) -> ConversationFanOut {
        let store = services.store
        let conversation = record.id
        let pushes = services.pushes.map { settings in
            ConversationPushes(record: record, policy: settings.policy, clock: system.clock, logger: logger, persist: { first in
                do {
                    try await store.setPushesOwed(from: first, in: conversation, epoch: epoch)
                    return true
                } catch {
                    logger.info("the push notifications owed were not stored; trying again", metadata: ["error": "\(error)"])
                    return false
                }
            }) { member, notice in
                do {
                    return try await UserActor.resolve(member, using: system).notify(notice)
                } catch {
                    logger.info("a member's actor did not take a push notice; trying again", metadata: ["user.id": "\(member)", "error": "\(error)"])
                    return nil
                }
            }
        }
        return ConversationFanOut(
            directory: directory, courier: courier, lastSeq: record.lastSeq, members: record.members.map(\.userId), timings: services.delivery, clock: system.clock, logger: logger, pushes: pushes
        ) { after, limit in
            try await store.messages(in: conversation, after: after, limit: limit)
        }
    }

    var memberIDs: [UserID] { loaded?.record.members.map(\.userId) ?? [] }

    /// Whom a push notification of `message` is owed to, should they hold no stream: the members
    /// other than its sender who did not mute the conversation (or whom it mentions) and did not
    /// block the sender.
    private func pushRecipients(of message: Message) -> [UserID] {
        loaded.map { Self.pushRecipients(of: message, in: $0.record, blocks: blocks, services: services) } ?? []
    }

    private static func pushRecipients(of message: Message, in record: ConversationRecord, blocks: Set<Block>, services: ChatServices) -> [UserID] {
        guard services.pushes != nil else { return [] }
        let sender = message.senderId
        return record.members.map(\.userId).filter {
            $0 != sender && (!record.isMuted(by: $0) || message.mentions?.contains($0) == true) && !blocks.contains(Block(blocker: $0, blocked: sender))
        }
    }

    /// Why `sender` may not write into this direct conversation, or nil: a block either way
    /// between its two members.
    func blockRefusal(of sender: UserID, in record: ConversationRecord) -> ChatError? {
        guard record.kind == .direct, let other = record.members.map(\.userId).first(where: { $0 != sender }) else { return nil }
        if blocks.contains(Block(blocker: other, blocked: sender)) { return ChatError(.forbidden, "this user does not accept your messages") }
        if blocks.contains(Block(blocker: sender, blocked: other)) { return ChatError(.forbidden, "you blocked this user; unblock them to write to them") }
        return nil
    }

    /// A member blocked or unblocked another: the blocks between members are read again. Their
    /// actor calls this on every conversation the two share before the block answers, so that from
    /// then on no send, typing or push crosses it.
    public distributed func blocksChanged() async throws {
        let members = try state.record.members.map(\.userId)
        blocks = try await services.withStore { try await $0.blocks(among: members) }
    }

    /// The conversation, or `not_found` while it does not exist — and then the actor goes at
    /// once unless the conversation is being created: asking about random IDs holds no memory.
    var state: ConversationState {
        get throws(ChatError) {
            guard let loaded else {
                if creating == 0 { actorSystem.passivate(self) }
                throw ChatError(.notFound, "conversation not found")
            }
            return loaded
        }
    }

    /// Changes the loaded state (call only after `state` succeeded).
    func update(_ change: (inout ConversationState) throws(ChatError) -> Void) throws(ChatError) {
        guard var current = loaded else { throw ChatError(.notFound, "conversation not found") }
        try change(&current)
        loaded = current
    }

    // MARK: Creation

    /// Creates this conversation (the actor's ID is the conversation's ID). The creator is always a
    /// member, and the owner of a group. Exactly one other member and no name make a direct
    /// conversation, whose ID must be ``directID(_:_:)``; creating it again returns the existing
    /// one with `created: false`.
    public distributed func create(_ request: CreateConversation) async throws -> CreateResult {
        if let loaded {
            guard loaded.record.member(request.creatorId) != nil else { throw ChatError(.conflict, "conversation exists") }
            return CreateResult(conversation: loaded.record, created: false)
        }
        let record = try request.record(id: ConversationID(rawValue: id.key), limits: services.limits, now: actorSystem.clock.wallNow)
        creating += 1
        defer { creating -= 1 }
        try await requireUsersExist(record.members.map(\.userId))
        let blocks = try await services.withStore { try await $0.blocks(among: record.members.map(\.userId)) }
        if loaded == nil {
            self.blocks = blocks
            // A direct conversation is not started across a block (one that exists stays, above).
            if let refusal = blockRefusal(of: request.creatorId, in: record) { throw refusal }
        }
        var created = true
        do {
            try await services.store.createConversation(record)
        } catch let error as ChatStoreError where error.kind == .conflict {
            created = false  // made meanwhile through another activation: load it
        } catch let error as ChatStoreError {
            throw ChatError(.unavailable, "the store is unavailable: \(error.message)")
        }
        do {
            let (stored, epoch) = try await Self.takeOwnership(of: record.id, store: services.store)
            // Two creates may interleave here (the actor is re-entrant): keep the newest epoch.
            let cursors = services.webhooks == nil || created ? [] : try await services.store.webhookCursors(in: record.id)
            if epoch > self.epoch {
                self.loaded = ConversationState(record: stored)
                self.epoch = epoch
                logger[metadataKey: "conversation.epoch"] = "\(epoch)"
                fanOut = Self.fanOut(
                    for: stored, epoch: epoch, directory: directory, courier: courier, services: services, system: actorSystem, logger: logger)
                webhooks?.stop()
                webhooks = Self.webhooks(for: stored, epoch: epoch, cursors: cursors, services: services, system: actorSystem, logger: logger)
            }
            if created {
                fanOut?.publish(.conversation(ConversationChange(conversation: stored, change: .created, at: stored.createdAt)), members: stored.members.map(\.userId))
            }
            logger.info("conversation created", metadata: ["conversation.kind": "\(stored.kind.rawValue)", "members.count": "\(stored.members.count)"])
            return CreateResult(conversation: stored, created: created)
        } catch let error as ChatStoreError {
            throw ChatError(.unavailable, "the store is unavailable: \(error.message)")
        }
    }

    // MARK: Messages

    /// Appends a message, or returns the one its `clientMessageId` made before. Returns only once
    /// the message is durable.
    public distributed func send(_ request: SendMessage) async throws -> SendResult {
        try request.validate(limits: services.limits)
        // A reply's quote is read and committed with no change to the message between: an edit
        // committed after the read would not find the reply to requote.
        guard request.replyTo == nil else { return try await oneChangeAtATime { try await commitSend(request) } }
        return try await commitSend(request)
    }

    private func commitSend(_ request: SendMessage) async throws -> SendResult {
        let current = try state
        _ = try current.requireMember(request.senderId)
        if let refusal = blockRefusal(of: request.senderId, in: current.record) {
            // A retry of a send that committed before the block still gets its message.
            let cmid = request.clientMessageId.lowercased()
            if let earlier = try await services.withStore({ try await $0.message(in: current.id, clientMessageId: cmid) }), earlier.senderId == request.senderId {
                return SendResult(message: earlier, created: false)
            }
            throw refusal
        }
        let mentions = try request.mentions(among: current.record)
        var quote: MessageQuote?
        if let replyTo = request.replyTo {
            let original: Message
            do {
                original = try await storedMessage(replyTo)
            } catch let error as ChatError where error.code == .notFound {
                throw ChatError(.invalidRequest, "replyTo: no message \(replyTo) in this conversation")
            }
            guard !original.isTombstone else { throw ChatError(.invalidRequest, "replyTo: message \(replyTo) was deleted") }
            quote = MessageQuote(of: original)
        }
        // Server time, never behind the previous message: clients order by it.
        let sentAt = max(actorSystem.clock.wallNow, current.record.lastActivityAt)
        let append = AppendRequest(
            conversationId: current.id, epoch: epoch, senderId: request.senderId,
            clientMessageId: request.clientMessageId.lowercased(), text: request.text, sentAt: sentAt,
            attachments: request.attachments.isEmpty ? nil : request.attachments, replyTo: quote, mentions: mentions, metadata: request.metadata)
        let outcome: AppendOutcome
        do {
            outcome = try await services.committer.append(append)
        } catch {
            // The message may have committed all the same.
            fanOut?.appendUncertain()
            throw ChatError(.unavailable, "the store is unavailable: \(error.message)")
        }
        switch outcome {
        case .appended(let message):
            try update { $0.committed(message) }
            fanOut?.committed(message, members: memberIDs, pushTo: pushRecipients(of: message))
            if let webhooks, let record = loaded?.record { webhooks.record(.message(message), record: record) }
            return SendResult(message: message, created: true)
        case .duplicate(let message):
            // A retry of a send that committed earlier — perhaps on an owner that died (or was cut
            // off) before it fanned the message out, and nothing would push it to the streams
            // until this conversation's next message. Publishing it again is harmless: streams
            // drop a seq they already sent. This owner's activation may have published it again.
            if republishedAtActivation.remove(message.seq) == nil {
                fanOut?.republish(message, members: memberIDs, pushTo: pushRecipients(of: message))
            }
            return SendResult(message: message, created: false)
        case .staleEpoch(let current):
            throw fenced(current: current)
        case .unknownConversation:
            throw ChatError(.notFound, "conversation not found")
        }
    }

    /// At most this many of the latest messages go out again in ``republishRecent(since:)``.
    static let republishMax = 100

    /// At most this many of the latest erasures (and as many changes to messages) go out again:
    /// an account's erasure commits 200 a transaction, and its owner may die with several
    /// transactions' worth not handed on.
    static let republishErasuresMax = 10_000

    /// Publishes this conversation's messages committed after `since` again (at most the last
    /// ``republishMax``), then its erasures, changes to messages and changes of name and members since: its previous owner left the ring and may have died between committing
    /// them and handing them to the gateways (``ConversationRecovery``). Streams drop a seq they
    /// already sent. Returns how many went out.
    public distributed func republishRecent(since: Date) async throws -> Int {
        guard let current = loaded else { return 0 }
        let conversation = current.id
        let recent = try await services.withStore { try await Self.recentMessages(of: current.record, since: since, store: $0) }
        let erased = try await services.withStore { try await $0.erasures(in: conversation, since: since, limit: Self.republishErasuresMax) }
        let changes = try await services.withStore { try await $0.recentChanges(in: conversation, since: since) }
        let messageChanges = try await services.withStore { try await $0.messageChanges(in: conversation, since: since, limit: Self.republishErasuresMax) }
        for message in recent { fanOut?.republish(message, members: memberIDs, pushTo: pushRecipients(of: message)) }
        if let record = loaded?.record { Self.publishAgain(erased, changes, messageChanges, of: record, through: fanOut) }
        return recent.count
    }

    /// Hands the gateways again what an owner that died may have committed without handing on:
    /// erasures, changes to messages, then changes of name and members (a member removed hears of
    /// it too, unless they are back).
    private static func publishAgain(
        _ erasures: [Erasure], _ changes: [RecentChange], _ messageChanges: [MessageChange], of record: ConversationRecord, through fanOut: ConversationFanOut?
    ) {
        let members = record.members.map(\.userId)
        for erasure in erasures { fanOut?.publish(.erasure(erasure), members: members) }
        for change in messageChanges { fanOut?.publish(change, members: members) }
        for change in changes {
            let event = ChatEvent.conversation(ConversationChange(conversation: record, change: change.change, at: change.at))
            if let removed = change.removed {
                if record.member(removed) == nil { fanOut?.publish(event, members: members + [removed]) }
            } else {
                fanOut?.publish(event, members: members)
            }
        }
    }

    /// This node took the conversation over (``ConversationRecovery``): activating it published
    /// its recent messages again, before anything this owner commits. Returns how many (none if
    /// it was active here already).
    public distributed func takenOver() -> Int {
        defer { republishedAtActivation = [] }
        return republishedAtActivation.count
    }

    /// `record`'s messages committed after `since`, at most the last ``republishMax``.
    private static func recentMessages(of record: ConversationRecord, since: Date, store: any ChatStore) async throws -> [Message] {
        guard record.lastSeq > 0 else { return [] }
        let from = max(0, record.lastSeq - Int64(Self.republishMax))
        return try await store.messages(in: record.id, after: from, limit: Self.republishMax).filter { $0.sentAt > since }
    }

    /// Owes again the push notifications a departed owner owed from `seq` on, when it last said
    /// so (``ConversationRecovery``): its latest messages from there (at most ``republishMax``)
    /// are decided anew, for whoever has not read them and holds no stream. Returns how many.
    public distributed func resumePushes(from seq: Int64) async throws -> Int {
        guard let current = loaded, let pushes = fanOut?.pushes else { return 0 }
        let conversation = current.id
        let owed = try await services.withStore { try await $0.messages(in: conversation, before: current.record.lastSeq + 1, limit: Self.republishMax) }
            .filter { $0.seq >= seq }
        pushes.owedByAnEarlierOwner(from: seq)
        for message in owed { fanOut?.owedAgain(message, pushTo: pushRecipients(of: message)) }
        if owed.isEmpty { pushes.syncOwed() }
        return owed.count
    }

    /// Brings this conversation's webhooks up to date after its previous owner left the ring
    /// (``ConversationRecovery``): activating it starts them from the cursors it left. Returns
    /// how many endpoints are owed something.
    public distributed func resumeWebhooks() -> Int {
        webhooks?.pendingCount ?? 0
    }

    /// Tells webhook `endpoint` this conversation's messages again from `seq` on (an operator's
    /// replay). False when the node has no such endpoint.
    public distributed func replayWebhooks(to endpoint: String, from seq: Int64) throws -> Bool {
        _ = try state
        guard seq >= 1 else { throw ChatError(.invalidRequest, "fromSeq must be at least 1") }
        return webhooks?.replay(endpoint, from: seq) ?? false
    }

    /// What a report of `user` by `reporter` names here: message `seq` (as history has it, with
    /// its annotations), which must be `user`'s; without a seq, `user` must be a member. The
    /// reporter must be a member (else `not_found`, as for anyone outside).
    public distributed func reported(seq: Int64?, of user: UserID, by reporter: UserID) async throws -> Message? {
        let current = try state
        _ = try current.requireMember(reporter)
        guard let seq else {
            guard current.record.member(user) != nil else { throw ChatError(.invalidRequest, "userId is not a member of this conversation") }
            return nil
        }
        guard seq >= 1, seq <= current.record.lastSeq,
            let message = try await history(for: reporter, after: seq - 1, before: nil, limit: 1).first, message.seq == seq
        else { throw ChatError(.notFound, "no message \(seq)") }
        guard message.senderId == user else { throw ChatError(.invalidRequest, "userId did not send message \(seq)") }
        return message
    }

    /// Messages after `seq` (ascending), for a member.
    public distributed func messages(for user: UserID, after seq: Int64, limit: Int) async throws -> [Message] {
        let conversation = try state.id
        _ = try state.requireMember(user)
        let limit = try checkedLimit(limit)
        return try await services.withStore { try await $0.messages(in: conversation, after: seq, limit: limit) }
    }

    /// The last `limit` messages before `seq` (ascending), for a member.
    public distributed func messages(for user: UserID, before seq: Int64, limit: Int) async throws -> [Message] {
        let conversation = try state.id
        _ = try state.requireMember(user)
        let limit = try checkedLimit(limit)
        return try await services.withStore { try await $0.messages(in: conversation, before: seq, limit: limit) }
    }

    /// A page of history with what bots added to its messages (``Message/annotations``), and
    /// their reactions as `user` sees them.
    public distributed func history(for user: UserID, after: Int64?, before: Int64?, limit: Int) async throws -> [Message] {
        let conversation = try state.id
        var messages: [Message]
        if let before {
            messages = try await self.messages(for: user, before: before, limit: limit)
        } else {
            messages = try await self.messages(for: user, after: after ?? 0, limit: limit)
        }
        messages = try await withReactions(of: messages, as: user)
        guard let first = messages.first?.seq, let last = messages.last?.seq else { return messages }
        let annotations = try await services.withStore { try await $0.annotations(in: conversation, seqs: first...last) }
        guard !annotations.isEmpty else { return messages }
        let bySeq = Dictionary(grouping: annotations, by: \.seq)
        for index in messages.indices {
            guard let notes = bySeq[messages[index].seq] else { continue }
            messages[index].annotations = Dictionary(notes.map { ($0.key, $0.value) }, uniquingKeysWith: { _, latest in latest })
        }
        return messages
    }

    /// `PUT /v1/conversations/{id}/messages/{seq}/annotations/{key}`: a bot that is a member adds
    /// (or replaces) its note `key` on message `seq`; every member's stream hears of it.
    public distributed func annotate(seq: Int64, key: String, value: String, by user: UserID) async throws -> Annotation {
        let current = try state
        _ = try current.requireMember(user)
        guard Annotation.isValidKey(key) else { throw ChatError(.invalidRequest, "key must be 1–64 characters of a-z 0-9 . _ -, starting with a letter or digit") }
        let scalars = value.unicodeScalars.count
        guard (1...services.limits.annotationScalarsMax).contains(scalars) else {
            throw ChatError(.invalidRequest, "value must be 1–\(services.limits.annotationScalarsMax) characters")
        }
        try StoredText.require(value, field: "value")
        guard seq >= 1, seq <= current.record.lastSeq else { throw ChatError(.notFound, "no message \(seq) in this conversation") }
        let author = try await services.withStore { try await $0.user(id: user) }
        guard author?.user.bot == true else { throw ChatError(.forbidden, "only bots annotate messages (POST /v1/bots)") }
        let annotation = Annotation(conversationId: current.id, seq: seq, key: key, value: value, authorId: user, at: actorSystem.clock.wallNow)
        try await fencedWrite { try await $0.annotate(annotation, epoch: epoch) }
        fanOut?.publish(.annotation(annotation), members: memberIDs)
        return annotation
    }

    /// The conversation as a member sees it.
    public distributed func snapshot(for user: UserID) throws -> ConversationRecord {
        _ = try state.requireMember(user)
        return try state.record
    }

    // MARK: Receipts and typing

    /// Moves `user`'s watermarks forward; returns them as stored.
    public distributed func markReceipts(for user: UserID, deliveredSeq: Int64?, readSeq: Int64?) async throws -> ConversationMember {
        let (delivered, read) = try state.validateReceipt(from: user, deliveredSeq: deliveredSeq, readSeq: readSeq)
        let current = try state
        let conversation = current.id
        let at = actorSystem.clock.wallNow.millisecondPrecision
        let stored = try await services.withStore { try await $0.advanceReceipts(in: conversation, user: user, deliveredSeq: delivered, readSeq: read, at: at) }
        guard let stored else { throw ChatError(.notFound, "conversation not found") }
        var advanced = false
        try update { advanced = $0.receiptsAdvanced(stored) }
        fanOut?.pushes?.read(user, through: stored.readSeq)
        if advanced, let webhooks, let record = loaded?.record {
            let before = current.record.member(user)
            let receipt = ReceiptEvent(conversationId: conversation, userId: user, deliveredSeq: stored.deliveredSeq, readSeq: stored.readSeq, at: at)
            webhooks.record(.receipt(receipt, read: stored.readSeq > (before?.readSeq ?? 0)), record: record)
        }
        if advanced {
            fanOut?.publish(
                .receipt(ReceiptEvent(conversationId: conversation, userId: user, deliveredSeq: stored.deliveredSeq, readSeq: stored.readSeq, at: at)),
                members: memberIDs)
        }
        return stored
    }

    /// `user` starts or stops typing; true when that changed what others see.
    public distributed func setTyping(for user: UserID, _ isTyping: Bool) throws -> Bool {
        var changed = false
        try update { state throws(ChatError) in
            _ = state.expireTyping(now: actorSystem.clock.now)
            changed = try state.setTyping(user, isTyping, now: actorSystem.clock.now)
        }
        if changed, let record = loaded?.record {
            // Typing is for the others only, and not for those who blocked the typist; in a
            // direct conversation a block either way hides it.
            let hidden = record.kind == .direct && blockRefusal(of: user, in: record) != nil
            let members = hidden ? [] : memberIDs.filter { !blocks.contains(Block(blocker: $0, blocked: user)) }
            fanOut?.publish(.typing(TypingEvent(conversationId: record.id, userId: user, typing: isTyping)), members: members, except: user)
        }
        return changed
    }

    // MARK: Members

    public distributed func addMembers(_ users: [UserID], by user: UserID) async throws -> ConversationRecord {
        let added = try state.validateAdd(users, by: user, groupSizeMax: services.limits.groupSizeMax)
        guard !added.isEmpty else { return try state.record }
        try await requireUsersExist(added.map(\.userId))
        let conversation = try state.id
        // Blocks between the new members and the others count from the moment they are in.
        let everyone = memberIDs + added.map(\.userId)
        let blocksAfter = try await services.withStore { try await $0.blocks(among: everyone) }
        let at = actorSystem.clock.wallNow.millisecondPrecision
        try await fencedWrite { try await $0.addMembers(added, to: conversation, epoch: epoch, at: at) }
        try update { $0.membersAdded(added) }
        // A union: a block that changed while the store was read errs on the side of blocking.
        blocks.formUnion(blocksAfter)
        let record = try state.record
        webhooks?.record(.membersAdded(added.map(\.userId), record, at: at), record: record)
        fanOut?.publish(.conversation(ConversationChange(conversation: record, change: .memberAdded, at: at)), members: memberIDs)
        return record
    }

    public distributed func removeMember(_ member: UserID, by user: UserID) async throws {
        try state.validateRemove(member, by: user)
        try await removed(member)
    }

    /// `user` deleted their account (``UserActor/deleteAccount(erase:)``): they leave, from a
    /// direct conversation too, as a member who leaves a group does — with `erase`, after each of
    /// their messages became a tombstone. Asked again once they left (a deletion run again after
    /// a crash), it hands on again what the members may not have heard: the departure and the
    /// tombstones.
    public distributed func accountDeleted(_ user: UserID, erase: Bool) async throws {
        let wasMember = try state.record.member(user) != nil
        if erase { try await eraseAll(of: user) }
        if wasMember {
            try await removed(user)
        } else {
            let record = try state.record
            let at = actorSystem.clock.wallNow.millisecondPrecision
            fanOut?.publish(.conversation(ConversationChange(conversation: record, change: .memberRemoved, at: at)), members: memberIDs)
        }
    }

    /// Erases every message of `user` here, a page at a time, each its own store transaction
    /// (sends go on in between), and releases the uploads they carried.
    private func eraseAll(of user: UserID) async throws {
        let conversation = try state.id
        var after: Int64 = 0
        var uploads: Set<MediaID> = []
        while after < (try state.record.lastSeq) {
            let page = try await services.withStore { try await $0.messages(in: conversation, after: after, limit: Self.erasureBatch) }
            guard let last = page.last else { break }
            let theirs = page.filter { $0.senderId == user && !$0.isTombstone }.map(\.seq)
            if !theirs.isEmpty {
                for original in try await self.erase(theirs) { uploads.formUnion(original.attachments?.map(\.media.id) ?? []) }
            }
            // Erased already: by this deletion, run again because an owner died between an
            // erasure's commit and its fan-out (too long ago for a new owner to hand it on), or
            // by an operator. Handed on again; a client applies a tombstone twice harmlessly.
            let now = actorSystem.clock.wallNow
            for message in page where message.senderId == user && message.erased == true {
                fanOut?.publish(.erasure(Erasure(message: message, at: now)), members: memberIDs)
            }
            after = last.seq
        }
        // Only they could attach their uploads, and every message of theirs is erased (or will
        // be, in the conversations their deletion has yet to reach).
        let released = Array(uploads)
        try await services.withStore { try await $0.releaseMedia(released) }
    }

    /// Messages one step of an erasure reads and erases: one store transaction each.
    static let erasureBatch = 200

    /// `DELETE /v1/admin/conversations/{id}/messages/{seq}`: an operator erases a message through
    /// this conversation's order. Its attachments go too, unless another message not erased
    /// carries them. Erasing it again changes nothing. Returns its tombstone.
    public distributed func moderatorErase(seq: Int64) async throws -> Message {
        let current = try state
        guard seq >= 1, seq <= current.record.lastSeq else { throw ChatError(.notFound, "no message \(seq) in this conversation") }
        let released = try await releaseUploads(of: try await erase([seq]))
        logger.notice("an operator erased a message", metadata: ["message.seq": "\(seq)", "media.released": "\(released)"])
        let conversation = current.id
        guard let tombstone = try await services.withStore({ try await $0.messages(in: conversation, after: seq - 1, limit: 1) }).first else {
            throw ChatError(.notFound, "no message \(seq) in this conversation")
        }
        return tombstone
    }

    /// Releases the uploads `removed` (messages as they were before they became tombstones)
    /// carried that no other message still carries; returns how many.
    func releaseUploads(of removed: [Message]) async throws -> Int {
        var released: [MediaID] = []
        for media in Set(removed.flatMap({ $0.attachments ?? [] }).map(\.media.id)) where try await !carriedByAnotherMessage(media) {
            released.append(media)
        }
        let kept = released
        try await services.withStore { try await $0.releaseMedia(kept) }
        return kept.count
    }

    /// Whether an upload is attached to a message not erased: of another conversation that
    /// references it, or of this one (read through).
    func carriedByAnotherMessage(_ media: MediaID) async throws -> Bool {
        let conversation = try state.id
        let referencing = try await services.withStore { try await $0.conversationsReferencing(media) }
        guard referencing.allSatisfy({ $0 == conversation }) else { return true }
        var after: Int64 = 0
        while true {
            let page = try await services.withStore { try await $0.messages(in: conversation, after: after, limit: Self.erasureBatch) }
            guard let last = page.last else { return false }
            if page.contains(where: { !$0.isTombstone && $0.attachments?.contains { $0.media.id == media } == true }) { return true }
            after = last.seq
        }
    }

    /// Erases messages `seqs` in one store transaction, under this owner's epoch; members' streams
    /// and webhooks hear of each erased now, after what came before it. Returns the messages as
    /// they were.
    private func erase(_ seqs: [Int64]) async throws -> [Message] {
        let conversation = try state.id
        let at = actorSystem.clock.wallNow.millisecondPrecision
        var originals: [Message] = []
        try await fencedWrite { originals = try await $0.eraseMessages(in: conversation, seqs: seqs, epoch: epoch, at: at) }
        try update { $0.erased(originals.map(\.seq)) }
        services.checkpoint("erasure.batch")
        for original in originals {
            let erasure = Erasure(message: original, at: at)
            if let webhooks, let record = loaded?.record { webhooks.record(.erased(erasure), record: record) }
            fanOut?.pushes?.erased(erasure.message)
            fanOut?.publish(.erasure(erasure), members: memberIDs)
        }
        return originals
    }

    /// Takes `member` out (a group they owned passes to the longest-standing member); every
    /// member hears of it, and so does the member who left — and then nothing more.
    private func removed(_ member: UserID) async throws {
        let conversation = try state.id
        let at = actorSystem.clock.wallNow.millisecondPrecision
        try await fencedWrite { try await $0.removeMember(member, from: conversation, epoch: epoch, at: at) }
        try update { $0.memberRemoved(member) }
        webhooks?.record(.memberRemoved(member, try state.record, at: at), record: try state.record)
        fanOut?.publish(.conversation(ConversationChange(conversation: try state.record, change: .memberRemoved, at: at)), members: memberIDs + [member])
    }

    /// `PATCH /v1/conversations/{id}`: renames a group (any member may), changes the app's
    /// fields (the group's owner, either member of a direct conversation); what is given.
    public distributed func change(name: String?, metadata: Metadata?, by user: UserID) async throws -> ConversationRecord {
        guard name != nil || metadata != nil else { throw ChatError(.invalidRequest, "give a name, metadata or both") }
        if let name { try state.validateRename(name, by: user) }
        if let metadata { try state.validateMetadataChange(metadata, by: user) }
        let conversation = try state.id
        let at = actorSystem.clock.wallNow.millisecondPrecision
        try await fencedWrite { try await $0.updateConversation(conversation, name: name, metadata: metadata, epoch: epoch, at: at) }
        try update { state in
            if let name { state.renamed(name) }
            if let metadata { state.metadataChanged(metadata.orNilWhenEmpty) }
        }
        if let name { fanOut?.pushes?.renamed(name) }
        let record = try state.record
        webhooks?.record(.updated(record, at: at), record: record)
        fanOut?.publish(.conversation(ConversationChange(conversation: record, change: .updated, at: at)), members: memberIDs)
        return record
    }

    /// `PUT /v1/conversations/{id}/photo` (or `DELETE`, nil): the group's owner makes an image
    /// upload of theirs its photo; members hear of it as they hear of a rename.
    public distributed func setPhoto(_ media: MediaID?, by user: UserID) async throws -> ConversationRecord {
        try state.validatePhotoChange(by: user)
        guard try state.record.photo?.id != media else { return try state.record }
        let notYours = ChatError(.invalidRequest, "mediaId: \(media?.rawValue ?? "") is not an image upload of yours")
        if let media {
            guard let stored = try await services.withStore({ try await $0.media(media) }), stored.uploaderId == user, stored.media.isImage else {
                throw notYours
            }
        }
        let conversation = try state.id
        let at = actorSystem.clock.wallNow.millisecondPrecision
        var photo: Media?
        try await fencedWrite { store in
            do {
                photo = try await store.setConversationPhoto(conversation, to: media, epoch: epoch, at: at)
            } catch let error as ChatStoreError where error.kind == .notFound {
                throw notYours  // the sweeper removed it meanwhile (a day old, never attached)
            }
        }
        try update { $0.photoChanged(photo) }
        let record = try state.record
        webhooks?.record(.updated(record, at: at), record: record)
        fanOut?.publish(.conversation(ConversationChange(conversation: record, change: .updated, at: at)), members: memberIDs)
        return record
    }

    /// `PUT /v1/conversations/{id}/settings` with `metadata`: the member's own fields for this
    /// conversation. Their streams hear nothing (no one else sees them); webhooks, which bots
    /// read, are told the conversation changed.
    public distributed func setMemberMetadata(_ metadata: Metadata, by user: UserID) async throws -> ConversationRecord {
        _ = try state.requireMember(user)
        try metadata.validate(field: "metadata")
        let conversation = try state.id
        let stored = metadata.orNilWhenEmpty
        guard try state.record.member(user)?.metadata != stored else { return try state.record }
        var member = true
        try await fencedWrite { member = try await $0.setMemberMetadata(stored, for: user, in: conversation, epoch: epoch) }
        guard member else { throw ChatError(.notFound, "conversation not found") }
        try update { $0.memberMetadataChanged(stored, for: user) }
        let record = try state.record
        webhooks?.record(.updated(record, at: actorSystem.clock.wallNow.millisecondPrecision), record: record)
        return record
    }

    /// `PUT /v1/conversations/{id}/settings`: `user` mutes the conversation (no push notifications
    /// for its messages) or unmutes it. Only that member's own view changes, so nobody hears of it.
    public distributed func setMuted(_ muted: Bool, by user: UserID) async throws -> ConversationRecord {
        _ = try state.requireMember(user)
        let conversation = try state.id
        guard try state.record.isMuted(by: user) != muted else { return try state.record }
        var member = true
        try await fencedWrite { member = try await $0.setMuted(muted, for: user, in: conversation, epoch: epoch) }
        guard member else { throw ChatError(.notFound, "conversation not found") }
        try update { $0.setMuted(muted, by: user) }
        return try state.record
    }

    /// Unknown member IDs are refused by name (API.md: `400` naming them).
    private func requireUsersExist(_ users: [UserID]) async throws {
        let known = try await services.withStore { try await $0.existingUsers(users) }
        let unknown = users.filter { !known.contains($0) }
        guard unknown.isEmpty else {
            throw ChatError(.invalidRequest, "unknown memberIds: \(unknown.map(\.rawValue).joined(separator: ", "))")
        }
    }

    // MARK: Helpers

    func checkedLimit(_ limit: Int) throws(ChatError) -> Int {
        guard (1...services.limits.historyLimitMax).contains(limit) else {
            throw ChatError(.invalidRequest, "limit must be 1–\(services.limits.historyLimitMax)")
        }
        return limit
    }


    func fencedWrite(_ body: (any ChatStore) async throws -> Void) async throws {
        do {
            try await body(services.store)
        } catch let error as ChatStoreError where error.kind == .staleEpoch {
            throw fenced(current: nil)
        } catch let error as ChatStoreError {
            throw ChatError(.unavailable, "the store is unavailable: \(error.message)")
        }
    }

    /// Another node took the conversation: let go of it, and send the caller to the owner.
    private func fenced(current: Int64?) -> ClusterCallError {
        logger.warning("write fenced off: another node owns this conversation now", metadata: [
            "epoch.current": "\(current.map { "\($0)" } ?? "?")",
        ])
        webhooks?.stop()
        actorSystem.deactivate(id)
        return ClusterCallError(code: .notOwner, message: "\(actorSystem.settings.name) lost ownership of \(id.key) (epoch \(epoch))")
    }
}
