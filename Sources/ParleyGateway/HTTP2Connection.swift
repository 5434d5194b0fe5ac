import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import Metrics
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import NIOTLS
import ParleyTransport
import Synchronization

/// The client port's connections: TLS, then by ALPN either HTTP/2, served frame by frame on the
/// connection's event loop (``HTTP2Connection``), or HTTP/1.1 through Hummingbird.
///
/// Hummingbird's own HTTP/2 server gives every request a child channel with its pipeline, an async
/// channel and a task of its own (and every stream's writes a hop through an async writer): at 500
/// messages per second the gateway used 0.58–0.62 of a core with it, 0.45–0.48 without. Here a
/// request is a few frames in a dictionary and one task that runs the router; its response goes
/// out in one flush.
struct GatewayChildChannel: ServerChildChannel {
    enum Negotiated: Sendable {
        case http1(HTTP1Channel.Value)
        case http2
    }

    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<Negotiated>
        let channel: any Channel
    }

    let sslContext: NIOSSLContext
    let http1: HTTP1Channel
    let http2: HTTP2Responder
    /// Open client connections, against their limit.
    let connections: ConnectionCount
    /// A connection that has not finished its TLS handshake (and ALPN) this long after it was
    /// accepted is closed.
    let handshakeTimeout: TimeAmount

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let address = channel.remoteAddress?.ipAddress
        guard connections.open(from: address) else {
            // Past the limit, or the address's share: closed before any TLS work is spent on it.
            ConnectionCount.refused.increment()
            logger.debug("client connection refused: at the connection limit or the address's share", metadata: [
                "connections.max": "\(connections.max)", "connections.per_address_max": "\(connections.perAddressMax.map(String.init) ?? "none")",
            ])
            return channel.close().flatMap { channel.eventLoop.makeFailedFuture(ConnectionCount.AtLimit()) }
        }
        channel.closeFuture.whenComplete { [connections] _ in
            connections.closed(from: address)
            logger.debug("client connection closed", metadata: ["connections.open": "\(connections.current)"])
        }
        return channel.eventLoop.makeCompletedFuture {
            // First: it sees the socket's writability, whatever the protocol.
            try channel.pipeline.syncOperations.addHandler(StalledConnectionCloser(logger: logger))
            try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
            // Whichever protocol follows, its decoder keeps a copy of a read, not NIOSSL's buffer.
            try channel.pipeline.syncOperations.addHandler(ReadCompactor())
            let requestTimeout = http2.requestTimeout
            let negotiation = NIOTypedApplicationProtocolNegotiationHandler<Negotiated> { [http1, http2] result in
                switch result {
                case .negotiated("h2"):
                    return channel.eventLoop.makeCompletedFuture {
                        try HTTP2Connection.configure(channel, responder: http2)
                        return .http2
                    }
                case .negotiated("http/1.1"), .fallback:
                    // Its own HTTP1Channel: the request deadline's handlers belong to this connection.
                    let deadline = HTTP1RequestDeadline(timeout: requestTimeout, logger: logger)
                    var configuration = http1.configuration
                    let parts = NIOLoopBound(deadline.parts, eventLoop: channel.eventLoop)
                    configuration.additionalChannelHandlers = { [parts.value] }
                    do {
                        // Before the HTTP decoder, which the setup below adds: it sees a request's
                        // first bytes, before there are headers.
                        try channel.pipeline.syncOperations.addHandler(deadline.bytes)
                        try channel.pipeline.syncOperations.addHandler(HTTP1InputCloser())
                    } catch {
                        return channel.eventLoop.makeFailedFuture(error)
                    }
                    return HTTP1Channel(responder: http1.responder, configuration: configuration).setup(channel: channel, logger: logger).map { .http1($0) }
                case .negotiated:
                    return channel.close().flatMap { channel.eventLoop.makeFailedFuture(NIOHTTP2Errors.invalidALPNToken()) }
                }
            }
            try channel.pipeline.syncOperations.addHandler(negotiation)
            let handshake = channel.eventLoop.assumeIsolated().scheduleTask(in: handshakeTimeout) {
                logger.debug("client connection closed: no TLS handshake within the timeout", metadata: ["timeout": "\(handshakeTimeout)"])
                ConnectionCount.handshakesTimedOut.increment()
                channel.close(promise: nil)
            }
            negotiation.protocolNegotiationResult.whenComplete { _ in handshake.cancel() }
            return Value(negotiated: negotiation.protocolNegotiationResult, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.negotiated.get() {
            case .http1(let connection):
                await http1.handle(value: connection, logger: logger)
            case .http2:
                // The connection's handler does the work; the server waits for it to close.
                try await value.channel.closeFuture.get()
            }
        } catch {
            logger.debug("client connection ended", metadata: ["error": "\(error)"])
        }
    }
}

