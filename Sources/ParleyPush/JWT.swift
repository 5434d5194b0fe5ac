import Crypto
import Foundation
import ParleyModel
import _CryptoExtras

/// A signed JSON Web Token in compact form (RFC 7519), as the push providers take them: APNs a
/// provider token signed with ES256, Google's OAuth 2 token endpoint an assertion signed with RS256.
enum JWT {
    enum Key {
        /// ECDSA P-256 with SHA-256 (JWS `ES256`): the signature is `r || s`, 64 bytes (RFC 7518 §3.4).
        case es256(P256.Signing.PrivateKey)
        /// RSASSA-PKCS1-v1_5 with SHA-256 (JWS `RS256`).
        case rs256(_RSA.Signing.PrivateKey)

        var algorithm: String {
            switch self {
            case .es256: "ES256"
            case .rs256: "RS256"
            }
        }
    }

    /// `header.claims.signature`, each base64url without padding. `keyID` goes into the header as `kid`.
    static func sign(claims: [String: any Sendable], keyID: String?, with key: Key) throws -> String {
        var header: [String: String] = ["alg": key.algorithm, "typ": "JWT"]
        if let keyID { header["kid"] = keyID }
        let headerPart = try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys]).base64URLEncodedString
        let claimsPart = try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys]).base64URLEncodedString
        let input = Data("\(headerPart).\(claimsPart)".utf8)
        let signature: Data
        switch key {
        case .es256(let key):
            signature = try key.signature(for: input).rawRepresentation
        case .rs256(let key):
            signature = try key.signature(for: input, padding: .insecurePKCS1v1_5).rawRepresentation
        }
        return "\(headerPart).\(claimsPart).\(signature.base64URLEncodedString)"
    }
}
