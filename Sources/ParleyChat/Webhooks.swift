import Crypto
import Foundation
import ParleyModel
import ParleyStore

/// What a webhook endpoint can be told of. Endpoints subscribe by type or by family
/// (`conversation.*`, `receipt.*`, `*`).
public enum WebhookEventType: String, CaseIterable, Codable, Sendable, Hashable {
    case messageCreated = "message.created"
    /// A message was erased (its sender's account deleted with `erase=true`, or an operator's removal).
    case messageErased = "message.erased"
    case conversationCreated = "conversation.created"
    case memberAdded = "conversation.member_added"
    case memberRemoved = "conversation.member_removed"
    /// A group was renamed or its photo changed.
    case conversationUpdated = "conversation.updated"
    /// A member's devices received messages (`deliveredSeq` moved).
    case receiptDelivered = "receipt.delivered"
    /// A member read messages (`readSeq` moved; reading implies delivery, and the event carries both).
    case receiptRead = "receipt.read"
    /// A user reported a user or a message (``SafetyDesk``).
    case reportCreated = "report.created"
    /// A user's account was deleted, every conversation left (and their messages erased, if asked).
    case userDeleted = "user.deleted"
    /// A user's display name, `avatarURL` or `avatar` changed (``UserActor``).
    case userUpdated = "user.updated"
    /// A message was edited, deleted for everyone, reacted to, pinned (``MessageChange``).
    case messageEdited = "message.edited"
    case messageDeleted = "message.deleted"
    case reactionAdded = "reaction.added"
    case reactionRemoved = "reaction.removed"
    case messagePinned = "message.pinned"
    case messageUnpinned = "message.unpinned"

    /// The type of a change of `kind`.
    public init(_ kind: MessageChange.Kind) {
        switch kind {
        case .edited: self = .messageEdited
        case .deleted: self = .messageDeleted
        case .reactionAdded: self = .reactionAdded
        case .reactionRemoved: self = .reactionRemoved
        case .pinned: self = .messagePinned
        case .unpinned: self = .messageUnpinned
        }
    }

    /// The types of changes to messages.
    public static let changes: Set<WebhookEventType> = Set(MessageChange.Kind.allCases.map { WebhookEventType($0) })

    /// The types a subscription names: a type, a family (`conversation.*`), or `*`; nil when it
    /// names none.
    public static func matching(_ pattern: String) -> Set<WebhookEventType>? {
        if pattern == "*" { return Set(allCases) }
        if pattern.hasSuffix(".*") {
            let family = pattern.dropLast(1)
            let types = allCases.filter { $0.rawValue.hasPrefix(family) }
            return types.isEmpty ? nil : Set(types)
        }
        return WebhookEventType(rawValue: pattern).map { [$0] }
    }
}

/// Where a node sends the events it owns, and how it signs them.
public struct WebhookEndpoint: Sendable, Hashable {
    /// The endpoint's name: what its cursors are kept under, so it must stay the same across
    /// restarts (changing the URL keeps the place each conversation got to).
    public var name: String
    public var url: String
    /// The HMAC-SHA256 key (the bytes behind `whsec_…`).
    public var secret: [UInt8]
    public var types: Set<WebhookEventType>

    public init(name: String, url: String, secret: [UInt8], types: Set<WebhookEventType>) {
        self.name = name
        self.url = url
        self.secret = secret
        self.types = types
    }

    /// The key of a `whsec_<base64>` secret (Standard Webhooks' form); nil when it is not one or
    /// holds fewer than 24 bytes.
    public static func secretKey(_ text: String) -> [UInt8]? {
        guard text.hasPrefix("whsec_"), let key = Data(base64Encoded: String(text.dropFirst(6))), key.count >= 24, key.count <= 64 else { return nil }
        return Array(key)
    }
}

/// One event as it is posted: the same `id` on every attempt.
public struct WebhookDelivery: Sendable, Hashable {
    public var id: String
    public var type: WebhookEventType
    /// The conversation whose order it comes in; nil for what belongs to none (a report).
    public var conversationId: ConversationID?
    /// The JSON body: `{"type", "timestamp", "data"}`.
    public var body: [UInt8]

