import NIOCore

/// The HTTP/2 frames Parley's own clients read (RFC 9113 §4.1, §6): what a client that sends
/// requests and reads responses, some of them long streams, needs, and no more. A header block
/// arrives whole (its CONTINUATION frames joined); the caller decodes it with HPACK, in the order
/// blocks arrive.
///
/// Why not NIOHTTP2's handler: in a load run at 4,000 msg/s NIOHTTP2's code (its state machines,
/// buffers, per-frame bookkeeping and HPACK) was 23 % of the load generator's CPU — which shares
/// the two cores with the nodes it measures; without the handler the load generator took a fifth
/// less. The gateway keeps NIOHTTP2 (and `curl`, `nghttp` and `h2load` test it).
public enum HTTP2ClientFrame: Equatable, Sendable {
    /// `flowControlled`: the bytes the frame counts against the flow-control windows (its payload
    /// with padding).
    case data(stream: UInt32, payload: ByteBuffer, endStream: Bool, flowControlled: Int)
    case headers(stream: UInt32, block: ByteBuffer, endStream: Bool)
    case rstStream(stream: UInt32, code: UInt32)
    case settings(ack: Bool, values: [Setting])
    case ping(ack: Bool, payload: UInt64)
    case goAway(lastStream: UInt32, code: UInt32)
    case windowUpdate(stream: UInt32, increment: UInt32)
    /// PRIORITY, and types this client does not know (RFC 9113 §4.1: ignored).
    case ignored

    public struct Setting: Equatable, Sendable {
        public var id: UInt16
        public var value: UInt32
        public init(_ id: UInt16, _ value: UInt32) {
            self.id = id
            self.value = value
        }

        public static let enablePush: UInt16 = 0x2
        public static let maxConcurrentStreams: UInt16 = 0x3
        public static let initialWindowSize: UInt16 = 0x4
        public static let headerTableSize: UInt16 = 0x1
    }

    /// The largest frame payload either side sends unless told otherwise (SETTINGS_MAX_FRAME_SIZE,
    /// which this client never raises).
    public static let maxPayload = 16_384
    /// The flow-control window of a connection and of each stream until SETTINGS or WINDOW_UPDATE say more.
    public static let initialWindow = 65_535
    /// What a client sends first (RFC 9113 §3.4), before its SETTINGS.
    public static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
}

/// A connection error: the peer broke the protocol, and the connection cannot go on.
public struct HTTP2ClientProtocolError: Error, CustomStringConvertible {
    public var description: String
}

/// Reads frames from the bytes of a connection as they come (after TLS).
public struct HTTP2ClientFrameReader {
    private var buffered = ByteBuffer()
    /// A HEADERS frame without END_HEADERS: its block so far, until the last CONTINUATION.
    private var openBlock: (stream: UInt32, block: ByteBuffer, endStream: Bool)?

    public init() {}

    /// Bytes read from the connection.
    public mutating func append(_ bytes: inout ByteBuffer) {
        if buffered.readableBytes == 0 {
            buffered = bytes
        } else {
            buffered.writeBuffer(&bytes)
        }
    }

    /// The next whole frame, nil until more bytes come; throws on a protocol error.
    public mutating func next() throws -> HTTP2ClientFrame? {
        while true {
            guard let (type, flags, stream, payload) = try nextRaw() else {
                // Read frames may still share the storage: drop it when all is read, and move
                // what is left only now and then.
                if buffered.readableBytes == 0 {
                    buffered = ByteBuffer()
                } else if buffered.readerIndex > HTTP2ClientFrame.maxPayload {
                    buffered.discardReadBytes()
                }
                return nil
            }
            if let open = openBlock {
                guard type == 0x9, stream == open.stream else {
                    throw HTTP2ClientProtocolError(description: "a CONTINUATION of stream \(open.stream) was expected, got frame type \(type) on stream \(stream)")
                }
                var block = open.block
                var fragment = payload
                block.writeBuffer(&fragment)
                guard flags & 0x4 != 0 else {
                    openBlock = (open.stream, block, open.endStream)
                    continue
                }
                openBlock = nil
                return .headers(stream: open.stream, block: block, endStream: open.endStream)
            }
            if let frame = try frame(type: type, flags: flags, stream: stream, payload: payload) { return frame }
        }
    }