/// What answers a request that came over HTTP/2: the router, as Hummingbird's application runs it
/// (unknown errors become an empty 500; `Date` and `Server` headers added).
struct HTTP2Responder: Sendable {
    let respond: @Sendable (Request, GatewayContext) async throws -> Response
    /// The request body limit (API.md's 64 KiB): a larger body is answered (413) once the limit is
    /// passed, and the rest refused.
    let bodyLimit: Int
    let serverName: String
    /// A connection without an open stream this long gets a GOAWAY and is closed; nil: never.
    var idleTimeout: TimeAmount? = nil
    /// A request whose body has not all come this long after its headers is answered `408` and
    /// its stream reset.
    var requestTimeout: TimeAmount = .seconds(30)
    /// Requests whose body the route reads as it arrives (uploads, the send stream), with no
    /// limit but the route's own: at most the stream's flow-control window (1 MiB) of it waits in
    /// memory.
    var streamsBody: @Sendable (HTTPRequest) -> StreamedBody? = { _ in nil }

    /// How long a body read as it arrives may take.
    enum StreamedBody: Sendable {
        /// The request timeout counts from the last bytes that came (an upload).
        case timed
        /// As long as the client keeps it (the send stream, which waits for the client's next line).
        case open
    }
    let logger: Logger

    func response(to request: Request, context: GatewayContext) async -> Response {
        var response: Response
        do {
            response = try await respond(request, context)
        } catch {
            logger.debug("unrecognised error", metadata: ["error.type": "\(error)"])
            response = Response(status: .internalServerError, body: .init())
        }
        response.headers[.date] = HTTPDate.now()
        response.headers[.server] = serverName
        return response
    }

    /// A response body of known length up to this goes out in one flush; a longer one (a
    /// download) as it is written, each piece once the client has room for it.
    static let collectedBodyMax = 256 * 1024

    /// Runs the router for one request and writes its response.
    func answer(_ request: Request, on sink: HTTP2StreamSink, channel: any Channel) async {
        var context = GatewayContext(source: ApplicationRequestContextSource(channel: channel, logger: logger))
        context.eventSink = sink
        let response = await response(to: request, context: context)
        let headers = HTTP2Connection.headers(of: response.head)
        let body = response.body
        do {
            if request.method == .head {
                // Whatever the route answered (an error's JSON too), a HEAD response has no content.
                sink.send(headers: headers, data: [], end: true)
            } else if let length = body.contentLength, length <= Self.collectedBodyMax {
                // Head, body and end in one flush.
                try await body.write(HTTP2BodyWriter(sink: sink, pendingHead: headers, collects: true))
            } else {
                // A stream: the head now; the body as it comes (an event stream writes its own),
                // from a task of its own. This one ends here, and with it what the router's calls
                // took: a task keeps the most memory it ever held until it ends, and an event
                // stream's request task lives as long as its client stays.
                sink.send(headers: headers, data: [], end: false)
                let logger = logger
                let writing = Task(executorPreference: sink.executor) {
                    do {
                        try await body.write(HTTP2BodyWriter(sink: sink, pendingHead: nil, collects: false))
                    } catch {
                        Self.bodyFailed(error, on: sink, logger: logger)
                    }
                }
                sink.loop.execute { sink.handOver(to: writing) }
            }
        } catch {
            Self.bodyFailed(error, on: sink, logger: logger)
        }
    }

    /// A body that failed half-way cannot be finished: the stream is reset.
    private static func bodyFailed(_ error: any Error, on sink: HTTP2StreamSink, logger: Logger) {
        logger.debug("response body failed", metadata: ["error": "\(error)"])
        sink.loop.execute { sink.close() }
    }
}

