import Foundation
import ParleyCluster
import ParleyModel

/// A message to send, as the gateway hands it to the conversation's owner. The sender is the
/// authenticated user, never a field a client chose.
public struct SendMessage: Codable, Sendable, Hashable {
    public var senderId: UserID
    public var clientMessageId: String
    public var text: String

    public init(senderId: UserID, clientMessageId: String, text: String) {
        self.senderId = senderId
        self.clientMessageId = clientMessageId
        self.text = text
    }
}

/// The durable message, and whether this call created it (`201`) or found it (`200`).
public struct SendResult: Codable, Sendable, Hashable {
    public var message: Message
    public var created: Bool

    public init(message: Message, created: Bool) {
        self.message = message
        self.created = created
    }
}

/// Limits the chat actors enforce (API.md's defaults).
public struct ChatLimits: Sendable {
    /// Unicode scalars in a message text.
    public var textScalarsMax = 4000
    public var groupSizeMax = 1000
    public var historyLimitMax = 200

    public init() {}
}

extension ChatError: ClusterErrorConvertible {
    /// A chat error crosses nodes with its own code (`not_found`, `forbidden`, …).
    public var clusterError: ClusterCallError {
        ClusterCallError(code: .init(rawValue: code.rawValue), message: message)
    }
}

extension SendMessage {
    /// Checks the request as API.md defines it: a UUID `clientMessageId`, 1–4,000 scalars of
    /// text that are not all whitespace.
    func validate(limits: ChatLimits) throws(ChatError) {
        guard UUID(uuidString: clientMessageId) != nil else {
            throw ChatError(.invalidRequest, "clientMessageId must be a UUID")
        }
        let scalars = text.unicodeScalars.count
        guard scalars >= 1 else { throw ChatError(.invalidRequest, "text must not be empty") }
        guard scalars <= limits.textScalarsMax else {
            throw ChatError(.invalidRequest, "text has \(scalars) Unicode scalars; at most \(limits.textScalarsMax)")
        }
        guard text.unicodeScalars.contains(where: { !$0.properties.isWhitespace }) else {
            throw ChatError(.invalidRequest, "text must not be only whitespace")
        }
    }
}
