import NIOCore
import ParleyCluster
import ParleyWire
import Synchronization

/// One TLS connection to a peer: what callers write to. Writes are encoded on the caller's
/// thread and handed to the event loop, which flushes once per loop turn.
final class ClusterConnection: Sendable, Hashable {
    let channel: any Channel
    let direction: ConnectionTable<ObjectIdentifier>.Direction
    /// For an outbound connection: the address dialed.
    let dialedAddress: NodeAddress?
    let serial: UInt64
    /// Bytes handed to the event loop and not yet written into the channel.
    private let queuedBytes = Atomic<Int>(0)
    private let handler: NIOLoopBound<ClusterConnectionHandler>

    init(channel: any Channel, direction: ConnectionTable<ObjectIdentifier>.Direction, dialedAddress: NodeAddress?, serial: UInt64, handler: ClusterConnectionHandler) {
        self.channel = channel
        self.direction = direction
        self.dialedAddress = dialedAddress
        self.serial = serial
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
    }

    var key: ObjectIdentifier { ObjectIdentifier(self) }

    /// Room for more: the channel is writable and little is waiting to reach it.
    func hasRoom(outboundBytesMax: Int) -> Bool {
        channel.isWritable && queuedBytes.load(ordering: .relaxed) < outboundBytesMax
    }

    /// Returns once the connection may have room — the channel became writable, or closed — or
    /// after `timeout`. Looked at on the event loop, behind the writes already handed to it, so
    /// that those are in the channel (and count against its writability) first.
    func waitForRoom(outboundBytesMax: Int, timeout: TimeAmount) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            channel.eventLoop.execute { [self] in
                guard !hasRoom(outboundBytesMax: outboundBytesMax) else { return continuation.resume() }
                let answered = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
                let timer = channel.eventLoop.assumeIsolated().scheduleTask(in: timeout) {
                    guard !answered.value else { return }
                    answered.value = true
                    continuation.resume()
                }
                handler.value.whenWritable {
                    guard !answered.value else { return }
                    answered.value = true
                    timer.cancel()
                    continuation.resume()
                }
            }
        }
    }

    /// Queues an encoded frame (length prefix included).
    func write(_ frame: ByteBuffer) {
        let count = frame.readableBytes
        queuedBytes.add(count, ordering: .relaxed)
        if channel.eventLoop.inEventLoop {
            handler.value.writeFrame(frame)
            queuedBytes.subtract(count, ordering: .relaxed)
        } else {
            channel.eventLoop.execute { [self] in
                handler.value.writeFrame(frame)
                queuedBytes.subtract(count, ordering: .relaxed)
            }
        }
    }

    func close() {
        channel.close(promise: nil)
    }

    static func == (lhs: ClusterConnection, rhs: ClusterConnection) -> Bool { lhs === rhs }
    func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
