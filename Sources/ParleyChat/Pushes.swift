import Foundation
import ParleyModel

/// What leaves the cluster in a push notification (`parley-node --push-preview`): Apple and Google
/// see every notification's text, and so does anyone who can read the phone's lock screen.
public enum PushPreview: String, Sendable, CaseIterable, Codable {
    /// The conversation's or sender's name and the message's text.
    case full
    /// Names, no text: "New message".
    case sender
    /// Nothing but how many messages are new.
    case none
}

/// A notification for one user's devices, as a provider (APNs, FCM) is to show it.
public struct PushContent: Sendable, Hashable {
    public var title: String?
    public var subtitle: String?
    public var body: String
    /// The user's unread messages in every conversation.
    public var badge: Int
    /// The conversation: notifications of one conversation group together (`thread-id`) and a
    /// later one replaces an earlier (`apns-collapse-id`, FCM's `collapse_key`), so a repeat is harmless.
    public var conversationId: ConversationID
    /// The latest message it tells of.
    public var seq: Int64

    public init(title: String?, subtitle: String?, body: String, badge: Int, conversationId: ConversationID, seq: Int64) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.badge = badge
        self.conversationId = conversationId
        self.seq = seq
    }

    /// At most this many characters of a message's text go into a notification: APNs refuses a
    /// payload over 4 KiB, and a message may hold 4,000 characters of 4 bytes.
    public static let previewCharactersMax = 200

    /// What a member is told of `count` new messages up to `latest`, from `senderName`, in a
    /// conversation of `kind` named `conversationName`; `mentioned`: `latest` mentions them.
    public init(
        latest: Message, count: Int, kind: ConversationKind, conversationName: String?, senderName: String?, badge: Int, preview: PushPreview,
        mentioned: Bool = false
    ) {
        let sender = senderName ?? "Someone"
        let mentioned = mentioned && !latest.isTombstone
        let news = count > 1 ? "\(count) new messages" : "New message"
        // A message of attachments alone is told of by what they are ("Photo"); an erased one
        // tells nothing of what it said.
        let said = latest.erased == true ? "Message erased" : latest.deleted == true ? "Message deleted" : latest.text.isEmpty ? Attachment.summary(of: latest.attachments ?? []) ?? "" : latest.text
        var text = String(said.prefix(Self.previewCharactersMax))
        if text.count < said.count { text += "…" }
        switch preview {
        case .full:
            title = kind == .group ? conversationName ?? sender : sender
            subtitle = mentioned ? "\(sender) mentioned you" : count > 1 ? news : nil
            body = kind == .group ? "\(sender): \(text)" : text
        case .sender:
            title = kind == .group ? conversationName ?? sender : sender
            subtitle = nil
            body = mentioned ? "\(sender) mentioned you" : kind == .group && count == 1 ? "New message from \(sender)" : news
        case .none:
            title = nil
            subtitle = nil
            body = mentioned ? "You were mentioned" : news
        }
        self.badge = badge
        self.conversationId = latest.conversationId
        self.seq = latest.seq
    }
}

/// What became of a notification sent to one device.
public enum PushOutcome: Sendable, Hashable {
    case sent
    /// The provider says the token is no longer valid (APNs `410 Unregistered`, `400
    /// BadDeviceToken`; FCM `UNREGISTERED`): the device is removed.
    case unregistered(String)
    /// Try again later (`429`, a 5xx, no connection), no sooner than `after` when the provider said.
    case retry(after: Duration?, reason: String)
    /// The provider refused this notification for good (a payload it cannot take, a bad topic):
    /// trying again would fail again.
    case refused(String)
}

/// Sends notifications through a push provider (APNs, FCM) to the devices it serves.
public protocol PushProvider: Sendable {
    /// Sends `content` to each of `devices` (all of this provider's platform); one outcome per
    /// device, in order.
    func send(_ content: PushContent, to devices: [Device]) async -> [PushOutcome]
}

/// How a node sends push notifications: its providers, by platform, and what their
/// notifications may say.
public struct PushSettings: Sendable {
    public var providers: [PushPlatform: any PushProvider]
    public var preview: PushPreview
    public var policy: PushPlanner.Policy
    /// The APNs topics (bundle IDs) a device may register with; nil: any (no APNs provider to
    /// check against).
    public var apnsTopics: Set<String>?

    public init(
        providers: [PushPlatform: any PushProvider], preview: PushPreview = .full, policy: PushPlanner.Policy = PushPlanner.Policy(),
        apnsTopics: Set<String>? = nil
    ) {
        self.providers = providers
        self.apnsTopics = apnsTopics
        self.preview = preview
        self.policy = policy
    }
}

/// What a conversation's owner asks a member's actor to notify: the latest message owed, and
/// how many are owed up to it.
public struct PushNotice: Codable, Sendable, Hashable {
    public var kind: ConversationKind
    public var conversationName: String?
    public var latest: Message
    public var count: Int

    public init(kind: ConversationKind, conversationName: String?, latest: Message, count: Int) {
        self.kind = kind
        self.conversationName = conversationName
        self.latest = latest
        self.count = count
    }
}

/// A member's actor's answer to a ``PushNotice``.
public struct PushNoticeResult: Codable, Sendable, Hashable {
    /// Nil when done (sent to every device that takes it, or nothing to send); else when to try
    /// again, at the soonest.
    public var retryAfterMilliseconds: Int64?

    public static let done = PushNoticeResult(retryAfterMilliseconds: nil)

    public init(retryAfterMilliseconds: Int64?) {
        self.retryAfterMilliseconds = retryAfterMilliseconds
    }
}