/// One HTTP/2 connection, on its event loop: it gathers each stream's request (headers, body up
/// to the limit), runs the router in a task, and writes the response's frames with one flush.
/// An event stream's body is written by its ``LiveEventStream`` through an ``HTTP2StreamSink``.
final class HTTP2Connection: ChannelInboundHandler, RemovableChannelHandler, LoopTurnFlushable {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    static let settings: HTTP2Settings = [
        HTTP2Setting(parameter: .maxConcurrentStreams, value: 100),
        // Larger than any accepted body (the gateway's limit is at most a few hundred KiB), so a
        // stream's window never needs topping up.
        HTTP2Setting(parameter: .initialWindowSize, value: 1 << 20),
        HTTP2Setting(parameter: .maxHeaderListSize, value: 80 * 1024),
        // Extended CONNECT (RFC 8441): a browser's WebSocket to `/v1/sends` rides this connection.
        HTTP2Setting(parameter: .enableConnectProtocol, value: 1),
    ]

    static func configure(_ channel: any Channel, responder: HTTP2Responder) throws {
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(ConnectionErrorCloser())
        // A flush's frames in one TLS record (NIOHTTP2 writes a DATA frame's header and payload apart).
        try sync.addHandler(WriteCoalescer())
        try sync.addHandler(NIOHTTP2Handler(mode: .server, initialSettings: settings))
        try sync.addHandler(HTTP2Connection(responder: responder))
    }

    private struct Incoming {
        var head: HTTPRequest
        var body = ByteBuffer()
        /// Answered already (the body passed the limit): the rest of the body is dropped.
        var answered = false
        /// When its headers came, or for a streamed body its last bytes (``HTTP2Responder/requestTimeout``).
        var since: NIODeadline
        /// A body the route reads as it comes (``HTTP2Responder/streamsBody``).
        var streamed: StreamedRequestBody?
        /// Whether the request timeout applies (all but an open streamed body).
        var timed = true
    }

    private let responder: HTTP2Responder
    private var context: ChannelHandlerContext?
    /// Requests still arriving.
    private var incoming: [HTTP2StreamID: Incoming] = [:]
    /// Requests being answered, each with the sink its event stream would write into.
    private var responding: [HTTP2StreamID: HTTP2StreamSink] = [:]
    /// The connection's inbound flow-control window as NIOHTTP2 last reported it: topped up to
    /// ``connectionWindow`` once it is 16 KiB below. Counted from NIOHTTP2's reports, not from the
    /// DATA frames this handler sees: the frames of a stream already answered and reset (a body
    /// over the limit) never reach it, yet consume the window, and left uncredited they stalled
    /// the connection's later requests for good.
    private var connectionWindowLeft = HTTP2Connection.connectionWindow
    static let connectionWindow = 65_535
    private var highestStreamID = HTTP2StreamID.rootStream
    /// The server is shutting down, or the connection was idle: GOAWAY was sent; the connection
    /// closes when its last response has ended.
    private var draining = false
    /// Runs while the connection has no open stream (``HTTP2Responder/idleTimeout``).
    private var idleTimer: Scheduled<Void>?
    /// Armed while a request's body is still arriving after a read: most requests come whole in
    /// one read, and need no timer.
    private var requestTimer: Scheduled<Void>?
    /// Each event stream's send window, as NIOHTTP2 last reported it: what the client lets the
    /// server send before it reads. At 0 the stream is not writable, though the connection may be
    /// (NIOHTTP2 would buffer its DATA frames without bound).
    private var sendWindows: [HTTP2StreamID: Int] = [:]
    /// Bytes of each streamed body the route has read and the client has not been given back as
    /// window yet (given back 64 KiB at a time).
    private var uncredited: [HTTP2StreamID: Int] = [:]
    /// Responses waiting for room to write their next piece (``whenWritable(_:_:)``).
    private var writableWaiters: [HTTP2StreamID: [() -> Void]] = [:]
    /// Where this connection's requests are answered: its own event loop.
    private var taskExecutor: EventLoopTaskExecutor?
    /// Flushes three turns of the loop's task queue after a write: a send's response and the
    /// sender's own event usually come from the same read of the owner's connection (its reply and
    /// its delivery), and the delivery is written by tasks queued behind the reply's, so waiting
    /// for them lets the two go out in one `write` (at 1,500 msg/s the gateway's writes to clients
    /// went from 3.1 to 2.4 per message; one turn, as the cluster connections flush, caught none).
    private let flusher = LoopTurnFlush(afterTurns: 3)

