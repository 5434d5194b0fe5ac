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

/// Client message IDs: UUIDs, as API.md asks.
public enum ClientMessageID {
    /// Whether `text` is a UUID in its string form: 36 characters, hex digits of either case with
    /// hyphens at 8, 13, 18 and 23, checked byte by byte. Foundation's `UUID(uuidString:)` parses
    /// with `sscanf` on Linux: ~1 % of a worker's CPU when every send did, and it also takes a
    /// space or a sign at the start of a group, which this refuses (API.md: anything else → 400).
    public static func isValid(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { bytes in
            guard bytes.count == 36 else { return false }
            for (index, byte) in bytes.enumerated() {
                switch index {
                case 8, 13, 18, 23:
                    guard byte == UInt8(ascii: "-") else { return false }
                default:
                    switch byte {
                    case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"): continue
                    default: return false
                    }
                }
            }
            return true
        }
    }

    /// A new time-ordered UUID (version 7, RFC 9562): 48 bits of Unix milliseconds, then 74 random
    /// bits. Any UUID is accepted as a `clientMessageId`; Parley's own clients make these because
    /// consecutive sends then land next to each other in the store's idempotency index instead of
    /// on a random page each (raw commits of 256 appends: 31,000/s with random UUIDs, 74,000/s with
    /// these, on the same SQLite store). The clock and the randomness
    /// are the caller's (`ParleyClient` passes the system's).
    public static func make(now: Date, using generator: inout some RandomNumberGenerator) -> String {
        let milliseconds = UInt64(max(0, now.timeIntervalSince1970 * 1000)) & 0xFFFF_FFFF_FFFF
        let randomA = generator.next() as UInt64, randomB = generator.next() as UInt64
        let high = milliseconds << 16 | 0x7000 | (randomA & 0x0FFF)
        let low = 0x8000_0000_0000_0000 | (randomB & 0x3FFF_FFFF_FFFF_FFFF)
        // Written straight into the string's storage: one allocation per ID.
        return String(unsafeUninitializedCapacity: 36) { text in
            var position = 0
            for nibble in 0..<32 {
                if nibble == 8 || nibble == 12 || nibble == 16 || nibble == 20 {
                    text[position] = UInt8(ascii: "-")
                    position += 1
                }
                let word = nibble < 16 ? high : low
                let digit = UInt8(truncatingIfNeeded: word >> UInt64(60 - 4 * (nibble % 16))) & 0xF
                text[position] = digit < 10 ? UInt8(ascii: "0") + digit : UInt8(ascii: "a") + digit - 10
                position += 1
            }
            return position
        }
    }
}
