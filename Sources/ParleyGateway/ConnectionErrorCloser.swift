import NIOCore

/// Finds GOAWAY frames in the bytes an HTTP/2 endpoint writes, frame by frame. No IO.
///
/// Fed every outbound byte in order (the connection preface is the client's, so a server's bytes
/// are frames from the first), it tracks frame boundaries: each 9-byte header gives the payload
/// length to skip, and a GOAWAY's payload (on stream 0) yields its error code.
struct OutboundGoAwayScanner {
    /// Bytes of the current frame header seen (0–9; 9 means within the payload).
    private var headerSeen = 0
    private var length = 0
    private var type: UInt8 = 0
    private var stream: UInt32 = 0
    private var payloadLeft = 0
    /// Within a GOAWAY's payload: its bytes seen so far (the error code is bytes 4–7).
    private var goAwaySeen = 0
    private var errorCode: UInt32 = 0

    /// The error codes of the GOAWAY frames that end within `bytes`, in order. No allocation
    /// per frame: it sees every frame the gateway writes.
    mutating func scan(_ bytes: ByteBufferView) -> [UInt32] {
        var found: [UInt32] = []
        var index = bytes.startIndex
        while index < bytes.endIndex {
            if headerSeen < 9 {
                let byte = bytes[index]
                index = bytes.index(after: index)
                switch headerSeen {
                case 0...2: length = length << 8 | Int(byte)
                case 3: type = byte
                case 4: break  // flags
                default: stream = stream << 8 | UInt32(byte)
                }
                headerSeen += 1
                if headerSeen == 9 {
                    payloadLeft = length
                    goAwaySeen = 0
                    errorCode = 0
                    if payloadLeft == 0 { startFrame() }
                }
                continue
            }
            let isGoAway = type == 0x7 && stream & 0x7fff_ffff == 0
            let take = isGoAway && goAwaySeen < 8 ? 1 : min(payloadLeft, bytes.distance(from: index, to: bytes.endIndex))
            if isGoAway && goAwaySeen < 8 {
                if goAwaySeen >= 4 { errorCode = errorCode << 8 | UInt32(bytes[index]) }
                goAwaySeen += 1
            }
            index = bytes.index(index, offsetBy: take)
            payloadLeft -= take
            if payloadLeft == 0 {
                if isGoAway && goAwaySeen == 8 { found.append(errorCode) }
                startFrame()
            }
        }
        return found
    }

    private mutating func startFrame() {
        headerSeen = 0
        length = 0
        stream = 0
    }
}

/// Closes an HTTP/2 connection once a GOAWAY with an error code has been written on it.
///
/// NIOHTTP2Handler answers a connection error (a malformed frame, a protocol violation, a flood)
/// with a GOAWAY and reports the error up the pipeline with the same error types as a stream error,
/// so the handler above cannot tell which it was; RFC 9113 §5.4.1 says the endpoint MUST close the
/// TCP connection after that GOAWAY. This handler sits below NIOHTTP2Handler and watches what it
/// writes: when a write carries a GOAWAY whose error code is not NO_ERROR, the connection is
/// closed as soon as that write has gone out. (The gateway's own graceful GOAWAY at shutdown
/// carries NO_ERROR: the connection drains and closes as before.)
final class ConnectionErrorCloser: ChannelOutboundHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private var scanner = OutboundGoAwayScanner()
    private var closing = false

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard !closing, case .byteBuffer(let buffer) = unwrapOutboundIn(data) else {
            // The gateway writes no file regions; past a close nothing is scanned.
            context.write(data, promise: promise)
            return
        }
        let codes = scanner.scan(buffer.readableBytesView)
        guard codes.contains(where: { $0 != 0 }) else {
            context.write(data, promise: promise)
            return
        }
        closing = true
        let written = context.eventLoop.makePromise(of: Void.self)
        written.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        if let promise { written.futureResult.cascade(to: promise) }
        context.write(data, promise: written)
    }
}
