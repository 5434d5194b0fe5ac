import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import ParleyHTTP2Client
import Testing

/// Parley's own HTTP/2 client framing against NIOHTTP2's server (the gateway's), and on frames that
/// server does not send but a peer may (padding, CONTINUATION), and on broken ones.
@Suite struct HTTP2ClientFramesTests {
    /// NIOHTTP2's server, answering every request `201` with its body echoed.
    final class EchoServer: ChannelInboundHandler {
        typealias InboundIn = HTTP2Frame
        typealias OutboundOut = HTTP2Frame
        private var bodies: [HTTP2StreamID: ByteBuffer] = [:]

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let frame = unwrapInboundIn(data)
            switch frame.payload {
            case .headers(let headers):
                bodies[frame.streamID] = ByteBuffer()
                if headers.endStream { answer(frame.streamID, context: context) }
            case .data(let payload):
                if case .byteBuffer(var bytes) = payload.data { bodies[frame.streamID]?.writeBuffer(&bytes) }
                if payload.endStream { answer(frame.streamID, context: context) }
            default:
                break
            }
        }

        private func answer(_ stream: HTTP2StreamID, context: ChannelHandlerContext) {
            let body = bodies.removeValue(forKey: stream) ?? ByteBuffer()
            let headers = HPACKHeaders([(":status", "201"), ("content-length", String(body.readableBytes))])
            context.write(wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .headers(.init(headers: headers)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .data(.init(data: .byteBuffer(body), endStream: true)))), promise: nil)
        }
    }

    func server() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .server, initialSettings: [HTTP2Setting(parameter: .maxConcurrentStreams, value: 100)]))
        try channel.pipeline.syncOperations.addHandler(EchoServer())
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()  // active: the server sends its SETTINGS
        return channel
    }

    /// The preface, SETTINGS and a POST on stream 1, as the client writes them.
    func request(body: String, encoder: inout HPACKEncoder) throws -> ByteBuffer {
        var bytes = ByteBuffer(bytes: HTTP2ClientFrame.preface)
        HTTP2ClientFrameWriter.settings([.init(HTTP2ClientFrame.Setting.enablePush, 0)], into: &bytes)
        let headers = HPACKHeaders([(":method", "POST"), (":scheme", "https"), (":authority", "localhost"), (":path", "/v1/x"), ("content-length", String(body.utf8.count))])
        try HTTP2ClientFrameWriter.headers(stream: 1, endStream: false, into: &bytes) { try encoder.encode(headers: headers, to: &$0) }
        HTTP2ClientFrameWriter.data(stream: 1, payload: ByteBuffer(string: body), endStream: true, into: &bytes)
        return bytes
    }

    func frames(from channel: EmbeddedChannel, bytesAtATime chunk: Int = .max) throws -> [HTTP2ClientFrame] {
        var reader = HTTP2ClientFrameReader()
        var frames: [HTTP2ClientFrame] = []
        while var bytes = try channel.readOutbound(as: ByteBuffer.self) {
            while bytes.readableBytes > 0, var piece = bytes.readSlice(length: min(chunk, bytes.readableBytes)) {
                reader.append(&piece)
                while let frame = try reader.next() { frames.append(frame) }
            }
        }
        return frames
    }

    @Test(arguments: [Int.max, 1, 7])
    func aRequestIsAnsweredByNIOHTTP2sServer(bytesAtATime chunk: Int) throws {
        let server = try server()
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        try server.writeInbound(try request(body: "hello", encoder: &encoder))
        let frames = try frames(from: server, bytesAtATime: chunk)
        #expect(frames.contains(.settings(ack: false, values: [.init(HTTP2ClientFrame.Setting.maxConcurrentStreams, 100)])))
        #expect(frames.contains(.settings(ack: true, values: [])), "the server acknowledged the client's SETTINGS")
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        let answer = frames.compactMap { frame -> HPACKHeaders? in
            guard case .headers(stream: 1, var block, endStream: false) = frame else { return nil }
            return try? decoder.decodeHeaders(from: &block)
        }
        #expect(answer.first?.first(name: ":status") == "201")
        #expect(frames.contains(.data(stream: 1, payload: ByteBuffer(string: "hello"), endStream: true, flowControlled: 5)))
        #expect(!frames.contains { if case .goAway = $0 { true } else { false } }, "the server found nothing wrong: \(frames)")
        _ = try server.finish()
    }

    /// Raw frames a peer may send though NIOHTTP2's server does not.
    func raw(length: Int, type: UInt8, flags: UInt8, stream: UInt32, _ payload: [UInt8]) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt16(length >> 8))
        buffer.writeInteger(UInt8(length & 0xFF))
        buffer.writeInteger(type)
        buffer.writeInteger(flags)
        buffer.writeInteger(stream)
        buffer.writeBytes(payload)
        return buffer
    }

    func read(_ buffers: [ByteBuffer]) throws -> [HTTP2ClientFrame] {
        var reader = HTTP2ClientFrameReader()
        var frames: [HTTP2ClientFrame] = []
        for var buffer in buffers {
            reader.append(&buffer)
            while let frame = try reader.next() { frames.append(frame) }
        }
        return frames
    }

    @Test func paddingIsRemovedAndCountedAgainstTheWindow() throws {
        // DATA, PADDED: pad length 3, "ab", 3 bytes of padding.
        let frames = try read([raw(length: 6, type: 0x0, flags: 0x8 | 0x1, stream: 3, [3, 0x61, 0x62, 0, 0, 0])])
        #expect(frames == [.data(stream: 3, payload: ByteBuffer(string: "ab"), endStream: true, flowControlled: 6)])
    }

    @Test func aHeaderBlockInContinuationsArrivesWhole() throws {
        let frames = try read([
            raw(length: 2, type: 0x1, flags: 0x1, stream: 5, [0x88, 0x89]),  // HEADERS, END_STREAM, no END_HEADERS
            raw(length: 1, type: 0x9, flags: 0, stream: 5, [0x8A]),
            raw(length: 1, type: 0x9, flags: 0x4, stream: 5, [0x8B]),
        ])
        #expect(frames == [.headers(stream: 5, block: ByteBuffer(bytes: [0x88, 0x89, 0x8A, 0x8B]), endStream: true)])
    }

    @Test func brokenFramesAreConnectionErrors() throws {
        #expect(throws: HTTP2ClientProtocolError.self, "over the frame size") { try read([raw(length: 16_385, type: 0x0, flags: 0, stream: 1, [])]) }
        #expect(throws: HTTP2ClientProtocolError.self, "a CONTINUATION of another stream") {
            try read([raw(length: 1, type: 0x1, flags: 0, stream: 1, [0x88]), raw(length: 1, type: 0x9, flags: 0x4, stream: 3, [0x88])])
        }
        #expect(throws: HTTP2ClientProtocolError.self, "more padding than payload") { try read([raw(length: 2, type: 0x0, flags: 0x8, stream: 1, [5, 0])]) }
        #expect(throws: HTTP2ClientProtocolError.self, "push is disabled") { try read([raw(length: 4, type: 0x5, flags: 0x4, stream: 1, [0, 0, 0, 2])]) }
        #expect(throws: HTTP2ClientProtocolError.self, "a PING of 4 bytes") { try read([raw(length: 4, type: 0x6, flags: 0, stream: 0, [0, 0, 0, 0])]) }
        #expect(try read([raw(length: 3, type: 0xEE, flags: 0, stream: 0, [1, 2, 3])]) == [.ignored], "an unknown type is ignored")
    }
}
