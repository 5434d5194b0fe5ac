import NIOCore

/// Hands on each buffer read from TLS as a copy of just its bytes, so that nothing above keeps
/// NIOSSL's read buffer.
///
/// NIOSSL decrypts every read into one 32 KiB buffer per connection and passes it up; a frame
/// decoder above (NIOHTTP2's, NIO's `ByteToMessageHandler`) keeps what it was given until the next
/// read, even when all of it was parsed. So every idle connection held two 32 KiB buffers (NIOSSL's
/// own and the one the decoder kept), and every read allocated a fresh 32 KiB one, because NIOSSL's
/// was shared. With the copy, the decoder keeps a buffer the size of the last read (a few hundred
/// bytes for a chat request) and NIOSSL reuses its own: 32 KiB less per idle client connection,
/// and one allocation per read the size of the read instead of 32 KiB.
public final class ReadCompactor: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ByteBuffer

    public init() {}

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var read = unwrapInboundIn(data)
        var copy = context.channel.allocator.buffer(capacity: read.readableBytes)
        copy.writeBuffer(&read)
        context.fireChannelRead(wrapInboundOut(copy))
    }
}
