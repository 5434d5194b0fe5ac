import DequeModule
import Logging
import Metrics
import NIOCore
import NIOHTTPTypes
import ParleyChat
import ParleyCluster
import ParleyModel

/// Where an event stream's bytes go: the response body of one HTTP/1.1 connection or of one
/// HTTP/2 stream. Everything but `loop` and `closed` is used only on `loop`.
protocol EventStreamSink: AnyObject, Sendable {
    var loop: any EventLoop { get }
    /// The client is still there (the connection is open, the HTTP/2 stream not reset).
    var isActive: Bool { get }
    /// The connection takes more without buffering (on HTTP/2: and the stream's flow-control
    /// window is open).
    var isWritable: Bool { get }
    func write(_ buffer: ByteBuffer)
    func flush()
    /// Ends the response abruptly (the client resumes by cursor).
    func close()
    /// Completes when the client has gone (connection closed, stream reset).
    var closed: EventLoopFuture<Void> { get }
}

/// An HTTP/1.1 response body: body parts written into the connection's channel.
final class ChannelEventSink: EventStreamSink {
    let channel: any Channel
    init(_ channel: any Channel) { self.channel = channel }
    var loop: any EventLoop { channel.eventLoop }
    var isActive: Bool { channel.isActive }
    var isWritable: Bool { channel.isWritable }
    func write(_ buffer: ByteBuffer) { channel.write(HTTPResponsePart.body(buffer), promise: nil) }
    func flush() { channel.flush() }
    func close() { channel.close(promise: nil) }
    var closed: EventLoopFuture<Void> { channel.closeFuture }
}

/// One open event stream, written on its connection's event loop.
///
/// The hub hands it events on that loop (one hop per loop and delivery, not one task per stream
/// and event), and it writes each as a server-sent event straight into the response
/// (``EventStreamSink``), flushing once per batch. What it writes when is its
/// ``EventStreamStateMachine``'s to say: per conversation, messages go out in seq order without
/// duplicates; a message past a gap waits for the seqs before it, which the conversation's owner
/// sends again until this gateway has them; a gap not filled within ``gapMax`` ends the stream,
/// and its client's resume by cursor replays what it missed. The response's task hands it a
/// resume's replay page by page (`replay(_:)`), starts it (`start()`) and waits for its end
/// (`ended`).
///
/// Everything but the constants is touched only on `loop`.
final class LiveEventStream: @unchecked Sendable {
    enum Item {
        case event(ChatEvent, sharedData: [UInt8]?)
        /// The `ready` event, between the replay and the live events.
        case ready
    }

    /// An event as it is written: with its JSON when the hub encoded it once for every stream.
    struct Outgoing {
        var event: ChatEvent
        var sharedData: [UInt8]?
    }

    typealias Order = EventStreamStateMachine<ConversationID, Outgoing>

    let user: UserID
    let sink: any EventStreamSink
    let loop: any EventLoop
    private let logger: Logger
    private let clock: any ClusterClock
    private let pingTicks: Int
    /// Where in the `pingTicks` cycle this stream pings (see ``init``).
    private let pingOffset: Int
    private let unwritableBytesMax: Int
    private let endedPromise: EventLoopPromise<Void>

    private var cursor: StreamCursor
    /// While a resume's replay is written, its events carry the cursor the client resumed from:
    /// the replay goes conversation by conversation, so a later one's newest message may be ahead
    /// of an earlier one's oldest by more than the replay window, and a resume from the middle of
    /// the replay must start it again. `ready` then carries the newest instant replayed.
    private var replayedThrough: StreamCursor?
    private var order: Order
    /// The cursor of what was written while a message waited past a gap: events carry the cursor
    /// from before the gap until it is filled, so that a resume from any of them replays the gap.
    private var cursorPastGap: StreamCursor?
    /// What arrived before ``start()``, in order.
    private var queue = Deque<Item>()
    private var started = false
    private var isEnded = false
    private var needsFlush = false
    private var ticks = 0
    /// Bytes written while the stream could not take them, since it last could.
    private var bytesWhileUnwritable = 0
    /// Since when the client has taken nothing (its HTTP/2 window at 0, or its connection's
    /// buffers full), if it has not since the last tick.
    private var unwritableSince: ContinuousClock.Instant?
    private let unwritableFor: Duration

    /// A client that reads nothing (or holds its HTTP/2 window at 0): once this many bytes were
    /// written while its stream could not take them, the stream ends (its client resumes by
    /// cursor) rather than buffering without bound. Above a replay page's ~512 KiB of text with
    /// its JSON, so that a page written into a full window does not end a stream that is reading.
    static let unwritableBytesMax = 2 << 20
    static let slowStreamsEnded = Counter(label: "parley.gateway.slow_streams_ended")
    static let unfilledGapsEnded = Counter(label: "parley.gateway.unfilled_gap_streams_ended")

