import Distributed
import Foundation
import Logging
import ParleyCluster
import ParleyModel
import ParleyStore

/// What the chat actors of a node share: the store, the node's group commit, the limits.
public struct ChatServices: Sendable {
    public let store: any ChatStore
    public let committer: GroupCommitter
    public let limits: ChatLimits

    public init(store: any ChatStore, committer: GroupCommitter? = nil, limits: ChatLimits = ChatLimits()) {
        self.store = store
        self.committer = committer ?? GroupCommitter(store: store)
        self.limits = limits
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

    private var state: ConversationState
    private let epoch: Int64
    private let services: ChatServices
    private var logger: Logger

    public static func id(_ conversation: ConversationID) -> ClusterActorID {
        ClusterActorID(kind: kind, key: conversation.rawValue)
    }

    public static func resolve(_ conversation: ConversationID, using system: ClusterSystem) throws -> ConversationActor {
        try resolve(id: id(conversation), using: system)
    }

    /// Makes `system` activate conversations from the store on their owner's first call.
    public static func register(on system: ClusterSystem, services: ChatServices) {
        system.register(kind: kind) { id, system in
            try await activate(id, system: system, services: services)
        }
    }

    /// Loads the conversation and takes ownership of it (a new epoch fences off any earlier owner).
    static func activate(_ id: ClusterActorID, system: ClusterSystem, services: ChatServices) async throws -> ConversationActor {
        let conversation = ConversationID(rawValue: id.key)
        do {
            guard try await services.store.conversation(conversation) != nil else {
                throw ChatError(.notFound, "conversation not found")
            }
            let epoch = try await services.store.acquireOwnership(of: conversation)
            // Read after taking the epoch: nothing older can be written from now on.
            guard let record = try await services.store.conversation(conversation) else {
                throw ChatError(.notFound, "conversation not found")
            }
            return ConversationActor(record: record, epoch: epoch, services: services, actorSystem: system)
        } catch let error as ChatStoreError {
            throw ChatError(.unavailable, "cannot load conversation: \(error)")
        }
    }

    init(record: ConversationRecord, epoch: Int64, services: ChatServices, actorSystem: ClusterSystem) {
        self.actorSystem = actorSystem
        self.state = ConversationState(record: record)
        self.epoch = epoch
        self.services = services
        var logger = actorSystem.logger
        logger[metadataKey: "conversation.id"] = "\(record.id)"
        self.logger = logger
        logger.debug("conversation activated", metadata: ["epoch": "\(epoch)", "last.seq": "\(record.lastSeq)"])
    }

    // MARK: Messages

    /// Appends a message, or returns the one its `clientMessageId` made before. Returns only once
    /// the message is durable.
    public distributed func send(_ request: SendMessage) async throws -> SendResult {
        try request.validate(limits: services.limits)
        _ = try state.requireMember(request.senderId)
        // Server time, never behind the previous message: clients order by it.
        let sentAt = max(Date(), state.record.lastActivityAt)
        let append = AppendRequest(
            conversationId: state.id, epoch: epoch, senderId: request.senderId,
            clientMessageId: request.clientMessageId.lowercased(), text: request.text, sentAt: sentAt)
        let outcome: AppendOutcome
        do {
            outcome = try await services.committer.append(append)
        } catch {
            throw ChatError(.unavailable, "the store is unavailable: \(error.message)")
        }
        switch outcome {
        case .appended(let message):
            state.committed(message)
            return SendResult(message: message, created: true)
        case .duplicate(let message):
            return SendResult(message: message, created: false)
        case .staleEpoch(let current):
            throw fenced(current: current)
        case .unknownConversation:
            throw ChatError(.notFound, "conversation not found")
        }
    }

    /// Messages after `seq` (ascending), for a member.
    public distributed func messages(for user: UserID, after seq: Int64, limit: Int) async throws -> [Message] {
        _ = try state.requireMember(user)
        return try await load { try await $0.messages(in: state.id, after: seq, limit: try checkedLimit(limit)) }
    }

    /// The last `limit` messages before `seq` (ascending), for a member.
    public distributed func messages(for user: UserID, before seq: Int64, limit: Int) async throws -> [Message] {
        _ = try state.requireMember(user)
        return try await load { try await $0.messages(in: state.id, before: seq, limit: try checkedLimit(limit)) }
    }

    /// The conversation as a member sees it.
    public distributed func snapshot(for user: UserID) throws -> ConversationRecord {
        _ = try state.requireMember(user)
        return state.record
    }

    // MARK: Receipts and typing

    /// Moves `user`'s watermarks forward; returns them as stored.
    public distributed func markReceipts(for user: UserID, deliveredSeq: Int64?, readSeq: Int64?) async throws -> ConversationMember {
        let (delivered, read) = try state.validateReceipt(from: user, deliveredSeq: deliveredSeq, readSeq: readSeq)
        let stored = try await load { try await $0.advanceReceipts(in: state.id, user: user, deliveredSeq: delivered, readSeq: read) }
        guard let stored else { throw ChatError(.notFound, "conversation not found") }
        state.receiptsAdvanced(stored)
        return stored
    }

    /// `user` starts or stops typing; true when that changed what others see.
    public distributed func setTyping(for user: UserID, _ isTyping: Bool) throws -> Bool {
        _ = state.expireTyping(now: .now)
        return try state.setTyping(user, isTyping, now: .now)
    }

    // MARK: Members

    public distributed func addMembers(_ users: [UserID], by user: UserID) async throws -> ConversationRecord {
        let added = try state.validateAdd(users, by: user, groupSizeMax: services.limits.groupSizeMax)
        guard !added.isEmpty else { return state.record }
        try await fencedWrite { try await $0.addMembers(added, to: state.id, epoch: epoch) }
        state.membersAdded(added)
        return state.record
    }

    public distributed func removeMember(_ member: UserID, by user: UserID) async throws {
        try state.validateRemove(member, by: user)
        try await fencedWrite { try await $0.removeMember(member, from: state.id, epoch: epoch) }
        state.memberRemoved(member)
    }

    // MARK: Helpers

    private func checkedLimit(_ limit: Int) throws(ChatError) -> Int {
        guard (1...services.limits.historyLimitMax).contains(limit) else {
            throw ChatError(.invalidRequest, "limit must be 1–\(services.limits.historyLimitMax)")
        }
        return limit
    }

    private func load<T>(_ body: (any ChatStore) async throws -> T) async throws -> T {
        do {
            return try await body(services.store)
        } catch let error as ChatStoreError {
            throw ChatError(.unavailable, "the store is unavailable: \(error.message)")
        }
    }

    private func fencedWrite(_ body: (any ChatStore) async throws -> Void) async throws {
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
            "epoch": "\(epoch)", "epoch.current": "\(current.map { "\($0)" } ?? "?")",
        ])
        actorSystem.deactivate(id)
        return ClusterCallError(code: .notOwner, message: "\(actorSystem.settings.name) lost ownership of \(state.id) (epoch \(epoch))")
    }
}