    private mutating func nextRaw() throws -> (type: UInt8, flags: UInt8, stream: UInt32, payload: ByteBuffer)? {
        guard buffered.readableBytes >= 9,
            let high = buffered.getInteger(at: buffered.readerIndex, as: UInt16.self),
            let low = buffered.getInteger(at: buffered.readerIndex + 2, as: UInt8.self)
        else { return nil }
        let length = Int(high) << 8 | Int(low)
        guard length <= HTTP2ClientFrame.maxPayload else {
            throw HTTP2ClientProtocolError(description: "a frame of \(length) bytes, over the \(HTTP2ClientFrame.maxPayload) allowed")
        }
        guard buffered.readableBytes >= 9 + length else { return nil }
        buffered.moveReaderIndex(forwardBy: 3)
        guard let type = buffered.readInteger(as: UInt8.self), let flags = buffered.readInteger(as: UInt8.self),
            let stream = buffered.readInteger(as: UInt32.self), let payload = buffered.readSlice(length: length)
        else { throw HTTP2ClientProtocolError(description: "a frame header that could not be read") }
        return (type, flags, stream & 0x7FFF_FFFF, payload)
    }

    private mutating func frame(type: UInt8, flags: UInt8, stream: UInt32, payload: ByteBuffer) throws -> HTTP2ClientFrame? {
        var payload = payload
        switch type {
        case 0x0:  // DATA
            let length = payload.readableBytes
            try removePadding(&payload, flags: flags, type: "DATA")
            return .data(stream: stream, payload: payload, endStream: flags & 0x1 != 0, flowControlled: length)
        case 0x1:  // HEADERS
            try removePadding(&payload, flags: flags, type: "HEADERS")
            if flags & 0x20 != 0 {  // PRIORITY: dependency and weight come first
                guard payload.readableBytes >= 5 else { throw HTTP2ClientProtocolError(description: "a HEADERS frame too short for its priority") }
                payload.moveReaderIndex(forwardBy: 5)
            }
            guard flags & 0x4 != 0 else {
                openBlock = (stream, payload, flags & 0x1 != 0)
                return nil
            }
            return .headers(stream: stream, block: payload, endStream: flags & 0x1 != 0)
        case 0x3:  // RST_STREAM
            guard payload.readableBytes == 4, let code = payload.readInteger(as: UInt32.self) else { throw sized("RST_STREAM") }
            return .rstStream(stream: stream, code: code)
        case 0x4:  // SETTINGS
            let ack = flags & 0x1 != 0
            guard payload.readableBytes % 6 == 0, !ack || payload.readableBytes == 0 else { throw sized("SETTINGS") }
            var values: [HTTP2ClientFrame.Setting] = []
            while let id = payload.readInteger(as: UInt16.self), let value = payload.readInteger(as: UInt32.self) {
                values.append(.init(id, value))
            }
            return .settings(ack: ack, values: values)
        case 0x5:  // PUSH_PROMISE: this client's SETTINGS forbid it
            throw HTTP2ClientProtocolError(description: "a PUSH_PROMISE, though push is disabled")
        case 0x6:  // PING
            guard payload.readableBytes == 8, let opaque = payload.readInteger(as: UInt64.self) else { throw sized("PING") }
            return .ping(ack: flags & 0x1 != 0, payload: opaque)
        case 0x7:  // GOAWAY
            guard payload.readableBytes >= 8, let last = payload.readInteger(as: UInt32.self), let code = payload.readInteger(as: UInt32.self) else {
                throw sized("GOAWAY")
            }
            return .goAway(lastStream: last & 0x7FFF_FFFF, code: code)
        case 0x8:  // WINDOW_UPDATE
            guard payload.readableBytes == 4, let increment = payload.readInteger(as: UInt32.self) else { throw sized("WINDOW_UPDATE") }
            return .windowUpdate(stream: stream, increment: increment & 0x7FFF_FFFF)
        case 0x9:
            throw HTTP2ClientProtocolError(description: "a CONTINUATION without a HEADERS before it")
        default:
            return .ignored
        }
    }

