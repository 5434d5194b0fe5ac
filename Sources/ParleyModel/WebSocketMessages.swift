/// WebSocket framing (RFC 6455 §5) for the send stream a browser opens over HTTP/2 (RFC 8441):
/// the messages in bytes that arrive in pieces, and the frames to write. No extensions are
/// offered, so the reserved bits are always 0; binary messages are not part of the protocol.
///
/// A text message is reported whole (its fragments joined) once it has all come; a message
/// longer than `limit`, or a frame that breaks the rules, is reported once as `failed` with the
/// close code to answer, and nothing after it is read.
public struct WebSocketMessages {
    public enum Message: Equatable, Sendable {
        case text(ArraySlice<UInt8>)
        case ping([UInt8])
        case pong
        /// The other side closes, with its code if it gave one.
        case close(UInt16?)
        /// The connection is to be closed with this code.
        case failed(UInt16)
    }

    /// Close codes (RFC 6455 §7.4.1).
    public enum CloseCode {
        public static let normal: UInt16 = 1000
        public static let goingAway: UInt16 = 1001
        public static let protocolError: UInt16 = 1002
        public static let unsupportedData: UInt16 = 1003
        public static let invalidPayload: UInt16 = 1007
        public static let policyViolation: UInt16 = 1008
        public static let tooBig: UInt16 = 1009
        public static let tryAgainLater: UInt16 = 1013
    }

    public enum Opcode: UInt8, Sendable {
        case continuation = 0x0
        case text = 0x1
        case binary = 0x2
        case close = 0x8
        case ping = 0x9
        case pong = 0xA
    }

    /// Which side wrote the bytes read: a client's frames are masked, a server's never are (§5.1).
    public enum Writer: Sendable {
        case client, server
    }

    public let limit: Int
    private let from: Writer
    private var pending = PendingBytes()
    /// The text message whose fragments are arriving, if one is.
    private var fragments: [UInt8]?
    private var failed = false

    public init(limit: Int, from: Writer) {
        self.limit = limit
        self.from = from
    }

    public mutating func append(_ piece: some Sequence<UInt8>) {
        guard !failed else { return }
        pending.append(piece)
    }

    public mutating func next() -> Message? {
        guard !failed else { return nil }
        while true {
            // Read in place: a copy of the buffer held here would make `compacted()` copy it all.
            let available = pending.unread, start = pending.start
            guard available >= 2 else { return compacted() }
            let first = pending.bytes[start], second = pending.bytes[start + 1]
            guard first & 0x70 == 0 else { return fail(CloseCode.protocolError) }
            let final = first & 0x80 != 0
            guard let opcode = Opcode(rawValue: first & 0x0F) else { return fail(CloseCode.protocolError) }
            let masked = second & 0x80 != 0
            guard masked == (from == .client) else { return fail(CloseCode.protocolError) }
            var headerLength = 2
            var length = UInt64(second & 0x7F)
            if length == 126 {
                guard available >= 4 else { return compacted() }
                length = UInt64(pending.bytes[start + 2]) << 8 | UInt64(pending.bytes[start + 3])
                headerLength = 4
            } else if length == 127 {
                guard available >= 10 else { return compacted() }
                length = pending.bytes[start + 2..<start + 10].reduce(0) { $0 << 8 | UInt64($1) }
                guard length >> 63 == 0 else { return fail(CloseCode.protocolError) }
                headerLength = 10
            }
            let isControl = opcode.rawValue & 0x8 != 0
            if isControl {
                guard final, length <= 125 else { return fail(CloseCode.protocolError) }
            } else {
                // Judged on the header, before the payload is waited for: a frame that says it is
                // longer than the limit is refused without keeping any of it.
                let joined = UInt64(fragments?.count ?? 0)
                guard length <= UInt64(limit) - min(joined, UInt64(limit)) else { return fail(CloseCode.tooBig) }
            }
            let maskLength = masked ? 4 : 0
            let frameLength = headerLength + maskLength + Int(length)
            guard available >= frameLength else { return compacted() }
            let payloadStart = start + headerLength + maskLength
            var payload = pending.bytes[payloadStart..<payloadStart + Int(length)]
            if masked {
                let key = pending.bytes[start + headerLength..<payloadStart]
                var unmasked = [UInt8](repeating: 0, count: payload.count)
                for (offset, byte) in payload.enumerated() { unmasked[offset] = byte ^ key[key.startIndex + offset & 3] }
                payload = unmasked[...]
            }
            pending.start += frameLength
            switch opcode {
            case .ping:
                return .ping(Array(payload))
            case .pong:
                return .pong
            case .close:
                guard payload.count != 1 else { return fail(CloseCode.protocolError) }
                failed = true
                guard payload.count >= 2 else { return .close(nil) }
                return .close(UInt16(payload[payload.startIndex]) << 8 | UInt16(payload[payload.startIndex + 1]))
            case .binary:
                return fail(CloseCode.unsupportedData)
            case .text:
                guard fragments == nil else { return fail(CloseCode.protocolError) }
                if final { return text(payload) }
                fragments = Array(payload)
            case .continuation:
                guard fragments != nil else { return fail(CloseCode.protocolError) }
                fragments?.append(contentsOf: payload)
                if final, let whole = fragments {
                    fragments = nil
                    return text(whole[...])
                }
            }
        }
    }

    private mutating func text(_ bytes: ArraySlice<UInt8>) -> Message {
        // §8.1: a text message that is not UTF-8 fails the connection.
        guard String(validating: bytes, as: UTF8.self) != nil else { return fail(CloseCode.invalidPayload) }
        return .text(bytes)
    }

    /// Nothing whole is left: what is left (the start of a frame) moves to the front.
    private mutating func compacted() -> Message? {
        pending.compact()
        return nil
    }

    private mutating func fail(_ code: UInt16) -> Message {
        failed = true
        pending = PendingBytes()
        fragments = nil
        return .failed(code)
    }

    /// One whole frame; masked with `mask` (a client's frames, §5.3), or not (a server's).
    public static func frame(_ opcode: Opcode, _ payload: some Collection<UInt8>, mask: [UInt8]? = nil) -> [UInt8] {
        var frame: [UInt8] = []
        frame.reserveCapacity(payload.count + 14)
        frame.append(0x80 | opcode.rawValue)
        let maskBit: UInt8 = mask == nil ? 0 : 0x80
        switch payload.count {
        case ..<126:
            frame.append(maskBit | UInt8(payload.count))
        case ..<65_536:
            frame.append(maskBit | 126)
            frame.append(UInt8(payload.count >> 8))
            frame.append(UInt8(payload.count & 0xFF))
        default:
            frame.append(maskBit | 127)
            for shift in stride(from: 56, through: 0, by: -8) { frame.append(UInt8(truncatingIfNeeded: UInt64(payload.count) >> UInt64(shift))) }
        }
        if let mask {
            precondition(mask.count == 4, "a WebSocket mask is 4 bytes")
            frame.append(contentsOf: mask)
            for (offset, byte) in payload.enumerated() { frame.append(byte ^ mask[offset & 3]) }
        } else {
            frame.append(contentsOf: payload)
        }
        return frame
    }

    /// A close frame's payload: the code, then a reason of at most 123 bytes of UTF-8.
    public static func closePayload(_ code: UInt16, reason: String = "") -> [UInt8] {
        var payload = [UInt8(code >> 8), UInt8(code & 0xFF)]
        payload.append(contentsOf: reason.utf8.prefix(123))
        return payload
    }
}