    init(responder: HTTP2Responder) {
        self.responder = responder
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        taskExecutor = EventLoopTaskExecutor(loop: context.eventLoop)
        updateIdleTimer(context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        endAll()
        idleTimer?.cancel()
        requestTimer?.cancel()
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        endAll()
        idleTimer?.cancel()
        requestTimer?.cancel()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let id = frame.streamID
        switch frame.payload {
        case .headers(let headers):
            if incoming[id] != nil {
                // Trailers end the request.
                if headers.endStream { requestComplete(id, context: context) }
                return
            }
            guard responding[id] == nil else { return }
            guard !draining || id <= highestStreamID else {
                reset(id, .refusedStream, context: context)
                return
            }
            highestStreamID = max(highestStreamID, id)
            guard let head = Self.request(from: headers.headers) else {
                reset(id, .protocolError, context: context)
                return
            }
            incoming[id] = Incoming(head: head, since: context.eventLoop.now)
            updateIdleTimer(context: context)
            if headers.endStream {
                requestComplete(id, context: context)
            } else if let streamed = responder.streamsBody(head) {
                if case .open = streamed { incoming[id]?.timed = false }
                dispatchStreamed(id, context: context)
            }
        case .data(let payload):
            guard case .byteBuffer(var bytes) = payload.data else { return }
            guard var request = incoming[id] else { return }
            if request.answered {
                if payload.endStream { incoming[id] = nil }
                return
            }
            if let streamed = request.streamed {
                streamed.append(bytes)
                if payload.endStream {
                    streamed.finish()
                    incoming[id] = nil
                } else {
                    incoming[id]?.since = context.eventLoop.now
                }
                return
            }
            incoming[id] = nil  // no copy of the body while it grows
            request.body.writeBuffer(&bytes)
            if request.body.readableBytes > responder.bodyLimit {
                request.answered = true
                dispatch(id, request, context: context)
                if !payload.endStream {
                    // Kept only to drop the rest of the body as it comes.
                    request.body = ByteBuffer()
                    incoming[id] = request
                }
            } else {
                incoming[id] = request
                if payload.endStream { requestComplete(id, context: context) }
            }
        case .rstStream:
            // The client gave up on the request: its work stops (a send may still have committed;
            // the client's retry with the same clientMessageId finds it).
            dropIncoming(id)
            responding[id]?.task?.cancel()
            streamEnded(id)
            closeIfDrained(context: context)
            updateIdleTimer(context: context)
        default:
            // SETTINGS, PING, WINDOW_UPDATE, GOAWAY, PRIORITY: NIOHTTP2Handler's.
            break
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { for id in Array(writableWaiters.keys) { wakeWriters(of: id) } }
        context.fireChannelWritabilityChanged()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if requestTimer == nil && incoming.values.contains(where: \.timed) { armRequestTimer(context: context) }
        let uncredited = Self.connectionWindow - connectionWindowLeft
        if uncredited >= 16 * 1024 {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: uncredited))), promise: nil)
            connectionWindowLeft = Self.connectionWindow
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let closed as StreamClosedEvent:
            streamEnded(closed.streamID)
            dropIncoming(closed.streamID)
            closeIfDrained(context: context)
            updateIdleTimer(context: context)
        case let window as NIOHTTP2WindowUpdatedEvent:
            if window.streamID == .rootStream {
                if let left = window.inboundWindowSize { connectionWindowLeft = left }
            } else if let send = window.outboundWindowSize, responding[window.streamID] != nil || incoming[window.streamID] != nil {
                sendWindows[window.streamID] = send
                if send > 0 { wakeWriters(of: window.streamID) }
            }
            context.fireUserInboundEventTriggered(event)
        case let created as NIOHTTP2StreamCreatedEvent:
            if let send = created.localInitialWindowSize { sendWindows[created.streamID] = Int(send) }
            context.fireUserInboundEventTriggered(event)
        case let event as ChannelEvent where event == .inputClosed:
            // The client closed its side (TLS close_notify); Hummingbird's server lets a
            // connection half-close, and there is nothing left to answer.
            context.close(promise: nil)
        case is ChannelShouldQuiesceEvent:
            draining = true
            context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: highestStreamID, errorCode: .noError, opaqueData: nil))), promise: nil)
            // A body that lasts as long as its client likes (the send stream) ends here, as if
            // the client had ended it: its route answers what it read and ends its response,
            // and the rest of the body is refused then (``send(_:headers:data:end:)``).
            for request in incoming.values where !request.timed { request.streamed?.finish() }
            closeIfDrained(context: context)
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        responder.logger.debug("HTTP/2 error", metadata: ["error": "\(error)"])
        // A protocol error was answered by NIOHTTP2Handler already: a stream error with a
        // RST_STREAM (the connection and its other streams go on), a connection error with a
        // GOAWAY, after which ConnectionErrorCloser closes the connection. Anything else (TLS,
        // I/O) ends the connection.
        if error is any NIOHTTP2Error { return }
        context.close(promise: nil)
    }

    // MARK: Requests and responses

    private func requestComplete(_ id: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let request = incoming.removeValue(forKey: id) else { return }
        dispatch(id, request, context: context)
    }

    /// Starts answering a request whose body is still coming: the route reads it as it arrives,
    /// and what it read goes back to the client as window.
    private func dispatchStreamed(_ id: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let head = incoming[id]?.head else { return }
        let sink = HTTP2StreamSink(id, connection: self, loop: context.eventLoop, executor: taskExecutor)
        let streamed = StreamedRequestBody { [sink] bytes in sink.credit(bytes) }
        incoming[id]?.streamed = streamed
        responding[id] = sink
        let responder = self.responder
        let channel = context.channel
        let request = Request(head: head, body: RequestBody(asyncSequence: streamed))
        sink.task = Task(executorPreference: taskExecutor) { await responder.answer(request, on: sink, channel: channel) }
    }

    /// A request no longer arriving (reset, closed, timed out): a route reading its body learns so.
    private func dropIncoming(_ id: HTTP2StreamID) {
        incoming.removeValue(forKey: id)?.streamed?.finish(StreamedRequestBody.Ended())
        uncredited[id] = nil
    }

    /// The route read `bytes` of a streamed body: once 64 KiB are owed, the client may send them again.
    fileprivate func credit(_ id: HTTP2StreamID, _ bytes: Int) {
        guard let context, incoming[id] != nil else { return }
        let owed = uncredited[id, default: 0] + bytes
        guard owed >= 64 * 1024 else {
            uncredited[id] = owed
            return
        }
        uncredited[id] = 0
        context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .windowUpdate(windowSizeIncrement: owed))), promise: nil)
    }

    /// Runs `action` once stream `id` may be written to (the connection and the stream's window have
    /// room), or is over (the next write then finds it closed).
    fileprivate func whenWritable(_ id: HTTP2StreamID, _ action: @escaping () -> Void) {
        if !isOpen(id) || isWritable(id) {
            action()
        } else {
            writableWaiters[id, default: []].append(action)
        }
    }

    private func wakeWriters(of id: HTTP2StreamID) {
        guard let waiters = writableWaiters[id], !isOpen(id) || isWritable(id) else { return }
        writableWaiters[id] = nil
        for waiter in waiters { waiter() }
    }

    private func dispatch(_ id: HTTP2StreamID, _ incoming: Incoming, context: ChannelHandlerContext) {
        let sink = HTTP2StreamSink(id, connection: self, loop: context.eventLoop, executor: taskExecutor)
        responding[id] = sink
        let responder = self.responder
        let channel = context.channel
        let request = Request(head: incoming.head, body: RequestBody(buffer: incoming.body))
        sink.task = Task(executorPreference: taskExecutor) { await responder.answer(request, on: sink, channel: channel) }
    }

    /// Writes a response's frames (on the loop) and flushes; the end of a response ends its stream
    /// here.
    fileprivate func send(_ id: HTTP2StreamID, headers: HPACKHeaders?, data: [ByteBuffer], end: Bool) {
        guard let context, responding[id] != nil else { return }
        if let headers {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: end && data.isEmpty)))), promise: nil)
        } else if end && data.isEmpty {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(ByteBuffer()), endStream: true)))), promise: nil)
        }
        for (index, buffer) in data.enumerated() {
            let last = end && index == data.count - 1
            context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(buffer), endStream: last)))), promise: nil)
        }
        flusher.request(on: context.eventLoop, for: self)
        guard end else { return }
        streamEnded(id)
        if incoming[id] != nil {
            // Answered before the whole body came (too large): ask the client to stop sending
            // (RFC 9113 section 8.1) — after the response is on its way: a RST_STREAM written
            // first would drop the response's DATA still held for the stream, and the client
            // would get no answer.
            dropIncoming(id)
            context.flush()
            reset(id, .noError, context: context)
        }
        closeIfDrained(context: context)
    }

    /// One DATA frame of an event stream (flushed by `flush()`).
    fileprivate func write(_ id: HTTP2StreamID, _ buffer: ByteBuffer) {
        guard let context, responding[id] != nil else { return }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(buffer))))), promise: nil)
    }

    fileprivate func flush() {
        guard let context else { return }
        flusher.request(on: context.eventLoop, for: self)
    }

    func flushWritten() { context?.flush() }

    fileprivate func isOpen(_ id: HTTP2StreamID) -> Bool { context?.channel.isActive == true && responding[id] != nil }

    fileprivate func isWritable(_ id: HTTP2StreamID) -> Bool {
        (context?.channel.isWritable ?? false) && (sendWindows[id] ?? 1) > 0
    }

    fileprivate func reset(_ id: HTTP2StreamID) {
        // Once: a body that fails after its stream was reset (a write deadline, a slow reader)
        // asks again, and a stream over already gets no RST_STREAM.
        guard let context, responding[id] != nil else { return }
        reset(id, .cancel, context: context)
    }

    private func reset(_ id: HTTP2StreamID, _ code: NIOHTTP2.HTTP2ErrorCode, context: ChannelHandlerContext) {
        context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(code))), promise: nil)
        streamEnded(id)
    }

    private func streamEnded(_ id: HTTP2StreamID) {
        sendWindows[id] = nil
        responding.removeValue(forKey: id)?.ended()
        if let waiters = writableWaiters.removeValue(forKey: id) { for waiter in waiters { waiter() } }
    }

    /// The connection is gone: every request's work stops.
    private func endAll() {
        let sinks = responding.values
        responding = [:]
        for request in incoming.values { request.streamed?.finish(StreamedRequestBody.Ended()) }
        incoming = [:]
        uncredited = [:]
        sendWindows = [:]
        let waiters = writableWaiters.values.flatMap { $0 }
        writableWaiters = [:]
        for waiter in waiters { waiter() }
        for sink in sinks {
            sink.task?.cancel()
            sink.ended()
        }
    }

    /// Answers `408` to each request whose body has not all come within the request timeout
    /// (a client that sends headers, then trickles or withholds the body), and resets its stream;
    /// runs again while bodies are still arriving.
    private func armRequestTimer(context: ChannelHandlerContext) {
        let timeout = responder.requestTimeout
        requestTimer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
            requestTimer = nil
            guard let context = self.context else { return }
            let now = context.eventLoop.now
            for (id, request) in incoming where request.timed && !request.answered && request.since + timeout <= now {
                responder.logger.info("request timed out before its body came", metadata: [
                    "http.path": "\(request.head.path ?? "")", "timeout": "\(timeout)",
                ])
                dropIncoming(id)
                var headers = HPACKHeaders([(":status", "408"), ("content-type", "application/json")])
                let body = ByteBuffer(string: #"{"error":{"code":"request_timeout","message":"the request's body did not all arrive in time","retryable":true}}"#)
                headers.add(name: "content-length", value: "\(body.readableBytes)")
                context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers)))), promise: nil)
                context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(body), endStream: true)))), promise: nil)
                context.flush()
                reset(id, .noError, context: context)
            }
            if incoming.values.contains(where: \.timed) { armRequestTimer(context: context) }
            closeIfDrained(context: context)
            updateIdleTimer(context: context)
        }
    }

    private func closeIfDrained(context: ChannelHandlerContext) {
        guard draining && responding.isEmpty && incoming.isEmpty else { return }
        context.flush()  // the last response may be waiting for its flush (``flusher``)
        context.close(promise: nil)
    }

    /// Starts the idle timer when the connection has no open stream, stops it when it has one.
    private func updateIdleTimer(context: ChannelHandlerContext) {
        guard let timeout = responder.idleTimeout, !draining else { return }
        if responding.isEmpty && incoming.isEmpty {
            guard idleTimer == nil else { return }
            idleTimer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
                idleTimer = nil
                guard !draining, responding.isEmpty && incoming.isEmpty, let context = self.context else { return }
                responder.logger.debug("closing an idle HTTP/2 connection", metadata: ["idle.timeout": "\(timeout)"])
                draining = true
                context.writeAndFlush(
                    wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: highestStreamID, errorCode: .noError, opaqueData: nil))),
                    promise: nil)
                closeIfDrained(context: context)
            }
        } else {
            idleTimer?.cancel()
            idleTimer = nil
        }
    }

    // MARK: Headers

    /// The request of a HEADERS frame; nil when a pseudo-header is missing, unknown or repeated, or
    /// a field name is not a token.
    static func request(from headers: HPACKHeaders) -> HTTPRequest? {
        var method: HTTPRequest.Method?
        var scheme: String?
        var authority: String?
        var path: String?
        var extendedConnectProtocol: String?
        var fields = HTTPFields()
        fields.reserveCapacity(headers.count)
        for (name, value, _) in headers {
            if name.hasPrefix(":") {
                switch name {
                case ":method" where method == nil: method = HTTPRequest.Method(value)
                    if method == nil { return nil }
                case ":scheme" where scheme == nil: scheme = value
                case ":authority" where authority == nil: authority = value
                case ":path" where path == nil: path = value
                case ":protocol" where extendedConnectProtocol == nil: extendedConnectProtocol = value
                default: return nil
                }
            } else {
                guard let fieldName = HTTPField.Name(name) else { return nil }
                fields.append(HTTPField(name: fieldName, value: value))
            }
        }
        guard let method, path != nil || method == .connect else { return nil }
        var request = HTTPRequest(method: method, scheme: scheme, authority: authority, path: path, headerFields: fields)
        if let extendedConnectProtocol {
            // NIOHTTP2 lets `:protocol` through only on a CONNECT (RFC 8441 section 4).
            request.extendedConnectProtocol = extendedConnectProtocol
        }
        return request
    }

    /// Fields HTTP/2 does not carry (RFC 9113 §8.2.2).
    private static let connectionSpecific: Set<HTTPField.Name> = [
        .connection, .transferEncoding, HTTPField.Name("Keep-Alive")!, HTTPField.Name("Proxy-Connection")!, .upgrade,
    ]

    static func headers(of response: HTTPResponse) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(response.headerFields.count + 1)
        headers.add(name: ":status", value: String(response.status.code))
        for field in response.headerFields where !connectionSpecific.contains(field.name) {
            headers.add(name: field.name.canonicalName, value: field.value)
        }
        return headers
    }
}

