import Foundation

/// What kind of thing an ``Identifier`` names, and the prefix its random IDs get.
public protocol IdentifierKind: Sendable {
    static var prefix: String { get }
}

/// An opaque ID (clients must not parse it), typed by what it names so that a user's ID cannot be
/// passed where a conversation's is expected.
public struct Identifier<Kind: IdentifierKind>: RawRepresentable, Hashable, Comparable, Sendable, Codable,
    CustomStringConvertible, ExpressibleByStringLiteral
{
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }
    public init(from decoder: any Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
    public var description: String { rawValue }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    /// A new random ID: the kind's prefix and 128 random bits as 32 lowercase hex digits.
    public static func make() -> Self {
        var generator = SystemRandomNumberGenerator()
        let hex = (0..<2).map { _ in
            let word = String(generator.next() as UInt64, radix: 16)
            return String(repeating: "0", count: 16 - word.count) + word
        }
        return Self(rawValue: Kind.prefix + hex.joined())
    }
}

public enum UserIDKind: IdentifierKind { public static let prefix = "u_" }
public enum ConversationIDKind: IdentifierKind { public static let prefix = "c_" }

/// A user's ID.
public typealias UserID = Identifier<UserIDKind>
/// A conversation's ID.
public typealias ConversationID = Identifier<ConversationIDKind>
