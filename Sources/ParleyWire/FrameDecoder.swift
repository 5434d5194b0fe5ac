import NIOCore

/// Splits the byte stream into frame bodies by their 4-byte length prefix.
///
/// A length over `frameBytesMax` (or zero) is an error before a single byte of the body is
/// buffered: the connection that sent it is closed, and only that one.
public struct FrameDecoder: ByteToMessageDecoder {
    public typealias InboundOut = ByteBuffer

    public let frameBytesMax: Int

    public init(frameBytesMax: Int) {
        self.frameBytesMax = frameBytesMax
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let body = try nextFrame(&buffer) else { return .needMoreData }
        context.fireChannelRead(Self.wrapInboundOut(body))
        return .continue
    }

    /// The next complete frame body, if the buffer holds one.
    public func nextFrame(_ buffer: inout ByteBuffer) throws(FrameError) -> ByteBuffer? {
        guard let length: UInt32 = buffer.getInteger(at: buffer.readerIndex) else { return nil }
        guard length > 0, Int(length) <= frameBytesMax else {
            throw FrameError(message: "frame length \(length) outside 1...\(frameBytesMax)")
        }
        guard buffer.readableBytes >= 4 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 4)
        return buffer.readSlice(length: Int(length))
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }
}
