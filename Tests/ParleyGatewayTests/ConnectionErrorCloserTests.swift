import NIOCore
import NIOEmbedded
import NIOHTTP2
import Testing
@testable import ParleyGateway

/// After a connection error the gateway closes the connection (RFC 9113 §5.4.1), and only then.
@Suite struct ConnectionErrorCloserTests {
    static func frame(type: UInt8, stream: UInt32 = 0, _ payload: [UInt8] = []) -> [UInt8] {
        let length = UInt32(payload.count)
        return [UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff), type, 0]
            + [UInt8(stream >> 24), UInt8(stream >> 16 & 0xff), UInt8(stream >> 8 & 0xff), UInt8(stream & 0xff)] + payload
    }

    static func goAway(errorCode: UInt32, lastStream: [UInt8] = [0, 0, 0, 3], debug: [UInt8] = []) -> [UInt8] {
        frame(type: 0x7, lastStream + [UInt8(errorCode >> 24), UInt8(errorCode >> 16 & 0xff), UInt8(errorCode >> 8 & 0xff), UInt8(errorCode & 0xff)] + debug)
    }

    /// GOAWAYs are found by frame boundaries, however the bytes are split into writes; bytes inside
    /// another frame's payload that look like a GOAWAY are not one.
    @Test func theScannerFindsGoAwaysAcrossAnySplitAndNotInsidePayloads() {
        let lookalike = Self.goAway(errorCode: 1)
        let bytes = Self.frame(type: 0x4, [0, 3, 0, 0, 0, 100])
            + Self.frame(type: 0x0, stream: 1, lookalike + lookalike)
            + Self.goAway(errorCode: 0)
            + Self.frame(type: 0x6, [UInt8](repeating: 7, count: 8))
            + Self.goAway(errorCode: 2, debug: Array("flood".utf8))
            + Self.frame(type: 0x4, stream: 0)
            + Self.goAway(errorCode: 0x0a0b_0c0d, lastStream: [0x7f, 0xff, 0xff, 0xff])
        for chunkSize in 1...bytes.count {
            var scanner = OutboundGoAwayScanner()
            var found: [UInt32] = []
            var offset = 0
            while offset < bytes.count {
                let chunk = ByteBuffer(bytes: bytes[offset..<min(bytes.count, offset + chunkSize)])
                found += scanner.scan(chunk.readableBytesView)
                offset += chunkSize
            }
            #expect(found == [0, 2, 0x0a0b_0c0d], "chunks of \(chunkSize) bytes")
        }
    }

    static func serverChannel() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(ConnectionErrorCloser())
        try channel.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .server))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    static func clientPreface() -> [UInt8] {
        Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + frame(type: 0x4)
    }

    /// All the bytes the server wrote so far.
    static func written(_ channel: EmbeddedChannel) throws -> [UInt8] {
        var bytes: [UInt8] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { bytes += buffer.readableBytesView }
        return bytes
    }

    /// A DATA frame on stream 0 is a connection error: NIOHTTP2Handler answers with a GOAWAY
    /// (PROTOCOL_ERROR), and the connection is closed once that is written.
    @Test func aConnectionErrorClosesTheConnectionAfterItsGoAway() throws {
        let channel = try Self.serverChannel()
        try channel.writeInbound(ByteBuffer(bytes: Self.clientPreface()))
        #expect(channel.isActive, "a well-formed preface keeps the connection")
        _ = try? channel.writeInbound(ByteBuffer(bytes: Self.frame(type: 0x0, stream: 0, [1])))
        var scanner = OutboundGoAwayScanner()
        #expect(scanner.scan(ByteBuffer(bytes: try Self.written(channel)).readableBytesView) == [1], "a GOAWAY with PROTOCOL_ERROR was sent")
        #expect(!channel.isActive, "the connection was closed after it")
    }

    /// The gateway's own graceful GOAWAY (NO_ERROR, at shutdown) leaves the connection to drain.
    @Test func aGracefulGoAwayLeavesTheConnectionOpen() throws {
        let channel = try Self.serverChannel()
        try channel.writeInbound(ByteBuffer(bytes: Self.clientPreface()))
        try channel.writeAndFlush(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: .rootStream, errorCode: .noError, opaqueData: nil))).wait()
        var scanner = OutboundGoAwayScanner()
        #expect(scanner.scan(ByteBuffer(bytes: try Self.written(channel)).readableBytesView) == [0], "a GOAWAY with NO_ERROR was sent")
        #expect(channel.isActive, "the connection stays open to drain")
        _ = try? channel.finish()
    }
}
