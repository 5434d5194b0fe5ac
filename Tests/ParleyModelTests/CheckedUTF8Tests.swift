import ParleyModel
import ParleyTestKit
import Testing

/// `String(checkingUTF8:)` against the standard library's validating initializer, which it
/// replaces on every string read from a cluster frame and from the gateway's own JSON.
@Suite struct CheckedUTF8Tests {
    func expectSameAsStandardLibrary(_ bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
        bytes.withUnsafeBufferPointer { buffer in
            let expected = String(validating: buffer, as: UTF8.self)
            let checked = String(checkingUTF8: buffer)
            #expect(checked == expected, "bytes \(bytes)", sourceLocation: sourceLocation)
            #expect(checked.map { Array($0.utf8) == bytes } ?? true, "a string read back is the very bytes", sourceLocation: sourceLocation)
        }
    }

    @Test func validTextIsReadAsItIs() {
        for text in ["", "a", "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d", "é ß 中 😀 \u{FFFD} \u{0} \u{2028}"] {
            let bytes = Array(text.utf8)
            expectSameAsStandardLibrary(bytes)
            #expect(bytes.withUnsafeBufferPointer { String(checkingUTF8: $0) } == text)
        }
    }

    /// Ill-formed sequences that repair would turn into U+FFFD, among them some whose repaired
    /// form has the same length as the bytes (a truncated 4-byte sequence is 3 bytes, as U+FFFD is).
    @Test func illFormedUTF8IsRefused() {
        let cases: [[UInt8]] = [
            [0xFF], [0x80], [0xC0, 0x80], [0xE0, 0xA0], [0xF0, 0x90, 0x80], [0xED, 0xA0, 0x80],
            [0xF4, 0x90, 0x80, 0x80], [0x61, 0xE2, 0x82], Array("ok".utf8) + [0xEF, 0xBF],
        ]
        for bytes in cases {
            expectSameAsStandardLibrary(bytes)
            #expect(bytes.withUnsafeBufferPointer { String(checkingUTF8: $0) } == nil, "bytes \(bytes)")
        }
    }

    @Test func randomBytesAgreeWithTheStandardLibrary() {
        var random = SeededRandom(seed: 0x5EED_0008)
        // Bytes near the edges of UTF-8's ranges, so that valid and ill-formed sequences both come up.
        let pool: [UInt8] = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF]
        var valid = 0
        for _ in 0..<20_000 {
            let bytes = (0..<Int.random(in: 0...8, using: &random)).map { _ in pool.randomElement(using: &random) ?? 0 }
            expectSameAsStandardLibrary(bytes)
            if bytes.withUnsafeBufferPointer({ String(validating: $0, as: UTF8.self) }) != nil { valid += 1 }
        }
        #expect(valid > 1_000, "the sample holds valid strings too (\(valid))")
    }
}
