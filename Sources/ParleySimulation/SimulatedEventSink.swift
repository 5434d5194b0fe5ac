import Foundation
import NIOCore
import ParleyGateway
import Synchronization

/// A simulated client's event stream response, as the gateway writes it: what is flushed reaches
/// the client at once, read as server-sent events (``Frame``); what was written and not flushed
/// when the stream is closed never does. The client reads everything, so the sink is always
/// writable. Touched on its loop only, except ``clientGone()``.
final class SimulatedEventSink: EventStreamSink, @unchecked Sendable {
    /// One server-sent event as the client reads it.
    struct Frame {
        var event: String
        var id: String?
        var data: String
    }

    let loop: any EventLoop
    private let read: @Sendable ([Frame]) -> Void
    private let closedPromise: EventLoopPromise<Void>
    private var unflushed: [ByteBuffer] = []
    private var open = true
    /// Whether the gateway ended the response abruptly (a gap, a slow reader), rather than the
    /// client leaving or the response completing.
    private(set) var closedByGateway = false

    init(loop: any EventLoop, read: @escaping @Sendable ([Frame]) -> Void) {
        self.loop = loop
        self.read = read
        self.closedPromise = loop.makePromise()
    }

    var isActive: Bool { open }
    var isWritable: Bool { true }

    func write(_ buffer: ByteBuffer) {
        if open { unflushed.append(buffer) }
    }

    func flush() {
        guard open, !unflushed.isEmpty else { return }
        let text = unflushed.map { String(buffer: $0) }.joined()
        unflushed = []
        read(Self.frames(in: text))
    }

    func close() {
        guard open else { return }
        closedByGateway = true
        end()
    }

    var closed: EventLoopFuture<Void> { closedPromise.futureResult }

    func whenWritable(_ action: @escaping () -> Void) { action() }

    /// The client went away (its connection broke, its gateway died): nothing more reaches it.
    func clientGone() {
        loop.execute { [self] in
            guard open else { return }
            end()
        }
    }

    private func end() {
        open = false
        unflushed = []
        closedPromise.succeed(())
    }

    /// The events in `text`, in order; comments (pings) left out.
    static func frames(in text: String) -> [Frame] {
        text.components(separatedBy: "\n\n").compactMap { block in
            var frame = Frame(event: "message", id: nil, data: "")
            var any = false
            for line in block.split(separator: "\n", omittingEmptySubsequences: true) where !line.hasPrefix(":") {
                any = true
                if line.hasPrefix("event: ") { frame.event = String(line.dropFirst(7)) }
                if line.hasPrefix("id: ") { frame.id = String(line.dropFirst(4)) }
                if line.hasPrefix("data: ") { frame.data += String(line.dropFirst(6)) }
            }
            return any ? frame : nil
        }
    }
}