    public init(id: String, type: WebhookEventType, conversationId: ConversationID?, body: [UInt8]) {
        self.id = id
        self.type = type
        self.conversationId = conversationId
        self.body = body
    }

    /// Standard Webhooks' signature: `v1,` and the base64 HMAC-SHA256, under `secret`, of
    /// `id.timestamp.body`, the timestamp in whole seconds since 1970 (the `webhook-timestamp`
    /// header), so a receiver can refuse a replay of an old delivery.
    public static func signature(id: String, timestamp: Int64, body: [UInt8], secret: [UInt8]) -> String {
        var message = Array("\(id).\(timestamp).".utf8)
        message += body
        let code = HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: secret))
        return "v1," + Data(code).base64EncodedString()
    }
}

/// What became of one attempt to deliver.
public enum WebhookOutcome: Sendable, Hashable {
    /// The endpoint answered 2xx.
    case delivered
    /// Anything else (another status, no answer in time, no connection): tried again later, no
    /// sooner than `retryAfter` when the endpoint said (`429`/`503` with `Retry-After`).
    case failed(retryAfter: Duration?, reason: String)
}

/// Posts deliveries to endpoints (``ParleyPush``'s HTTP sender; a recording one in tests).
public protocol WebhookSender: Sendable {
    func deliver(_ delivery: WebhookDelivery, to endpoint: WebhookEndpoint) async -> WebhookOutcome
}

/// How a node delivers webhooks: its endpoints (the same on every worker), its sender, and the
/// pace of retries.
public struct WebhookSettings: Sendable {
    public var endpoints: [WebhookEndpoint]
    public var sender: any WebhookSender
    public var policy: WebhookPolicy
    /// When a node first ran with each endpoint (``ChatStore/webhookEndpointFirstSeen(_:at:)``):
    /// conversations created since owe it everything; older ones, what comes after their owner
    /// started with it.
    public var firstSeen: [String: Date]

    public init(endpoints: [WebhookEndpoint], sender: any WebhookSender, policy: WebhookPolicy = WebhookPolicy(), firstSeen: [String: Date] = [:]) {
        self.endpoints = endpoints
        self.sender = sender
        self.policy = policy
        self.firstSeen = firstSeen
    }

    /// These settings with each endpoint's first run as the store has it (recorded now for an
    /// endpoint it has not seen).
    public func recordingFirstSeen(in store: any ChatStore, now: Date) async throws -> WebhookSettings {
        var settings = self
        for endpoint in endpoints {
            settings.firstSeen[endpoint.name] = try await store.webhookEndpointFirstSeen(endpoint.name, at: now)
        }
        return settings
    }
}

/// The pace of deliveries to one endpoint from one conversation.
public struct WebhookPolicy: Sendable, Hashable {
    /// The wait after a failed attempt (at least what the endpoint asked for).
    public var retry = Backoff(first: .seconds(1), max: .seconds(600))
    /// How long one event is retried before it is dropped (and logged): three days, past a
    /// weekend's outage of the receiver.
    public var giveUpAfter: Duration = .seconds(72 * 3600)
    /// How often, at most, a busy conversation stores where its endpoints got to: what a node
    /// that takes it over delivers again.
    public var saveEvery: Duration = .seconds(1)
    /// The most events one conversation holds for an endpoint; past it they are found again in
    /// the store once the endpoint takes them.
    public var queueMax: Int = 1000

    public init() {}
}

/// What a webhook endpoint is told of a conversation (`data.conversation`): everything but what
/// is each member's own (unread count, mute).
public struct WebhookConversation: Codable, Sendable, Hashable {
    public var id: ConversationID
    public var kind: ConversationKind
    public var name: String?
    public var photo: Media?
    public var ownerId: UserID
    public var members: [ConversationMember]
    public var lastSeq: Int64
    public var createdAt: Date

    public init(_ record: ConversationRecord) {
        self.id = record.id
        self.kind = record.kind
        self.name = record.name
        self.photo = record.photo
        self.ownerId = record.ownerId
        self.members = record.members
        self.lastSeq = record.lastSeq
        self.createdAt = record.createdAt
    }
}
