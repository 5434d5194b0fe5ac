import Foundation

/// The client API's wire format (API.md), shared by the gateway that serves it and the client
/// library that calls it, so the two cannot disagree on a field.
public enum API {
    /// `conversation` as API.md serves it: for one caller (its `unreadCount`).
    public struct Conversation: Codable, Sendable, Hashable {
        public var id: ConversationID
        public var kind: ConversationKind
        public var name: String?
        /// A group's photo.
        public var photo: Media?
        /// The app's own fields.
        public var metadata: Metadata?
        /// Each with their own `metadata` only for themselves (all of them for a bot).
        public var members: [ConversationMember]
        public var lastSeq: Int64
        public var lastMessage: Message?
        public var unreadCount: Int64
        /// Whether the caller muted it: no push notifications for its messages.
        public var muted: Bool
        /// Its pinned messages' seqs, the most recently pinned first.
        public var pinned: [Int64]
        public var createdAt: Date

        public init(_ record: ConversationRecord, for user: UserID, lastMessage: Message? = nil, bot: Bool = false) {
            self.id = record.id
            self.kind = record.kind
            self.name = record.name
            self.photo = record.photo
            self.metadata = record.metadata
            self.members = bot ? record.members : record.members.map { member in
                var shown = member
                if member.userId != user { shown.metadata = nil }
                return shown
            }
            self.lastSeq = record.lastSeq
            self.lastMessage = lastMessage
            self.unreadCount = max(0, record.lastSeq - (record.member(user)?.readSeq ?? record.lastSeq))
            self.muted = record.isMuted(by: user)
            self.pinned = record.pinned
            self.createdAt = record.createdAt
        }
    }

    /// `{"error": {"code", "message", "retryable"}}`.
    public struct ErrorBody: Codable, Sendable, Hashable {
        public struct Detail: Codable, Sendable, Hashable {
            public var code: String
            public var message: String
            public var retryable: Bool

            public init(code: String, message: String, retryable: Bool) {
                self.code = code
                self.message = message
                self.retryable = retryable
            }
        }

        public var error: Detail

        public init(code: String, message: String, retryable: Bool) {
            self.error = Detail(code: code, message: message, retryable: retryable)
        }
    }

    // MARK: Requests

    public struct NewUser: Codable, Sendable {
        public var handle: String
        public var password: String
        public var displayName: String
        public init(handle: String, password: String, displayName: String) {
            self.handle = handle
            self.password = password
            self.displayName = displayName
        }
    }

    /// `POST /v1/bots`, with the admin token.
    public struct NewBot: Codable, Sendable {
        public var handle: String
        public var displayName: String
        public init(handle: String, displayName: String) {
            self.handle = handle
            self.displayName = displayName
        }
    }

    public struct Credentials: Codable, Sendable {
        public var handle: String
        public var password: String
        public init(handle: String, password: String) {
            self.handle = handle
            self.password = password
        }
    }

    /// `PUT /v1/users/me/password`.
    public struct PasswordChange: Codable, Sendable {
        public var current: String
        public var new: String
        public init(current: String, new: String) {
            self.current = current
            self.new = new
        }
    }

    public struct ProfileChange: Codable, Sendable {
        public var displayName: String?
        public var avatarURL: String?
        /// Replaces the public fields (`{}`: none).
        public var metadata: Metadata?
        /// Replaces the private fields (`{}`: none).
        public var privateMetadata: Metadata?
        public init(displayName: String? = nil, avatarURL: String? = nil, metadata: Metadata? = nil, privateMetadata: Metadata? = nil) {
            self.displayName = displayName
            self.avatarURL = avatarURL
            self.metadata = metadata
            self.privateMetadata = privateMetadata
        }
    }

    /// `PUT /v1/users/me/avatar` and `PUT /v1/conversations/{id}/photo`: an image upload of the caller's.
    public struct PhotoChange: Codable, Sendable {
        public var mediaId: MediaID
        public init(mediaId: MediaID) { self.mediaId = mediaId }
    }

    public struct NewConversation: Codable, Sendable {
        public var memberIds: [UserID]
        public var name: String?
        public init(memberIds: [UserID], name: String? = nil) {
            self.memberIds = memberIds
            self.name = name
        }
    }

    /// `PATCH /v1/conversations/{id}`: what is given changes.
    public struct Rename: Codable, Sendable {
        public var name: String?
        /// Replaces the conversation's fields (`{}`: none).
        public var metadata: Metadata?
        public init(name: String? = nil, metadata: Metadata? = nil) {
            self.name = name
            self.metadata = metadata
        }
    }

