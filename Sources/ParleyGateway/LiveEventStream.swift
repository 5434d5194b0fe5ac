import DequeModule
import Logging
import Metrics
import NIOCore
import NIOHTTPTypes
@_spi(Testing) import ParleyChat
import ParleyCluster
import ParleyModel

/// Where an event stream's bytes go: the response body of one HTTP/1.1 connection or of one
/// HTTP/2 stream. Everything but `loop` and `closed` is used only on `loop`.
package protocol EventStreamSink: AnyObject, Sendable {
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
    /// Runs `action` once the sink takes more without buffering, or is over (at once if it is
    /// either now).
    func whenWritable(_ action: @escaping () -> Void)
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
    func whenWritable(_ action: @escaping () -> Void) {
        // The connection's first handler sees its writability change; a channel without one (a
        // test's) is woken only by its close.
        if let watcher = try? channel.pipeline.syncOperations.handler(type: StalledConnectionCloser.self) {
            watcher.whenWritable(channel, action)
        } else if channel.isWritable || !channel.isActive {
            action()
        } else {
            channel.closeFuture.whenComplete { _ in action() }
        }
    }
}

/// One open event stream, written on its connection's event loop: the shell of a
/// ``StreamSessionStateMachine``, which decides what is written when, with which cursor, and when
/// the stream ends; this carries its actions out on the response (``EventStreamSink``) and reports
/// what happened.
///
/// The hub hands it events on that loop (one hop per loop and delivery, not one task per stream
/// and event), and it writes each as a server-sent event straight into the response, flushing once
/// per batch. The response's task hands it a resume's replay page by page (`replay(_:)`), starts
/// it (`start()`) and waits for its end (`ended`).
///
/// Everything but the constants is touched only on `loop`.
package final class LiveEventStream: @unchecked Sendable {
    typealias Session = StreamSessionStateMachine

    package let user: UserID
    /// The ID of the token that opened the stream: when it is revoked, the stream ends.
    package let tokenId: String?
    let sink: any EventStreamSink
    let loop: any EventLoop
    private let logger: Logger
    private let clock: any ClusterClock
    private let endedPromise: EventLoopPromise<Void>
    private var session: Session
    /// Whether `endedPromise` was completed (once: by the session's end, or by `deinit`).
    private var completed = false

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

    /// - Parameters:
    ///   - pingTicks: ticks (seconds) between pings; `pingOffset` this stream's phase among them.
    ///     The hub ticks every stream in the same second; streams opened together (a load run,
    ///     every client of a restarted gateway) with one phase all pinged at once: 1,000 pings
    ///     every 15 s held the gateway's loop, and a 3,500 msg/s run's delivery p99 was 132 ms
    ///     against 27 ms with a phase per stream.
    ///   - without: guards of the session a simulation runs without (never in production).
    package init(
        user: UserID, tokenId: String? = nil, sink: any EventStreamSink, cursor: StreamCursor, pingTicks: Int, pingOffset: Int = 0,
        unwritableBytesMax: Int = LiveEventStream.unwritableBytesMax, unwritableFor: Duration = LiveEventStream.unwritableFor,
        gapMax: Duration = LiveEventStream.gapMax, without: Set<StreamSessionStateMachine.Guard> = [], clock: any ClusterClock, logger: Logger
    ) {
        self.clock = clock
        self.user = user
        self.tokenId = tokenId
        self.sink = sink
        self.loop = sink.loop
        self.logger = logger
        self.session = Session(
            cursor: cursor, pingTicks: pingTicks, pingOffset: pingOffset, unwritableBytesMax: unwritableBytesMax,
            unwritableFor: unwritableFor, gapMax: gapMax)
        self.session.without = without
        self.endedPromise = sink.loop.makePromise()
        // Weak: an HTTP/1.1 connection may carry many streams, one after another, and its close
        // should not keep the ended ones. A live stream is held by the hub and its response.
        sink.closed.whenComplete { [weak self] _ in
            guard let self else { return }
            self.perform(self.session.clientGone())
        }
    }

    deinit {
        // A stream dropped before it ended (its response was never written) still completes.
        if !completed { endedPromise.succeed(()) }
    }

    /// Completes when the stream has ended: its client went away (connection closed, stream
    /// reset) or read too slowly, or the hub finished it. Nothing is written after that.
    package var ended: EventLoopFuture<Void> { endedPromise.futureResult }

    // MARK: Called from anywhere

    /// Writes the replay, then `ready`, then what arrived meanwhile and everything after.
    func start(replay: [ChatEvent]) {
        loop.execute { [self] in
            perform(session.replay(replay, now: clock.now))
            perform(session.start(now: clock.now))
        }
    }

    /// Writes a page of a resume's replay (live events wait until ``start()``).
    func replay(_ events: [ChatEvent]) {
        loop.execute { [self] in perform(session.replay(events, now: clock.now)) }
    }

    /// After the replay's last page: `ready`, then what arrived meanwhile and everything after.
    func start() {
        loop.execute { [self] in perform(session.start(now: clock.now)) }
    }

    /// Succeeds with true once the client takes more (its connection or HTTP/2 stream is
    /// writable), false once the stream has ended — which the session decides, a client that
    /// takes nothing for ``unwritableFor`` included.
    func roomForMore() -> EventLoopFuture<Bool> {
        loop.flatSubmit { [self] in
            if session.isEnded { return loop.makeSucceededFuture(false) }
            if sink.isWritable { return loop.makeSucceededFuture(true) }
            let promise = loop.makePromise(of: Bool.self)
            var answered = false
            func answer(_ room: Bool) {
                guard !answered else { return }
                answered = true
                promise.succeed(room)
            }
            sink.whenWritable { [self] in answer(!session.isEnded) }
            ended.whenComplete { _ in answer(false) }
            return promise.futureResult
        }
    }

    /// Ends the stream abruptly, as a client that read too slowly (its client resumes by cursor).
    func abort() {
        loop.execute { [self] in
            guard !session.isEnded else { return }
            perform(session.flushIfNeeded())
            sink.close()
            perform(session.clientGone())
        }
    }

    /// Ends the stream (the response then completes).
    package func finish() {
        loop.execute { [self] in perform(session.finish()) }
    }

    // MARK: On the event loop

    /// An event for this stream; the caller flushes after its batch (``flushIfNeeded()``).
    func receive(_ event: ChatEvent, sharedData: [UInt8]?) {
        loop.preconditionInEventLoop()
        perform(session.received(event, shared: sharedData, now: clock.now))
    }

    /// A message its sender's request just got back from the conversation's owner, written now
    /// rather than when the conversation's delivery of it comes, if the session says it may be
    /// (``StreamSessionStateMachine/receivedAhead(_:shared:now:)``). Returns whether it was
    /// written; the caller flushes.
    @discardableResult
    func receiveAhead(_ message: Message, sharedData: [UInt8]?) -> Bool {
        loop.preconditionInEventLoop()
        guard let actions = session.receivedAhead(message, shared: sharedData, now: clock.now) else { return false }
        perform(actions)
        return true
    }

    /// Once a second (the hub's tick).
    func tick() {
        loop.preconditionInEventLoop()
        perform(session.tick(now: clock.now, active: sink.isActive, writable: sink.isWritable))
    }

    func flushIfNeeded() {
        perform(session.flushIfNeeded())
    }

    // MARK: Carrying out the session's actions

    private func perform(_ actions: [Session.Action]) {
        for action in actions {
            switch action {
            case .write(let frame):
                let buffer = Self.bytes(of: frame, user: user)
                let wasEnded = session.isEnded
                guard session.admit(bytes: buffer.readableBytes, writable: sink.isWritable) else {
                    // Past the slow reader's budget: the session ended just now.
                    if !wasEnded, case .ended(let reason) = session.phase { ended(reason) }
                    return
                }
                sink.write(buffer)
            case .flush:
                if sink.isActive { sink.flush() }
            case .end(let reason):
                ended(reason)
                return
            }
        }
    }

    private func ended(_ reason: Session.EndReason) {
        switch reason {
        case .clientGone:
            logger.debug("event stream's client went away", metadata: ["user.id": "\(user)"])
        case .finished:
            break
        case .gap(let conversation, let lastSeq):
            Self.unfilledGapsEnded.increment()
            logger.warning("event stream ended: a gap was not filled in time; its client resumes by cursor", metadata: [
                "user.id": "\(user)", "conversation.id": "\(conversation)", "last.seq": "\(lastSeq)",
            ])
        case .unwritable(let duration):
            Self.slowStreamsEnded.increment()
            logger.warning("event stream ended: its client took nothing for a while; it resumes by cursor", metadata: [
                "user.id": "\(user)", "unwritable.for": "\(duration)",
            ])
        case .slowReader(let bytes):
            Self.slowStreamsEnded.increment()
            logger.warning("event stream ended: its client reads too slowly; it resumes by cursor", metadata: [
                "user.id": "\(user)", "unwritten.bytes": "\(bytes)",
            ])
        }
        if reason.isAbrupt { sink.close() }
        completed = true
        endedPromise.succeed(())
    }

    /// A frame as the client reads it.
    private static func bytes(of frame: Session.Frame, user: UserID) -> ByteBuffer {
        switch frame {
        case .event(let out, let cursor):
            ServerSentEvent.frame(for: out.event, user: user, cursor: cursor, sharedData: out.shared)
        case .ready(let cursor):
            ServerSentEvent.frame(event: "ready", id: cursor.token, data: API.ReadyEvent(cursor: cursor.token))
        case .ping:
            ByteBuffer(string: ": ping\n\n")
        }
    }
}
