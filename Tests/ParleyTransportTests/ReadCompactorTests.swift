import NIOCore
import NIOEmbedded
import Testing

@testable import ParleyTransport

/// What a decoder above TLS gets: the bytes of each read, in a buffer of their own size.
@Suite struct ReadCompactorTests {
    @Test func eachReadGoesOnAsACopyOfJustItsBytes() throws {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(ReadCompactor())
        // As NIOSSL hands them up: a few bytes in its 32 KiB read buffer.
        var read = channel.allocator.buffer(capacity: 32 * 1024)
        read.writeString("HEADERS frame of a chat request")
        try channel.writeInbound(read)
        let passed = try #require(try channel.readInbound(as: ByteBuffer.self))
        #expect(String(buffer: passed) == "HEADERS frame of a chat request")
        #expect(passed.capacity < 1024, "the decoder would keep the 32 KiB buffer: capacity \(passed.capacity)")
        let readStart = read.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
        let passedStart = passed.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
        #expect(readStart != passedStart, "the read's own storage went on")
        // An empty read goes on too (as it would without the compactor), empty.
        try channel.writeInbound(channel.allocator.buffer(capacity: 32 * 1024))
        #expect(try channel.readInbound(as: ByteBuffer.self)?.readableBytes == 0)
        #expect(try channel.finish().isClean)
    }
}