    /// `PUT /v1/conversations/{id}/settings`: the caller's own settings of a conversation; what is
    /// given changes. The answer has both.
    public struct ConversationSettings: Codable, Sendable, Hashable {
        /// No push notifications for its messages.
        public var muted: Bool?
        /// The member's own fields (`{}`: none).
        public var metadata: Metadata?
        public init(muted: Bool? = nil, metadata: Metadata? = nil) {
            self.muted = muted
            self.metadata = metadata
        }
    }

    public struct NewMembers: Codable, Sendable {
        public var userIds: [UserID]
        public init(userIds: [UserID]) { self.userIds = userIds }
    }

    public struct NewMessage: Codable, Sendable {
        public var clientMessageId: String
        /// Empty when absent: a message of attachments alone.
        public var text: String
        public var attachments: [NewAttachment]?
        /// The seq of the message it replies to.
        public var replyTo: Int64?
        /// Members it mentions.
        public var mentions: [UserID]?
        /// The app's own fields, kept with the message as they are.
        public var metadata: Metadata?

        public init(
            clientMessageId: String, text: String, attachments: [NewAttachment]? = nil, replyTo: Int64? = nil, mentions: [UserID]? = nil, metadata: Metadata? = nil
        ) {
            self.clientMessageId = clientMessageId
            self.text = text
            self.attachments = attachments
            self.replyTo = replyTo
            self.mentions = mentions
            self.metadata = metadata
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            clientMessageId = try container.decode(String.self, forKey: .clientMessageId)
            text = try container.decodeIfPresent(String.self, forKey: .text) ?? ""
            attachments = try container.decodeIfPresent([NewAttachment].self, forKey: .attachments)
            replyTo = try container.decodeIfPresent(Int64.self, forKey: .replyTo)
            mentions = try container.decodeIfPresent([UserID].self, forKey: .mentions)
            metadata = try container.decodeIfPresent(Metadata.self, forKey: .metadata)
        }
    }

    /// An upload of the sender's to attach to a message (`POST /v1/media` made it).
    public struct NewAttachment: Codable, Sendable, Hashable {
        public var mediaId: MediaID
        public var caption: String?

        public init(mediaId: MediaID, caption: String? = nil) {
            self.mediaId = mediaId
            self.caption = caption
        }
    }

    public struct Receipts: Codable, Sendable {
        public var deliveredSeq: Int64?
        public var readSeq: Int64?
        public init(deliveredSeq: Int64? = nil, readSeq: Int64? = nil) {
            self.deliveredSeq = deliveredSeq
            self.readSeq = readSeq
        }
    }

    public struct Typing: Codable, Sendable {
        public var typing: Bool
        public init(typing: Bool) { self.typing = typing }
    }

    public struct PresencePreference: Codable, Sendable {
        public var status: PresenceStatus
        public init(status: PresenceStatus) { self.status = status }
    }

    // MARK: Responses

    public struct Session: Codable, Sendable {
        public var user: User
        public var token: String
        public init(user: User, token: String) {
            self.user = user
            self.token = token
        }
    }

    /// `POST /v1/reports`; the reason is checked by name, so an unknown one is a clear `400`.
    public struct NewReport: Codable, Sendable {
        public var userId: UserID
        public var conversationId: ConversationID?
        public var seq: Int64?
        public var reason: String
        public var note: String?
        public init(userId: UserID, conversationId: ConversationID? = nil, seq: Int64? = nil, reason: String, note: String? = nil) {
            self.userId = userId
            self.conversationId = conversationId
            self.seq = seq
            self.reason = reason
            self.note = note
        }
    }

    /// `POST /v1/reports/{id}/resolve` (admin token).
    public struct ReportResolution: Codable, Sendable {
        public var resolution: String?
        public init(resolution: String? = nil) { self.resolution = resolution }
    }

    public struct ReportBody: Codable, Sendable {
        public var report: Report
        public init(report: Report) { self.report = report }
    }

    /// `user.deleted`'s data: whose account, and whether their messages were erased.
    public struct UserDeletedBody: Codable, Sendable, Hashable {
        public var userId: UserID
        public var erased: Bool
        public init(userId: UserID, erased: Bool) {
            self.userId = userId
            self.erased = erased
        }
    }

    /// `DELETE /v1/users/me`'s body: the password; for a bot, which has none, the admin token.
    public struct AccountDeletionRequest: Codable, Sendable {
        public var password: String?
        public var adminToken: String?
        public init(password: String? = nil, adminToken: String? = nil) {
            self.password = password
            self.adminToken = adminToken
        }
    }

    public struct Reports: Codable, Sendable {
        public var reports: [Report]
        /// Where the next page starts (`after=`), when there may be one.
        public var next: String?
        public init(reports: [Report], next: String? = nil) {
            self.reports = reports
            self.next = next
        }
    }

    public struct Blocks: Codable, Sendable {
        public var blocks: [BlockedUser]
        public init(blocks: [BlockedUser]) { self.blocks = blocks }
    }

