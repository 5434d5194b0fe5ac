import Foundation
@testable import ParleyGateway
import Testing

@Suite struct TokenEncodingTests {
    /// The hand-written base64url decoder reads back exactly what the encoder wrote, for every
    /// length, and refuses what an encoder never writes.
    @Test func base64URLDecodesWhatItEncodedAndRefusesEverythingElse() {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<64 {
            let bytes = Data((0..<length).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
            let text = TokenAuthority.base64URL(bytes)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(TokenAuthority.data(base64URL: Substring(text)) == bytes, "length \(length): \(text)")
        }
        #expect(TokenAuthority.data(base64URL: "_-8") == Data([0xFF, 0xEF]))
        for bad in ["ab+c", "ab/c", "abc=", "a", "abcde", "ab c", "é"] {
            #expect(TokenAuthority.data(base64URL: Substring(bad)) == nil, "\(bad)")
        }
        // "QR" and "QQ" differ only in bits no encoder sets: only one text per byte string.
        #expect(TokenAuthority.data(base64URL: "QQ") == Data([0x41]))
        #expect(TokenAuthority.data(base64URL: "QR") == nil)
    }
}
