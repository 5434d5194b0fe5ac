import ParleyModel
import NIOCore
import NIOEmbedded
import ParleyCluster
import ParleyTestKit
import Testing

@testable import ParleyTransport
@testable import ParleyWire

@Suite struct FrameTests {
    static let identity = PeerIdentity(id: NodeID(name: "worker-1", incarnation: 1_700_000_000_123), roles: [.worker, .gateway], address: NodeAddress(host: "127.0.0.1", port: 7001))

    static let samples: [Frame] = [
        .hello(Hello(identity: identity)),
        .helloAccepted(Hello(identity: identity)),
        .helloRejected("duplicate connection"),
        .message(.call(CallEnvelope(
            callID: 42, recipient: ClusterActorID(kind: "conversation", key: "8f3a"), target: "$s4Test4pingyS2iFTE",
            arguments: [[1, 2, 3], [], Array("héllo".utf8)], timeout: .milliseconds(4999)))),
        .message(.call(CallEnvelope(
            callID: .max, recipient: ClusterActorID(kind: "delivery", key: "x", node: "gateway-1"), target: "t",
            arguments: [], timeout: .zero))),
        .message(.reply(ReplyEnvelope(callID: 42, outcome: .value([9, 8, 7])))),
        .message(.reply(ReplyEnvelope(callID: 43, outcome: .void))),
        .message(.reply(ReplyEnvelope(callID: 44, outcome: .error(ClusterCallError(code: .notOwner, message: "moved to worker-2")))))
        ,
        .message(.gossip(Gossip(from: identity.id, members: [
            Member(id: identity.id, address: identity.address, roles: identity.roles, status: .up),
            Member(id: NodeID(name: "worker-2", incarnation: 7), address: NodeAddress(host: "::1", port: 7002), roles: .worker, status: .down),
        ], heartbeats: [41, .max]))),
    ]

    static func stream(_ frames: [Frame]) -> ByteBuffer {
        var all = ByteBuffer()
        for frame in frames {
            var encoded = frame.encoded(allocator: ByteBufferAllocator())
            all.writeBuffer(&encoded)
        }
        return all
    }

    /// Feeds `bytes` to a decoder in chunks of the given sizes and decodes every frame that comes out.
    static func decode(_ bytes: ByteBuffer, chunks: some Sequence<Int>) throws -> [Frame] {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(FrameDecoder(frameBytesMax: 1 << 20)))
        var rest = bytes
        var sizes = chunks.makeIterator()
        while rest.readableBytes > 0 {
            let size = min(max(1, sizes.next() ?? 1), rest.readableBytes)
            try channel.writeInbound(rest.readSlice(length: size)!)
        }
        var frames: [Frame] = []
        while var body = try channel.readInbound(as: ByteBuffer.self) {
            frames.append(try Frame(decoding: &body))
        }
        #expect(try channel.finish().isClean)
        return frames
    }

    @Test func everyFrameSurvivesTheRoundTrip() throws {
        #expect(try Self.decode(Self.stream(Self.samples), chunks: [Int.max]) == Self.samples)
    }

    @Test func byteByByteGivesTheSameFrames() throws {
        #expect(try Self.decode(Self.stream(Self.samples), chunks: repeatElement(1, count: .max)) == Self.samples)
    }

    @Test(arguments: [UInt64(7), 99, 2026])
    func randomChunksGiveTheSameFrames(seed: UInt64) throws {
        var random = SeededRandom(seed: seed)
        let sizes = (0..<10_000).map { _ in Int.random(in: 1...40, using: &random) }
        #expect(try Self.decode(Self.stream(Self.samples), chunks: sizes) == Self.samples, "seed \(seed)")
    }

    @Test func anOversizedLengthPrefixIsAnErrorBeforeAnyBodyIsBuffered() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(FrameDecoder(frameBytesMax: 1024)))
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt32(1025))
        #expect(throws: FrameError.self) { try channel.writeInbound(buffer) }
        _ = try? channel.finish()
    }

    @Test func aZeroLengthFrameIsAnError() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(FrameDecoder(frameBytesMax: 1024)))
        #expect(throws: FrameError.self) { try channel.writeInbound(ByteBuffer(bytes: [0, 0, 0, 0])) }
        _ = try? channel.finish()
    }

    @Test(arguments: [
        [UInt8](),  // no type
        [99],  // unknown type
        [1, 0],  // truncated hello
        [4, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff],  // call whose string length runs past the end
        [5, 0, 0, 0, 0, 0, 0, 0, 1, 7],  // unknown reply kind
        [6, 0, 0, 0, 1, 0x61, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff],  // gossip claiming 2 billion members
        [3, 0, 0, 0, 1, 0x61, 0x62],  // bytes left over after the frame
    ])
    func garbageBodiesAreRejectedNotTrusted(bytes: [UInt8]) {
        var body = ByteBuffer(bytes: bytes)
        #expect(throws: FrameError.self) { try Frame(decoding: &body) }
    }

    @Test func randomBytesNeverCrashTheDecoder() {
        var random = SeededRandom(seed: 5)
        for _ in 0..<20_000 {
            var bytes = (0..<Int.random(in: 0...64, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            if !bytes.isEmpty { bytes[0] = UInt8.random(in: 1...6, using: &random) }
            var body = ByteBuffer(bytes: bytes)
            _ = try? Frame(decoding: &body)
        }
    }
}