    public struct Sessions: Codable, Sendable {
        public var sessions: [UserSession]
        public init(sessions: [UserSession]) { self.sessions = sessions }
    }

    public struct Users: Codable, Sendable {
        public var users: [User]
        public init(users: [User]) { self.users = users }
    }

    /// `POST /v1/devices`'s body; the names of the platform and environment are checked by
    /// ``newDevice()``, so that an unknown one gets an error that lists the known ones.
    public struct DeviceRegistration: Codable, Sendable {
        public var platform: String
        public var token: String
        public var topic: String?
        public var environment: String?
        public init(platform: String, token: String, topic: String? = nil, environment: String? = nil) {
            self.platform = platform
            self.token = token
            self.topic = topic
            self.environment = environment
        }

        public func newDevice() throws(ChatError) -> NewDevice {
            guard let platform = PushPlatform(rawValue: platform) else { throw ChatError(.invalidRequest, "platform must be apns or fcm") }
            let environment = try self.environment.map { name throws(ChatError) in
                guard let environment = APNsEnvironment(rawValue: name) else { throw ChatError(.invalidRequest, "environment must be production or sandbox") }
                return environment
            }
            return NewDevice(platform: platform, token: token, topic: topic, environment: environment)
        }
    }

    public struct DeviceBody: Codable, Sendable {
        public var device: Device
        public init(device: Device) { self.device = device }
    }

    /// `POST /v1/media`'s answer.
    public struct MediaBody: Codable, Sendable {
        public var media: Media
        public init(media: Media) { self.media = media }
    }

    public struct Devices: Codable, Sendable {
        public var devices: [Device]
        public init(devices: [Device]) { self.devices = devices }
    }

    public struct CreatedConversation: Codable, Sendable {
        public var conversation: Conversation
        public init(conversation: Conversation) { self.conversation = conversation }
    }

    public struct ConversationList: Codable, Sendable {
        public var conversations: [Conversation]
        public var next: String?
        public init(conversations: [Conversation], next: String?) {
            self.conversations = conversations
            self.next = next
        }
    }

    public struct SentMessage: Codable, Sendable {
        public var message: Message
        public init(message: Message) { self.message = message }
    }

    public struct Messages: Codable, Sendable {
        public var messages: [Message]
        public init(messages: [Message]) { self.messages = messages }
    }

    public struct Presences: Codable, Sendable {
        public var presence: [Presence]
        public init(presence: [Presence]) { self.presence = presence }
    }

    /// `POST /v1/webhooks/{name}/replay`: the conversation's messages from `fromSeq` on go to the
    /// endpoint again.
    public struct WebhookReplay: Codable, Sendable, Hashable {
        public var conversationId: ConversationID
        public var fromSeq: Int64
        public init(conversationId: ConversationID, fromSeq: Int64) {
            self.conversationId = conversationId
            self.fromSeq = fromSeq
        }
    }

    // MARK: Event stream data

    public struct MessageEvent: Codable, Sendable, Hashable {
        public var message: Message
        public init(message: Message) { self.message = message }
    }

    public struct ReceiptEvent: Codable, Sendable, Hashable {
        public var conversationId: ConversationID
        public var userId: UserID
        public var deliveredSeq: Int64
        public var readSeq: Int64
        public init(conversationId: ConversationID, userId: UserID, deliveredSeq: Int64, readSeq: Int64) {
            self.conversationId = conversationId
            self.userId = userId
            self.deliveredSeq = deliveredSeq
            self.readSeq = readSeq
        }
    }

    public struct ConversationEvent: Codable, Sendable, Hashable {
        public var conversation: Conversation
        public var change: ConversationChangeKind
        public init(conversation: Conversation, change: ConversationChangeKind) {
            self.conversation = conversation
            self.change = change
        }
    }

    /// `message_annotated`.
    public struct AnnotationEvent: Codable, Sendable, Hashable {
        public var annotation: Annotation
        public init(annotation: Annotation) { self.annotation = annotation }
    }

    /// `message_edited`, `message_deleted`, `reaction_added`, `reaction_removed`, and the
    /// webhooks of the same names.
    public struct ChangeEvent: Codable, Sendable, Hashable {
        public var change: MessageChange
        public init(_ change: MessageChange) { self.change = change }
    }

    /// `PATCH /v1/conversations/{id}/messages/{seq}`.
    public struct MessageEdit: Codable, Sendable, Hashable {
        public var clientChangeId: String
        public var text: String?
        public init(clientChangeId: String, text: String?) {
            self.clientChangeId = clientChangeId
            self.text = text
        }
    }

    /// `PUT` / `DELETE …/messages/{seq}/reactions/{emoji}`.
    public struct Reactions: Codable, Sendable, Hashable {
        public var reactions: [Reaction]
        public init(reactions: [Reaction]) { self.reactions = reactions }
    }