    private func removePadding(_ payload: inout ByteBuffer, flags: UInt8, type: String) throws {
        guard flags & 0x8 != 0 else { return }
        guard let padding = payload.readInteger(as: UInt8.self), Int(padding) <= payload.readableBytes else {
            throw HTTP2ClientProtocolError(description: "a \(type) frame with more padding than payload")
        }
        payload = payload.getSlice(at: payload.readerIndex, length: payload.readableBytes - Int(padding)) ?? ByteBuffer()
    }

    private func sized(_ type: String) -> HTTP2ClientProtocolError {
        HTTP2ClientProtocolError(description: "a \(type) frame of the wrong size")
    }
}

/// Writes the frames the client sends.
public enum HTTP2ClientFrameWriter {
    public static func settings(_ values: [HTTP2ClientFrame.Setting], into buffer: inout ByteBuffer) {
        header(length: values.count * 6, type: 0x4, flags: 0, stream: 0, into: &buffer)
        for setting in values {
            buffer.writeInteger(setting.id)
            buffer.writeInteger(setting.value)
        }
    }

    public static func settingsAck(into buffer: inout ByteBuffer) {
        header(length: 0, type: 0x4, flags: 0x1, stream: 0, into: &buffer)
    }

    /// A HEADERS frame whose block (HPACK-encoded) `encode` writes straight after the frame's
    /// header, into the buffer the frame goes out in: the client's blocks are far under a frame.
    public static func headers(
        stream: UInt32, endStream: Bool, into buffer: inout ByteBuffer, encode: (inout ByteBuffer) throws -> Void
    ) rethrows {
        let start = buffer.writerIndex
        header(length: 0, type: 0x1, flags: 0x4 | (endStream ? 0x1 : 0), stream: stream, into: &buffer)
        try encode(&buffer)
        let length = buffer.writerIndex - start - 9
        precondition(length <= HTTP2ClientFrame.maxPayload, "a header block of \(length) bytes needs CONTINUATION frames")
        buffer.setInteger(UInt16(length >> 8), at: start)
        buffer.setInteger(UInt8(length & 0xFF), at: start + 2)
    }

    /// `payload` in one DATA frame (at most ``HTTP2ClientFrame/maxPayload`` bytes).
    public static func data(stream: UInt32, payload: ByteBuffer, endStream: Bool, into buffer: inout ByteBuffer) {
        precondition(payload.readableBytes <= HTTP2ClientFrame.maxPayload, "a DATA payload of \(payload.readableBytes) bytes is over one frame")
        header(length: payload.readableBytes, type: 0x0, flags: endStream ? 0x1 : 0, stream: stream, into: &buffer)
        var payload = payload
        buffer.writeBuffer(&payload)
    }

    public static func windowUpdate(stream: UInt32, increment: Int, into buffer: inout ByteBuffer) {
        header(length: 4, type: 0x8, flags: 0, stream: stream, into: &buffer)
        buffer.writeInteger(UInt32(increment))
    }

    public static func pingAck(_ payload: UInt64, into buffer: inout ByteBuffer) {
        header(length: 8, type: 0x6, flags: 0x1, stream: 0, into: &buffer)
        buffer.writeInteger(payload)
    }

    public static func rstStream(stream: UInt32, code: UInt32, into buffer: inout ByteBuffer) {
        header(length: 4, type: 0x3, flags: 0, stream: stream, into: &buffer)
        buffer.writeInteger(code)
    }

    private static func header(length: Int, type: UInt8, flags: UInt8, stream: UInt32, into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt16(length >> 8))
        buffer.writeInteger(UInt8(length & 0xFF))
        buffer.writeInteger(type)
        buffer.writeInteger(flags)
        buffer.writeInteger(stream & 0x7FFF_FFFF)
    }
}