/// One stream of an HTTP/2 connection, as the response's task and an event stream see it.
final class HTTP2StreamSink: EventStreamSink, @unchecked Sendable {
    let id: HTTP2StreamID
    /// Touched only on `loop` (``onLoop``). Not an `NIOLoopBound`: its check on every access
    /// (the thread's identity from thread-local storage) ran four times per event written; the
    /// check here is a debug build's.
    private let connection: HTTP2Connection
    let loop: any EventLoop
    private let closedPromise: EventLoopPromise<Void>
    /// Where the tasks that answer on this stream run: the connection's event loop.
    fileprivate let executor: EventLoopTaskExecutor?
    /// The task answering the request, then the one writing a streamed body: cancelled when the
    /// client resets the stream or the connection goes. Set and read on `loop`.
    fileprivate var task: Task<Void, Never>?
    /// Set on `loop` when the stream is over.
    private var hasEnded = false

    fileprivate init(_ id: HTTP2StreamID, connection: HTTP2Connection, loop: any EventLoop, executor: EventLoopTaskExecutor?) {
        self.id = id
        self.connection = connection
        self.loop = loop
        self.executor = executor
        self.closedPromise = loop.makePromise()
    }

    /// On `loop`: `writer` writes the body from now on; if the stream is over already, it stops.
    fileprivate func handOver(to writer: Task<Void, Never>) {
        task = writer
        if hasEnded { writer.cancel() }
    }

