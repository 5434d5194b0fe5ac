import Foundation
import ParleyModel

/// A message written to the device before it is sent (``OfflineClient/send(_:attachments:replyTo:mentions:metadata:to:)``):
/// it waits here until the server acknowledges it, across network losses and app restarts, and
/// stays here marked ``failure`` if the server refuses it.
public struct OutboxEntry: Codable, Sendable, Hashable, Identifiable {
    /// Why the server refused the message: the app shows it, and offers
    /// ``OfflineClient/retry(_:)`` or ``OfflineClient/discard(_:)``.
    public struct Failure: Codable, Sendable, Hashable {
        public var status: Int
        public var code: String
        public var message: String
    }

    /// Its idempotency key: however many times it is sent, the server stores it once.
    public var clientMessageId: String
    public var conversationId: ConversationID
    public var text: String
    public var attachments: [OutboxAttachment]
    public var replyTo: Int64?
    public var mentions: [UserID]?
    public var metadata: Metadata?
    /// When the app wrote it, by the device's clock (entries are sent in the order written, not by this).
    public var createdAt: Date
    /// Nil while it waits to be sent.
    public var failure: Failure?

    public var id: String { clientMessageId }
}

/// A file of an outbox entry: the outbox's own copy of it (the app's may be a temporary file),
/// then, once uploaded, the upload's ID, kept so that a restart does not upload it again.
public struct OutboxAttachment: Codable, Sendable, Hashable {
    public var file: URL
    public var contentType: String
    public var caption: String?
    public var mediaId: MediaID?
}

/// A file to attach to a message sent through ``OfflineClient``.
public struct NewOutboxAttachment: Sendable, Hashable {
    public var file: URL
    /// Nil: read from the file's first bytes (``MediaSniffing``).
    public var contentType: String?
    public var caption: String?

    public init(file: URL, contentType: String? = nil, caption: String? = nil) {
        self.file = file
        self.contentType = contentType
        self.caption = caption
    }
}

/// One row of the chat list: a conversation as the store holds it, with what of the user's waits
/// to be sent in it.
public struct ChatSummary: Sendable, Hashable, Identifiable {
    public var conversation: API.Conversation
    /// Messages of the user's in the outbox, not yet acknowledged.
    public var waiting: Int
    /// Messages the server refused (``OutboxEntry/failure``).
    public var failed: Int

    public var id: ConversationID { conversation.id }
}

/// One conversation as the store holds it: its latest messages, ascending, then the user's
/// messages that wait in the outbox (or failed), in the order they were written.
public struct ConversationSnapshot: Sendable, Hashable {
    /// Nil until the conversation is known (its first sync), or once the user left it.
    public var conversation: API.Conversation?
    public var messages: [Message]
    public var outbox: [OutboxEntry]
}