    /// `PUT` / `DELETE …/messages/{seq}/pin`.
    public struct Pinned: Codable, Sendable, Hashable {
        public var pinned: [Int64]
        public init(pinned: [Int64]) { self.pinned = pinned }
    }

    /// `GET /v1/mentions`.
    public struct Mentions: Codable, Sendable, Hashable {
        public var mentions: [Message]
        public var next: String?
        public init(mentions: [Message], next: String?) {
            self.mentions = mentions
            self.next = next
        }
    }

    /// `GET /v1/search`: the messages found, the best first; `next` continues.
    public struct SearchResults: Codable, Sendable, Hashable {
        public var results: [SearchResult]
        public var next: String?
        public init(results: [SearchResult], next: String?) {
            self.results = results
            self.next = next
        }
    }

    public struct SearchResult: Codable, Sendable, Hashable {
        public var message: Message
        /// The part of the message's text (or of a caption, when only a caption holds the words)
        /// around its first match.
        public var snippet: Snippet
        public init(message: Message, snippet: Snippet) {
            self.message = message
            self.snippet = snippet
        }
    }

    /// A piece of text and where the words searched for are in it: `[start, end)` pairs counted
    /// in Unicode scalars (code points), in order.
    public struct Snippet: Codable, Sendable, Hashable {
        public var text: String
        public var highlights: [[Int]]
        public init(text: String, highlights: [[Int]]) {
            self.text = text
            self.highlights = highlights
        }

        /// The snippet of `message` for `terms`: from its text, else from the first caption that
        /// holds a match.
        public init(of message: Message, terms: [SearchText.Term]) {
            let captions = message.attachments?.compactMap(\.caption) ?? []
            let source = SearchText.matches(of: terms, in: message.text).isEmpty
                ? captions.first { !SearchText.matches(of: terms, in: $0).isEmpty } ?? message.text : message.text
            let (text, ranges) = SearchText.snippet(of: source, terms: terms)
            self.init(text: text, highlights: ranges.map { [$0.lowerBound, $0.upperBound] })
        }
    }

    /// `GET …/messages/{seq}/versions`.
    public struct MessageVersions: Codable, Sendable, Hashable {
        public var versions: [MessageVersion]
        public init(versions: [MessageVersion]) { self.versions = versions }
    }

    /// `PUT /v1/conversations/{id}/messages/{seq}/annotations/{key}`.
    public struct AnnotationValue: Codable, Sendable, Hashable {
        public var value: String
        public init(value: String) { self.value = value }
    }

    public struct TypingEvent: Codable, Sendable, Hashable {
        public var conversationId: ConversationID
        public var userId: UserID
        public var typing: Bool
        public init(conversationId: ConversationID, userId: UserID, typing: Bool) {
            self.conversationId = conversationId
            self.userId = userId
            self.typing = typing
        }
    }

    public struct PresenceEvent: Codable, Sendable, Hashable {
        public var presence: Presence
        public init(presence: Presence) { self.presence = presence }
    }

    /// `event: user`: a user whose display name or photo changed (live only).
    public struct UserEvent: Codable, Sendable, Hashable {
        public var user: User
        public init(user: User) { self.user = user }
    }

    public struct ReadyEvent: Codable, Sendable, Hashable {
        public var cursor: String
        public init(cursor: String) { self.cursor = cursor }
    }

    // MARK: Coding

    /// RFC 3339 in UTC with milliseconds: `2026-11-22T10:15:30.123Z`.
    public static func timestamp(_ date: Date) -> String {
        let millis = date.millisecondsSince1970
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        guard appendTimestamp(millisecondsSince1970: millis, to: &bytes) else { return formattedTimestamp(millisecondsSince1970: millis) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// ``timestamp(_:)`` through Foundation's formatter: for instants outside years 1970–9999, and
    /// the reference the direct writer is tested against.
    static func formattedTimestamp(millisecondsSince1970 millis: Int64) -> String {
        // Whole milliseconds plus half of one: the formatter truncates, and a Double of N.123 s
        // may be just below it.
        Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(Date(timeIntervalSince1970: (Double(millis) + 0.5) / 1000))
    }

    /// Parses what ``timestamp(_:)`` writes (and RFC 3339 without fractional seconds).
    /// The result is whole milliseconds, exactly the `Date` the server had.
    public static func parseTimestamp(_ text: String) -> Date? {
        let parsed = (try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
            ?? (try? Date(text, strategy: Date.ISO8601FormatStyle()))
        return parsed.map { Date(millisecondsSince1970: Int64(($0.timeIntervalSince1970 * 1000).rounded())) }
    }

    public static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(timestamp(date))
        }
        return encoder
    }

    public static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = parseTimestamp(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an RFC 3339 timestamp: \(text)")
            }
            return date
        }
        return decoder
    }
}
