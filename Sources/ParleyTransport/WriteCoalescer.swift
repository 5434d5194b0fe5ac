import NIOCore

/// Joins the small buffers written between two flushes into one, in order, before they reach TLS.
///
/// NIOSSL seals every buffer it is handed as a TLS record of its own, and NIOHTTP2 hands it two per
/// DATA frame (the frame's header, then the payload, uncopied): a send's response with the sender's
/// own event was five records, each sealed by the server and opened by the client. Joined, a flush
/// is one record (up to TLS's 16 KiB each). The copy is of the bytes a flush carries, a few hundred
/// for a chat event; a buffer of `passThroughBytes` or more is not copied but passed on as it is,
/// after what was joined before it.
///
/// Nothing is held past a flush or a close: the bytes go on then, as they would have, and NIOSSL,
/// below, waits for the flush as before.
public final class WriteCoalescer: ChannelOutboundHandler, RemovableChannelHandler {
    public typealias OutboundIn = IOData
    public typealias OutboundOut = IOData

    /// Buffers this large go on uncopied.
    public static let passThroughBytes = 8 * 1024

    private var joined: ByteBuffer?
    /// The promises of the writes in `joined` (usually none: the HTTP/2 and cluster writers pass
    /// none), completed with its write.
    private var promises: [EventLoopPromise<Void>] = []

    public init() {}

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .byteBuffer(var buffer) = unwrapOutboundIn(data), buffer.readableBytes < Self.passThroughBytes else {
            writeJoined(context: context)
            context.write(data, promise: promise)
            return
        }
        var target = joined ?? context.channel.allocator.buffer(capacity: 1024)
        joined = nil  // one owner while it grows: no copy-on-write
        target.writeBuffer(&buffer)
        joined = target
        if let promise { promises.append(promise) }
    }

    public func flush(context: ChannelHandlerContext) {
        writeJoined(context: context)
        context.flush()
    }

    public func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        writeJoined(context: context)
        context.close(mode: mode, promise: promise)
    }

    /// Taken out of a live pipeline: what was joined goes on first.
    public func removeHandler(context: ChannelHandlerContext, removalToken: ChannelHandlerContext.RemovalToken) {
        writeJoined(context: context)
        context.leavePipeline(removalToken: removalToken)
    }

    /// Removed with its channel (closed): bytes never flushed are dropped, as NIOSSL drops its own.
    public func handlerRemoved(context: ChannelHandlerContext) {
        joined = nil
        let unwritten = promises
        promises = []
        for promise in unwritten { promise.fail(ChannelError.ioOnClosedChannel) }
    }

    private func writeJoined(context: ChannelHandlerContext) {
        guard let buffer = joined else { return }
        joined = nil
        let promise: EventLoopPromise<Void>?
        switch promises.count {
        case 0:
            promise = nil
        case 1:
            promise = promises[0]
        default:
            let all = context.eventLoop.makePromise(of: Void.self)
            for each in promises { all.futureResult.cascade(to: each) }
            promise = all
        }
        promises.removeAll(keepingCapacity: true)
        context.write(wrapOutboundOut(.byteBuffer(buffer)), promise: promise)
    }
}
