import Foundation

/// A resume cursor, and why it cannot skip a message.
///
/// Every durable event (message, receipt, conversation change) carries the instant it was
/// committed (`sentAt`, stamped by the conversation's single writer just before its commit).
/// A stream's cursor is the newest such instant it has sent so far, `pc1.<milliseconds>`.
///
/// Events reach a gateway out of commit order: conversations commit concurrently on several
/// workers and fan out on separate paths, so a stream may send an event committed at 12:00:05.300
/// before one committed at 12:00:05.100 is even delivered. A cursor that replayed "after 05.300"
/// would skip that one. So resuming replays every durable event of the caller committed after
/// the cursor **minus a window** (``replayWindow``, 60 s) — longer than any delay between a commit
/// and its fan-out (retries give up after a few seconds) — and the client drops what it already
/// has by `(conversationId, seq)`; receipts and conversation events are states, harmless to repeat.
/// A message whose fan-out was lost outright (its owner died between commit and fan-out) is sent
/// again by the conversation's next owner, which publishes its recent messages again; a stream
/// that waits past a gap for longer than a few seconds ends, and its client's resume within the
/// window replays what it lacks.
///
/// Nothing here counts on IDs being allocated in commit order (the pitfall of autoincrement IDs in
/// PostgreSQL): per conversation, `seq` is the order; across conversations only time is used, with
/// the window as margin.
public struct StreamCursor: Hashable, Sendable, Comparable {
    /// How far before the cursor a resume starts.
    public static let replayWindow: TimeInterval = 60
    /// Cursors older than this are refused with `410 cursor_expired`.
    public static let maximumAge: TimeInterval = 7 * 24 * 3600

    public var millis: Int64

    public init(millis: Int64) { self.millis = millis }
    public init(_ date: Date) { self.millis = date.millisecondsSince1970 }

    public init?(token: String) {
        guard token.hasPrefix("pc1."), token.count <= 32, let millis = Int64(token.dropFirst(4)), Self.millisRange.contains(millis) else { return nil }
        self.millis = millis
    }

    /// The instants a client's cursor may name: 1970 to the end of year 9999 (what the JSON
    /// timestamps can say). Anything else is refused before it reaches date arithmetic.
    public static let millisRange: ClosedRange<Int64> = 0...253_402_300_799_999

    public var token: String { "pc1.\(millis)" }
    public var date: Date { Date(millisecondsSince1970: millis) }

    /// Where a resume from this cursor starts replaying.
    public var replayFrom: Date { date.addingTimeInterval(-Self.replayWindow) }

    public func isExpired(now: Date) -> Bool { date < now.addingTimeInterval(-Self.maximumAge) }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.millis < rhs.millis }
}
