import Foundation

extension Data {
    /// Base64url without padding (RFC 4648 §5), as tokens and JWTs carry bytes.
    public var base64URLEncodedString: String {
        base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
