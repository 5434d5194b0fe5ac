import Foundation

/// The parsers of what a client puts in a URL: query parameters, path IDs and cursors. Each takes
/// the text as it came and either gives a value in range or says, in words a client can act on,
/// what is wrong; none traps, whatever the text (the fuzz targets run them on arbitrary bytes).
public enum ClientInput {
    /// Why a parameter was refused: `400 invalid_request` with this message.
    public struct Invalid: Error, Equatable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
        public init(_ message: String) { self.message = message }
    }

    /// The integer query parameter `name`, `fallback` when absent.
    public static func integer(_ text: Substring?, name: String, default fallback: Int, range: ClosedRange<Int>) throws(Invalid) -> Int {
        guard let text else { return fallback }
        guard let value = Int(text), range.contains(value) else {
            throw Invalid(range.upperBound == Int.max ? "\(name) must be an integer ≥ \(range.lowerBound)" : "\(name) must be an integer in \(range.lowerBound)–\(range.upperBound)")
        }
        return value
    }

    /// IDs are opaque, but bounded: 1–128 printable ASCII characters without `/`. Anything else
    /// names nothing (`404`), and is never handed to an actor.
    public static func isPlausibleID(_ text: some StringProtocol) -> Bool {
        (1...128).contains(text.utf8.count) && text.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") }
    }

    /// A comma-separated list of user IDs (`?userIds=`, or another `name`), 1…`max` of them; an ID
    /// that cannot be one is left out (it names nobody), as an unknown one would be.
    public static func userIDs(_ text: Substring?, max: Int, name: String = "userIds") throws(Invalid) -> [UserID] {
        let parts = (text ?? "").split(separator: ",", omittingEmptySubsequences: true)
        guard !parts.isEmpty else { throw Invalid("\(name) is required (comma-separated)") }
        guard parts.count <= max else { throw Invalid("\(name): at most \(max)") }
        return parts.filter(isPlausibleID).map { UserID(rawValue: String($0)) }
    }

    /// The conversation list's page cursor, `<milliseconds>.<conversation id>`, as
    /// ``pageCursorToken(_:)`` writes it; nil for anything else.
    public static func pageCursor(_ token: some StringProtocol) -> ConversationPageCursor? {
        guard token.utf8.count <= 200, let dot = token.firstIndex(of: "."), let millis = Int64(token[..<dot]),
              StreamCursor.millisRange.contains(millis) else { return nil }
        let id = token[token.index(after: dot)...]
        guard isPlausibleID(id) else { return nil }
        return ConversationPageCursor(lastActivityAt: Date(millisecondsSince1970: millis), id: ConversationID(rawValue: String(id)))
    }

    public static func pageCursorToken(_ cursor: ConversationPageCursor) -> String {
        "\(cursor.lastActivityAt.millisecondsSince1970).\(cursor.id.rawValue)"
    }
}
