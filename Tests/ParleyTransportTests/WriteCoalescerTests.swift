import NIOCore
import NIOEmbedded
import Testing

@testable import ParleyTransport

/// What reaches TLS: the buffers written between two flushes, joined in order, once flushed.
@Suite struct WriteCoalescerTests {
    static func channel() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(WriteCoalescer())
        return channel
    }

    static func bytes(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    /// Everything the channel wrote out, one string per buffer.
    static func written(_ channel: EmbeddedChannel) throws -> [String] {
        var out: [String] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { out.append(String(buffer: buffer)) }
        return out
    }

    @Test func theWritesOfAFlushGoOnAsOneBufferInOrderWithTheirPromises() throws {
        let channel = try Self.channel()
        let first = channel.eventLoop.makePromise(of: Void.self)
        let second = channel.eventLoop.makePromise(of: Void.self)
        var completed = 0
        first.futureResult.whenSuccess { completed += 1 }
        second.futureResult.whenSuccess { completed += 1 }
        channel.write(Self.bytes("frame-header|"), promise: first)
        channel.write(Self.bytes("payload|"), promise: nil)
        channel.write(Self.bytes("next-frame"), promise: second)
        #expect(try Self.written(channel).isEmpty, "nothing goes on before the flush")
        #expect(completed == 0)
        channel.flush()
        #expect(try Self.written(channel) == ["frame-header|payload|next-frame"])
        #expect(completed == 2)
        // The next flush starts afresh.
        channel.writeAndFlush(Self.bytes("alone"), promise: nil)
        #expect(try Self.written(channel) == ["alone"])
        #expect(try channel.finish().isClean)
    }

    @Test func aLargeBufferIsPassedOnUncopiedAfterWhatCameBeforeIt() throws {
        let channel = try Self.channel()
        let large = String(repeating: "x", count: WriteCoalescer.passThroughBytes)
        channel.write(Self.bytes("a"), promise: nil)
        channel.write(Self.bytes("b"), promise: nil)
        channel.write(Self.bytes(large), promise: nil)
        channel.write(Self.bytes("c"), promise: nil)
        channel.flush()
        #expect(try Self.written(channel) == ["ab", large, "c"])
        #expect(try channel.finish().isClean)
    }

    /// Records the writes that pass it (flushed or not), on the TLS side of the coalescer.
    final class WriteRecorder: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
        var seen: [String] = []
        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            seen.append(String(buffer: unwrapOutboundIn(data)))
            context.write(data, promise: promise)
        }
    }

    @Test func aCloseSendsWhatWasJoinedFirst() throws {
        let channel = EmbeddedChannel()
        let recorder = WriteRecorder()
        try channel.pipeline.syncOperations.addHandler(recorder)
        try channel.pipeline.syncOperations.addHandler(WriteCoalescer())
        channel.write(Self.bytes("last "), promise: nil)
        channel.write(Self.bytes("words"), promise: nil)
        #expect(recorder.seen.isEmpty)
        try channel.close().wait()
        #expect(recorder.seen == ["last words"])
    }

    @Test func takenOutOfALivePipelineItPassesOnWhatItHeld() throws {
        let channel = try Self.channel()
        channel.write(Self.bytes("held"), promise: nil)
        let handler = try channel.pipeline.syncOperations.handler(type: WriteCoalescer.self)
        try channel.pipeline.syncOperations.removeHandler(handler).wait()
        channel.flush()
        channel.writeAndFlush(Self.bytes("after"), promise: nil)
        #expect(try Self.written(channel) == ["held", "after"])
        #expect(try channel.finish().isClean)
    }
}