    private var onLoop: HTTP2Connection {
        loop.assertInEventLoop()
        return connection
    }

    /// From any thread: writes (on the loop) and flushes.
    func send(headers: HPACKHeaders?, data: [ByteBuffer], end: Bool) {
        let id = self.id
        loop.execute { [self] in onLoop.send(id, headers: headers, data: data, end: end) }
    }

    /// From any thread: the route read `bytes` of the request's streamed body.
    func credit(_ bytes: Int) {
        let id = self.id
        loop.execute { [self] in onLoop.credit(id, bytes) }
    }

    /// From any thread: returns once the client has room for more of the response (or the
    /// stream is over). A client that takes nothing more within `deadline` has its stream reset,
    /// and this throws ``WriteTimedOut``: a download nobody reads holds no file, task or buffer
    /// for long.
    func writable(within deadline: TimeAmount) async throws {
        let id = self.id
        let timedOut = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            loop.execute { [self] in
                let connection = onLoop
                guard connection.isOpen(id), !connection.isWritable(id) else { return continuation.resume(returning: false) }
                let answered = NIOLoopBoundBox(false, eventLoop: loop)
                let timer = loop.assumeIsolated().scheduleTask(in: deadline) { [self] in
                    guard !answered.value else { return }
                    answered.value = true
                    onLoop.reset(id)
                    continuation.resume(returning: true)
                }
                connection.whenWritable(id) {
                    guard !answered.value else { return }
                    answered.value = true
                    timer.cancel()
                    continuation.resume(returning: false)
                }
            }
        }
        if timedOut { throw WriteTimedOut() }
    }

    /// A response's client took nothing for the write deadline: its stream was reset.
    struct WriteTimedOut: Error {}

    var isActive: Bool { onLoop.isOpen(id) }
    var isWritable: Bool { onLoop.isWritable(id) }
    func write(_ buffer: ByteBuffer) { onLoop.write(id, buffer) }
    func flush() { onLoop.flush() }
    func close() { onLoop.reset(id) }
    var closed: EventLoopFuture<Void> { closedPromise.futureResult }
    func whenWritable(_ action: @escaping () -> Void) { onLoop.whenWritable(id, action) }

    /// The stream is over (response ended, reset, connection gone).
    fileprivate func ended() {
        hasEnded = true
        closedPromise.succeed(())
    }
}

