import Foundation
import Logging
import ParleyChat
import ParleyModel

extension StreamCursor {
    /// The cursor after an event: never moves back.
    public func advanced(by event: ChatEvent) -> StreamCursor {
        guard let at = event.durableAt else { return self }
        return StreamCursor(millis: max(millis, at.millisecondsSince1970))
    }
}

/// Per conversation, the last seq a stream has sent: a message at or below it is a duplicate
/// (replay and live overlap), one past it is next, and one further on means messages are missing
/// (a lost fan-out), to be read from the store before it.
public struct StreamSequencer: Sendable {
    public enum Decision: Equatable, Sendable {
        case send
        case duplicate
        /// Read the messages with seq in `after+1 ..< before` first, then send.
        case fillGap(after: Int64, before: Int64)
    }

    private var lastSeq: [ConversationID: Int64] = [:]

    public init() {}

    public func last(_ conversation: ConversationID) -> Int64? { lastSeq[conversation] }

    /// What to do with a message about to be sent. A conversation not seen yet on this stream
    /// starts at whatever comes (there is nothing to compare with).
    public func decide(_ message: Message) -> Decision {
        guard let last = lastSeq[message.conversationId] else { return .send }
        if message.seq <= last { return .duplicate }
        if message.seq == last + 1 { return .send }
        return .fillGap(after: last, before: message.seq)
    }

    /// A message was sent.
    public mutating func sent(_ message: Message) {
        lastSeq[message.conversationId] = max(lastSeq[message.conversationId] ?? 0, message.seq)
    }
}
