/// A chat operation refused, with API.md's error code and a message a person can act on.
public struct ChatError: Error, Hashable, Sendable, Codable, CustomStringConvertible {
    public struct Code: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible, ExpressibleByStringLiteral {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { self.rawValue = value }
        public var description: String { rawValue }

        /// A missing or invalid field (400).
        public static let invalidRequest: Code = "invalid_request"
        /// No such thing, or the caller may not know it exists (404).
        public static let notFound: Code = "not_found"
        /// A member, but not allowed this (403).
        public static let forbidden: Code = "forbidden"
        /// Taken (409).
        public static let conflict: Code = "conflict"
        /// The cluster cannot serve this now; retry (503).
        public static let unavailable: Code = "unavailable"
        /// A resume cursor older than what can be replayed (410).
        public static let cursorExpired: Code = "cursor_expired"
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