/// A response body on an HTTP/2 stream. A body of known length is collected and goes out with
/// the head and the end in one flush; a streamed one goes out as it is written.
struct HTTP2BodyWriter: ResponseBodyWriter {
    /// How long a streamed body waits for its client to take more before its stream is reset.
    static let writeDeadline: TimeAmount = .seconds(60)

    let sink: HTTP2StreamSink
    var pendingHead: HPACKHeaders?
    let collects: Bool
    var collected: [ByteBuffer] = []

    init(sink: HTTP2StreamSink, pendingHead: HPACKHeaders?, collects: Bool) {
        self.sink = sink
        self.pendingHead = pendingHead
        self.collects = collects
    }

    mutating func write(_ buffer: ByteBuffer) async throws {
        if collects {
            collected.append(buffer)
        } else {
            sink.send(headers: pendingHead, data: [buffer], end: false)
            pendingHead = nil
            // A download is read from its store no faster than its client takes it. On the
            // stream's loop (where its tasks run) room is seen without a hop.
            if sink.loop.inEventLoop && sink.isWritable { return }
            try await sink.writable(within: Self.writeDeadline)
        }
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        sink.send(headers: pendingHead, data: collected, end: true)
    }
}

/// The `Date` header's value (IMF-fixdate), made once a second.
enum HTTPDate {
    private static let cache = Mutex<(second: Int, text: String)>((-1, ""))
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static func now() -> String {
        var seconds = time(nil)
        if let cached = cache.withLock({ $0.second == seconds ? $0.text : nil }) { return cached }
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let text = "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(1900 + parts.tm_year) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
        cache.withLock { $0 = (seconds, text) }
        return text
    }
}
