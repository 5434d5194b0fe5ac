import NIOCore

/// Finds GOAWAY frames in the bytes an HTTP/2 endpoint writes, frame by frame. No IO.
///
/// Fed every outbound byte in order (the connection preface is the client's, so a server's bytes
/// are frames from the first), it tracks frame boundaries: each 9-byte header gives the payload
/// length to skip, and a GOAWAY's payload (on stream 0) yields its error code.
struct OutboundGoAwayScanner {
    private enum State {
        /// Collecting a frame header (9 bytes).
        case header([UInt8])
        /// Skipping a payload; for a GOAWAY, keeping its first 8 bytes (last stream ID, error code).
        case payload(left: Int, goAway: [UInt8]?)
    }

    private var state = State.header([])

    /// The error codes of the GOAWAY frames that end within `bytes`, in order.
    mutating func scan(_ bytes: ByteBufferView) -> [UInt32] {
        var found: [UInt32] = []
        var index = bytes.startIndex
        while index < bytes.endIndex {
            switch state {
            case .header(var header):
                header.append(bytes[index])
                index = bytes.index(after: index)
                guard header.count == 9 else {
                    state = .header(header)
                    continue
                }
                let length = Int(header[0]) << 16 | Int(header[1]) << 8 | Int(header[2])
                let onStreamZero = header[5] & 0x7f == 0 && header[6] == 0 && header[7] == 0 && header[8] == 0
                state = length == 0 ? .header([]) : .payload(left: length, goAway: header[3] == 0x7 && onStreamZero ? [] : nil)
            case .payload(var left, var goAway):
                let take = min(left, bytes.distance(from: index, to: bytes.endIndex))
                if var prefix = goAway, prefix.count < 8 {
                    prefix.append(contentsOf: bytes[index..<bytes.index(index, offsetBy: min(take, 8 - prefix.count))])
                    goAway = prefix
                }
                index = bytes.index(index, offsetBy: take)
                left -= take
                guard left == 0 else {
                    state = .payload(left: left, goAway: goAway)
                    continue
                }
                if let prefix = goAway, prefix.count == 8 {
                    found.append(UInt32(prefix[4]) << 24 | UInt32(prefix[5]) << 16 | UInt32(prefix[6]) << 8 | UInt32(prefix[7]))
                }
                state = .header([])
            }
        }
        return found
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
        written.futureResult.whenComplete { _ in context.close(promise: nil) }
        if let promise { written.futureResult.cascade(to: promise) }
        context.write(data, promise: written)
    }
}