    /// How long a message waits past a gap for the seqs before it (the owner resends a batch
    /// after 0.2–2 s) before the stream ends.
    static let gapMax: Duration = .seconds(5)
    /// A stream whose client takes nothing for this long ends (its client resumes by cursor): an
    /// idle stream writes only a ping every 15 s, which would take weeks to pass
    /// ``unwritableBytesMax``, holding its buffers and task all that time.
    static let unwritableFor: Duration = .seconds(60)

    init(
        user: UserID, sink: any EventStreamSink, cursor: StreamCursor, pingTicks: Int, pingOffset: Int = 0,
        unwritableBytesMax: Int = LiveEventStream.unwritableBytesMax, unwritableFor: Duration = LiveEventStream.unwritableFor,
        gapMax: Duration = LiveEventStream.gapMax, clock: any ClusterClock, logger: Logger
    ) {
        self.clock = clock
        self.unwritableFor = unwritableFor
        self.user = user
        self.sink = sink
        self.loop = sink.loop
        self.cursor = cursor
        self.pingTicks = pingTicks
        self.pingOffset = pingOffset
        self.unwritableBytesMax = unwritableBytesMax
        self.logger = logger
        self.order = Order(written: [:], gapMax: gapMax)
        self.endedPromise = sink.loop.makePromise()
        // Weak: an HTTP/1.1 connection may carry many streams, one after another, and its close
        // should not keep the ended ones. A live stream is held by the hub and its response.
        sink.closed.whenComplete { [weak self] _ in self?.end() }
    }

    deinit {
        // A stream dropped before it ended (its response was never written) still completes.
        if !isEnded { endedPromise.succeed(()) }
    }

    /// Completes when the stream has ended: its client went away (connection closed, stream
    /// reset) or read too slowly, or the hub finished it. Nothing is written after that.
    var ended: EventLoopFuture<Void> { endedPromise.futureResult }

    // MARK: Called from anywhere

    /// Writes the replay, then `ready`, then what arrived meanwhile and everything after.
    func start(replay: [ChatEvent]) {
        loop.execute { [self] in
            writeReplay(replay)
            goLive()
        }
    }

    /// Writes a page of a resume's replay (live events wait until ``start()``).
    func replay(_ events: [ChatEvent]) {
        loop.execute { [self] in writeReplay(events) }
    }

    /// After the replay's last page: `ready`, then what arrived meanwhile and everything after.
    func start() {
        loop.execute { [self] in goLive() }
    }

    enum Room {
        /// The client takes more now (its connection or HTTP/2 stream is writable).
        case available
        /// What was written is still waiting for the client.
        case full
        case ended
    }

    func room() -> EventLoopFuture<Room> {
        loop.submit { [self] in isEnded ? .ended : sink.isWritable ? .available : .full }
    }

    /// Ends the stream abruptly (its client resumes by cursor).
    func abort() {
        loop.execute { [self] in close() }
    }

    private func writeReplay(_ events: [ChatEvent]) {
        guard !isEnded, !started else { return }
        var through = replayedThrough ?? cursor
        let now = clock.now
        for event in events {
            through = through.advanced(by: event)
            // One range per conversation, in seq order: only a repeat is left out.
            for out in ordered(Outgoing(event: event, sharedData: nil), now: now) {
                write(ServerSentEvent.frame(for: out.event, user: user, cursor: cursor))
            }
        }
        replayedThrough = through
        flushIfNeeded()
    }

    private func goLive() {
        guard !isEnded, !started else { return }
        if let replayedThrough { cursor = max(cursor, replayedThrough) }
        queue.prepend(.ready)
        started = true
        drain()
        flushIfNeeded()
    }

    /// Ends the stream (the response then completes).
    func finish() {
        loop.execute { [self] in end() }
    }

    // MARK: On the event loop

    /// An event for this stream; the caller flushes after its batch (``flushIfNeeded()``).
    func receive(_ event: ChatEvent, sharedData: [UInt8]?) {
        loop.preconditionInEventLoop()
        guard !isEnded else { return }
        guard started else {
            queue.append(.event(event, sharedData: sharedData))
            return
        }
        for out in ordered(Outgoing(event: event, sharedData: sharedData), now: clock.now) { emit(out) }
    }

    /// A message its sender's request just got back from the conversation's owner, written now
    /// rather than when the conversation's delivery of it comes (that one is then a duplicate):
    /// the send's response and the sender's own event go out in one flush. Only when it cannot
    /// change what the stream sends: the stream is live (its replay written), and the message is
    /// the conversation's next — the one after the last this stream wrote, or its first (seq 1).
    /// A message whose predecessor has not reached this stream is left to the delivery: written
    /// now, it would make that predecessor a duplicate when it came. Returns whether it was
    /// written; the caller flushes.
    @discardableResult
    func receiveAhead(_ message: Message, sharedData: [UInt8]?) -> Bool {
        loop.preconditionInEventLoop()
        guard started, !isEnded else { return false }
        guard order.lastWritten(message.conversationId).map({ $0 + 1 }) ?? 1 == message.seq else { return false }
        for out in ordered(Outgoing(event: .message(message), sharedData: sharedData), now: clock.now) { emit(out) }
        return true
    }

