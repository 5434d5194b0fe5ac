import Crypto
import Foundation
import Logging
import ParleyModel

/// Access tokens any gateway can verify without a lookup: the user, a random token ID and an
/// expiry, signed with HMAC-SHA256 under the secret every gateway shares. Revocation is by token
/// ID, kept in the store and checked by the user's actor on every request, so a logout takes
/// effect on every gateway at once.
///
/// Format: `pt1.<base64url(userId|tokenId|expiresAtMillis)>.<base64url(mac)>`.
public struct TokenAuthority: Sendable {
    public struct Claims: Hashable, Sendable {
        public var userId: UserID
        public var tokenId: String
        public var expiresAt: Date
    }

    /// The secret's bytes (`SymmetricKey` is not `Sendable` in this swift-crypto).
    private let secret: Data
    private var key: SymmetricKey { SymmetricKey(data: secret) }
    public let lifetime: Duration

    /// - Parameter secret: at least 32 bytes, the same on every gateway.
    public init(secret: String, lifetime: Duration = .seconds(30 * 24 * 3600)) throws {
        guard secret.utf8.count >= 32 else {
            throw TokenAuthorityError("the token secret must be at least 32 bytes (every gateway needs the same one)")
        }
        self.secret = Data(secret.utf8)
        self.lifetime = lifetime
    }

    /// A new token for `user`, valid for `lifetime` (nil: the authority's).
    public func issue(for user: UserID, lifetime: Duration? = nil, now: Date) -> (token: String, claims: Claims) {
        let claims = Claims(
            userId: user, tokenId: UUID().uuidString.lowercased(),
            expiresAt: now.addingTimeInterval(Double((lifetime ?? self.lifetime).components.seconds)).millisecondPrecision)
        let payload = Data("\(user.rawValue)|\(claims.tokenId)|\(claims.expiresAt.millisecondsSince1970)".utf8)
        let mac = Data(HMAC<SHA256>.authenticationCode(for: payload, using: key))
        return ("pt1.\(Self.base64URL(payload)).\(Self.base64URL(mac))", claims)
    }

    /// The claims of a well-formed, correctly signed, unexpired token; nil otherwise (no detail:
    /// every bad token is the same 401).
    public func verify(_ token: String, now: Date) -> Claims? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "pt1",
            let payload = Self.data(base64URL: parts[1]), let mac = Self.data(base64URL: parts[2]),
            HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: payload, using: key),
            let text = String(data: payload, encoding: .utf8)
        else { return nil }
        let fields = text.split(separator: "|", omittingEmptySubsequences: false)
        guard fields.count == 3, let millis = Int64(fields[2]) else { return nil }
        let claims = Claims(userId: UserID(rawValue: String(fields[0])), tokenId: String(fields[1]), expiresAt: Date(millisecondsSince1970: millis))
        return claims.expiresAt > now ? claims : nil
    }

    static func base64URL(_ data: Data) -> String {
        data.base64URLEncodedString
    }

    /// Decodes unpadded base64url byte by byte (this runs on every request: no string rewriting).
    static func data(base64URL text: Substring) -> Data? {
        let input = text.utf8
        guard input.count <= 4096, input.count % 4 != 1 else { return nil }
        var output = Data()
        output.reserveCapacity(input.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in input {
            let value: UInt8
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = byte - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = byte - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = byte - UInt8(ascii: "0") + 52
            case UInt8(ascii: "-"): value = 62
            case UInt8(ascii: "_"): value = 63
            default: return nil
            }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        // Leftover bits must be zero, as an encoder writes them (one text per byte string).
        guard accumulator & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return output
    }
}

public struct TokenAuthorityError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
