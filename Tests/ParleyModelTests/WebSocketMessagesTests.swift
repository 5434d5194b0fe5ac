import ParleyModel
import Testing

/// The send stream's WebSocket framing (RFC 6455 §5): the RFC's own examples, both ways; bodies
/// cut anywhere; and each rule a frame can break, answered with its close code.
@Suite struct WebSocketMessagesTests {
    typealias Messages = WebSocketMessages
    typealias Code = WebSocketMessages.CloseCode
    let hello = Array("Hello".utf8)

    func read(_ bytes: [UInt8], from writer: Messages.Writer, limit: Int = 64 * 1024, pieceSize: Int? = nil) -> [Messages.Message] {
        var messages = Messages(limit: limit, from: writer)
        var read: [Messages.Message] = []
        var rest = bytes[...]
        repeat {
            let piece = rest.prefix(pieceSize ?? rest.count)
            rest = rest.dropFirst(piece.count)
            messages.append(piece)
            while let message = messages.next() { read.append(message) }
        } while !rest.isEmpty
        return read
    }

    @Test func theRFCsExamplesAreWrittenAndReadAsTheRFCGivesThem() {
        // RFC 6455 §5.7.
        let unmasked: [UInt8] = [0x81, 0x05, 0x48, 0x65, 0x6C, 0x6C, 0x6F]
        let masked: [UInt8] = [0x81, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58]
        #expect(Messages.frame(.text, hello) == unmasked)
        #expect(Messages.frame(.text, hello, mask: [0x37, 0xFA, 0x21, 0x3D]) == masked)
        #expect(read(unmasked, from: .server) == [.text(hello[...])])
        #expect(read(masked, from: .client) == [.text(hello[...])])
        let fragmented: [UInt8] = [0x01, 0x03, 0x48, 0x65, 0x6C, 0x80, 0x02, 0x6C, 0x6F]
        #expect(read(fragmented, from: .server) == [.text(hello[...])])
        #expect(read([0x89, 0x05] + hello + [0x8A, 0x05] + hello, from: .server) == [.ping(hello), .pong])
        #expect(Array(Messages.frame(.binary, [UInt8](repeating: 7, count: 256)).prefix(4)) == [0x82, 0x7E, 0x01, 0x00])
        #expect(Array(Messages.frame(.binary, [UInt8](repeating: 7, count: 65_536)).prefix(10)) == [0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0])
    }

    @Test func messagesOfEveryLengthFormReadTheSameWhateverPiecesTheyCameIn() {
        let mask: [UInt8] = [0xA1, 0x02, 0xF3, 0x44]
        let texts = [[UInt8](), hello, [UInt8](repeating: UInt8(ascii: "a"), count: 125), [UInt8](repeating: UInt8(ascii: "b"), count: 126),
                     [UInt8](repeating: UInt8(ascii: "c"), count: 65_535), [UInt8](repeating: UInt8(ascii: "d"), count: 70_000), Array("é 😀".utf8)]
        var stream: [UInt8] = []
        for text in texts { stream += Messages.frame(.text, text, mask: mask) }
        stream += Messages.frame(.ping, hello, mask: mask) + Messages.frame(.close, Messages.closePayload(Code.goingAway, reason: "bye"), mask: mask)
        let expected: [Messages.Message] = texts.map { .text($0[...]) } + [.ping(hello), .close(Code.goingAway)]
        for pieceSize in [nil, 1, 3, 1000] {
            #expect(read(stream, from: .client, limit: 80_000, pieceSize: pieceSize) == expected, "pieces of \(pieceSize.map(String.init) ?? "all")")
        }
        // A close without a code, and nothing read after a close.
        #expect(read([0x88, 0x00] + Messages.frame(.text, hello), from: .server) == [.close(nil)])
    }

    @Test func eachBrokenRuleIsAnsweredOnceWithItsCloseCodeAndNothingAfterItIsRead() {
        let mask: [UInt8] = [1, 2, 3, 4]
        let after = Messages.frame(.text, hello, mask: mask)
        let cases: [(String, [UInt8], UInt16)] = [
            ("an unmasked frame from a client", Messages.frame(.text, hello), Code.protocolError),
            ("a reserved bit set", [0xC1, 0x80] + mask, Code.protocolError),
            ("an unknown opcode", [0x83, 0x80] + mask, Code.protocolError),
            ("a control frame over 125 bytes", [0x89, 0xFE, 0x00, 0x7E] + mask + [UInt8](repeating: 0, count: 126), Code.protocolError),
            ("a fragmented control frame", [0x09, 0x80] + mask, Code.protocolError),
            ("a continuation with nothing to continue", [0x80, 0x80] + mask, Code.protocolError),
            ("a new message inside a fragmented one", [0x01, 0x81] + mask + [0x41 ^ 1] + Messages.frame(.text, hello, mask: mask), Code.protocolError),
            ("a 64-bit length with its top bit set", [0x81, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1], Code.protocolError),
            ("a close frame with one byte", [0x88, 0x81] + mask + [0x03 ^ 1], Code.protocolError),
            ("a binary message", Messages.frame(.binary, hello, mask: mask), Code.unsupportedData),
            ("text that is not UTF-8", Messages.frame(.text, [0x48, 0xFF, 0xFE], mask: mask), Code.invalidPayload),
            // Judged on the header: the frame's 100 KiB never came.
            ("a frame longer than the limit", [0x81, 0xFF, 0, 0, 0, 0, 0, 0x01, 0x90, 0x00] + mask, Code.tooBig),
            ("fragments that add up past the limit",
             [0x01, 0xFE, 0xEA, 0x60] + mask + [UInt8](repeating: 0x41 ^ 1, count: 60_000) + [0x80, 0xFE, 0x17, 0x70] + mask, Code.tooBig),
        ]
        for (rule, bytes, code) in cases {
            #expect(read(bytes + after, from: .client) == [.failed(code)], "\(rule)")
        }
        #expect(read(Messages.frame(.text, hello, mask: mask), from: .server) == [.failed(Code.protocolError)], "a masked frame from a server")
    }

    @Test func aCloseFramesPayloadIsItsCodeThenItsReason() {
        #expect(Messages.closePayload(Code.policyViolation) == [0x03, 0xF0])
        #expect(Messages.closePayload(Code.normal, reason: "ok") == [0x03, 0xE8, 0x6F, 0x6B])
        #expect(Messages.closePayload(Code.normal, reason: String(repeating: "x", count: 200)).count == 125, "a control frame's payload is at most 125 bytes")
    }
}