    /// Once a second: end the stream if its client went away, or if a message waited past a gap
    /// for longer than ``gapMax``; every `pingTicks`, a `: ping` — on
    /// the ticks where `ticks + pingOffset` is a multiple of `pingTicks`, so streams given different
    /// offsets ping in different seconds. The hub ticks every stream in the same second; streams
    /// opened together (a load run, every client of a restarted gateway) with one phase all pinged
    /// at once: 1,000 pings every 15 s held the gateway's loop, and a 3,500 msg/s run's delivery
    /// p99 was 132 ms against 27 ms with a phase per stream.
    func tick() {
        loop.preconditionInEventLoop()
        guard !isEnded else { return }
        guard sink.isActive else {
            logger.debug("event stream's client went away", metadata: ["user.id": "\(user)"])
            end()
            return
        }
        if sink.isWritable {
            unwritableSince = nil
        } else {
            let now = clock.now
            let since = unwritableSince ?? now
            unwritableSince = since
            if now - since >= unwritableFor {
                Self.slowStreamsEnded.increment()
                logger.warning("event stream ended: its client took nothing for a while; it resumes by cursor", metadata: [
                    "user.id": "\(user)", "unwritable.for": "\(unwritableFor)",
                ])
                close()
                return
            }
        }
        if order.isWaiting, case .end(let conversation) = order.tick(now: clock.now).first {
            Self.unfilledGapsEnded.increment()
            logger.warning("event stream ended: a gap was not filled in time; its client resumes by cursor", metadata: [
                "user.id": "\(user)", "conversation.id": "\(conversation)", "last.seq": "\(order.lastWritten(conversation) ?? 0)",
            ])
            close()
            return
        }
        ticks += 1
        if started, (ticks + pingOffset) % pingTicks == 0 {
            write(ByteBuffer(string: ": ping\n\n"))
            flushIfNeeded()
        }
    }

    func flushIfNeeded() {
        guard needsFlush, !isEnded else { return }
        needsFlush = false
        sink.flush()
    }

    private func end() {
        guard !isEnded else { return }
        if needsFlush, sink.isActive {
            needsFlush = false
            sink.flush()
        }
        isEnded = true
        queue.removeAll()
        endedPromise.succeed(())
    }

    /// Writes what arrived before the stream started.
    private func drain() {
        let now = clock.now
        while !isEnded, let item = queue.popFirst() {
            switch item {
            case .ready:
                let token = cursor.token
                write(ServerSentEvent.frame(event: "ready", id: token, data: API.ReadyEvent(cursor: token)))
            case .event(let event, let sharedData):
                for out in ordered(Outgoing(event: event, sharedData: sharedData), now: now) { emit(out) }
            }
        }
    }

    /// What to write now that `out` arrived: a message as its conversation's order says (itself
    /// and the ones that waited for it, nothing if it is a repeat or waits past a gap); any other
    /// event as it is.
    private func ordered(_ out: Outgoing, now: ContinuousClock.Instant) -> [Outgoing] {
        guard case .message(let message) = out.event else { return [out] }
        var written: [Outgoing] = []
        for directive in order.received(message.conversationId, seq: message.seq, out, now: now) {
            if case .write(let events) = directive { written += events.map(\.event) }
        }
        return written
    }

    /// Ends the response abruptly, after what was written so far: its client resumes by cursor.
    private func close() {
        flushIfNeeded()
        sink.close()
        end()
    }

    private func emit(_ out: Outgoing) {
        if order.isWaiting {
            cursorPastGap = (cursorPastGap ?? cursor).advanced(by: out.event)
        } else {
            cursor = max(cursor, cursorPastGap ?? cursor).advanced(by: out.event)
            cursorPastGap = nil
        }
        write(ServerSentEvent.frame(for: out.event, user: user, cursor: cursor, sharedData: out.sharedData))
    }

    private func write(_ buffer: ByteBuffer) {
        if sink.isWritable {
            bytesWhileUnwritable = 0
        } else {
            bytesWhileUnwritable += buffer.readableBytes
            if bytesWhileUnwritable > unwritableBytesMax {
                Self.slowStreamsEnded.increment()
                logger.warning("event stream ended: its client reads too slowly; it resumes by cursor", metadata: [
                    "user.id": "\(user)", "unwritten.bytes": "\(bytesWhileUnwritable)",
                ])
                sink.close()
                end()
                return
            }
        }
        sink.write(buffer)
        needsFlush = true
    }
}
