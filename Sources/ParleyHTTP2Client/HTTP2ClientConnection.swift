import DequeModule
import NIOCore
import NIOHPACK
import NIOPosix
import NIOSSL
import Synchronization

/// A request on an ``HTTP2ClientConnection``.
public struct HTTP2ClientRequest: Sendable {
    public var method: String
    public var path: String
    /// The headers after the pseudo-headers, which the connection writes (`:method`, `:scheme`,
    /// `:authority`, `:path`). A value that changes with every request is best added
    /// `.nonIndexable`: in HPACK's table it would only push out the ones that repeat.
    public var headers: HPACKHeaders
    public var body: ByteBuffer?
    /// How long the request may wait for a stream and then for its whole response; nil for a
    /// response that lasts (an event stream).
    public var timeout: TimeAmount?
    /// Whether the body is written after the headers, piece by piece, while the response comes
    /// (``HTTP2ClientConnection/writeBodyOnLoop(stream:_:end:)``): `body` is then ignored.
    public var bodyStreams = false
    /// `:protocol`, for an extended CONNECT (RFC 8441: `websocket`). Sent only once the server's
    /// SETTINGS allowed it (`SETTINGS_ENABLE_CONNECT_PROTOCOL`): the caller waits for them.
    public var extendedConnectProtocol: String?

    public init(
        method: String, path: String, headers: HPACKHeaders = [:], body: ByteBuffer? = nil, timeout: TimeAmount? = .seconds(15), bodyStreams: Bool = false
    ) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = bodyStreams ? nil : body
        self.timeout = timeout
        self.bodyStreams = bodyStreams
    }
}

public struct HTTP2ClientResponse: Sendable {
    public var status: Int
    public var headers: HPACKHeaders
    /// Empty for a streamed response (its bytes went to ``HTTP2ClientStreaming/data``).
    public var body: ByteBuffer
}

/// Why a request got no response.
public struct HTTP2ClientError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable, Equatable {
        /// No connection, or it failed or closed before the response was whole.
        case connectionFailed
        case timedOut
        /// The server reset the request's stream.
        case reset
        /// The response's body is over ``HTTP2ClientConnection/Configuration/maxResponseBody``.
        case responseTooLarge
        /// The request cannot go: its body is over one frame or the server's stream window.
        case invalidRequest
    }

    public var kind: Kind
    public var reason: String
    /// The server cannot have acted on the request: it never went out, or the server said it did
    /// not process it (a GOAWAY naming an earlier stream, REFUSED_STREAM). Safe to send again
    /// whatever the request does.
    public var notProcessed: Bool

    public init(_ kind: Kind, _ reason: String, notProcessed: Bool = false) {
        self.kind = kind
        self.reason = reason
        self.notProcessed = notProcessed
    }

    public var description: String { reason }
}

/// Where the parts of a response that lasts go, on the connection's event loop, as they come:
/// its status and headers once, then its body's bytes.
public struct HTTP2ClientStreaming {
    public var head: (_ status: Int, _ headers: HPACKHeaders) -> Void
    public var data: (ByteBuffer) -> Void
    /// The request's stream, once its headers are written: where a body that streams
    /// (``HTTP2ClientRequest/bodyStreams``) is written.
    public var started: (_ stream: UInt32) -> Void

    public init(
        head: @escaping (_ status: Int, _ headers: HPACKHeaders) -> Void, data: @escaping (ByteBuffer) -> Void,
        started: @escaping (_ stream: UInt32) -> Void = { _ in }
    ) {
        self.head = head
        self.data = data
        self.started = started
    }
}

/// One HTTP/2 connection to a server, driven frame by frame (``HTTP2ClientFrameReader``, HPACK
/// from NIOHPACK) with no channel per stream: a request is a HEADERS and a DATA frame written into
/// the connection's buffer, and the requests made in one turn of the event loop leave in one
/// flush. Requests past the server's limit of concurrent streams, or its connection window, wait
/// in order. What AsyncHTTPClient does per HTTP/2 request instead (a child channel and its
/// pipeline, a flush of its own) was the largest part of a push notification's CPU.
public final class HTTP2ClientConnection: Sendable {
    public struct Configuration: Sendable {
        public var host: String
        public var port: Int
        /// TLS, whose configuration offers ALPN `h2`; nil: cleartext HTTP/2 with prior knowledge.
        public var tls: NIOSSLContext?
        public var connectTimeout: TimeAmount = .seconds(10)
        /// A response's body past this is refused (its stream reset): a server's answer is read
        /// into memory.
        public var maxResponseBody = 1 << 20
        /// How long a request written waits for others to share its flush (one TLS record, one
        /// write): nil, only for the tasks already queued on the event loop. For a client whose
        /// requests arrive one by one from many tasks and for which a few milliseconds do not
        /// matter (push notifications).
        public var flushDelay: TimeAmount?

        public init(host: String, port: Int, tls: NIOSSLContext?) {
            self.host = host
            self.port = port
            self.tls = tls
        }

        /// `:authority`: the host, with the port unless it is the scheme's default.
        var authority: String { port == (tls == nil ? 80 : 443) ? host : "\(host):\(port)" }
    }

    public let eventLoop: any EventLoop
    private let channel: any Channel
    private let handler: NIOLoopBound<HTTP2ClientHandler>
    private let usable: Atomic<Bool>

    private init(channel: any Channel, handler: NIOLoopBound<HTTP2ClientHandler>) {
        self.channel = channel
        self.eventLoop = channel.eventLoop
        self.handler = handler
        self.usable = Atomic(true)
    }

    /// Connects and sends the connection preface; requests may go at once.
    public static func connect(_ configuration: Configuration, on eventLoop: any EventLoop) -> EventLoopFuture<HTTP2ClientConnection> {
        let isAddress = (try? SocketAddress(ipAddress: configuration.host, port: 0)) != nil
        return ClientBootstrap(group: eventLoop)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(configuration.connectTimeout)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    if let tls = configuration.tls {
                        try sync.addHandler(NIOSSLClientHandler(context: tls, serverHostname: isAddress ? nil : configuration.host))
                    }
                    try sync.addHandler(HTTP2ClientHandler(
                        authority: configuration.authority, scheme: configuration.tls == nil ? "http" : "https",
                        maxResponseBody: configuration.maxResponseBody, flushDelay: configuration.flushDelay))
                }
            }
            .connect(host: configuration.host, port: configuration.port)
            .flatMapThrowing { channel in
                let handler = try channel.pipeline.syncOperations.handler(type: HTTP2ClientHandler.self)
                let connection = HTTP2ClientConnection(channel: channel, handler: NIOLoopBound(handler, eventLoop: channel.eventLoop))
                handler.onUnusable = { [weak connection] in connection?.usable.store(false, ordering: .relaxed) }
                return connection
            }
    }

    /// Whether new requests may go on this connection: false once it failed, closed, or the
    /// server (GOAWAY) or its stream IDs ended it; the requests already on it still finish.
    public var isUsable: Bool { usable.load(ordering: .relaxed) }

    /// Sends `request`, from any thread.
    public func execute(_ request: HTTP2ClientRequest) -> EventLoopFuture<HTTP2ClientResponse> {
        let promise = eventLoop.makePromise(of: HTTP2ClientResponse.self)
        if eventLoop.inEventLoop {
            handler.value.enqueue(request, streaming: nil, promise: promise)
        } else {
            let handler = self.handler
            eventLoop.execute { handler.value.enqueue(request, streaming: nil, promise: promise) }
        }
        return promise.futureResult
    }

    /// Sends `request` from the connection's event loop; `streaming` (nil: the body is collected)
    /// takes the response's parts as they come, and the promise is completed when it ends.
    public func executeOnLoop(_ request: HTTP2ClientRequest, streaming: HTTP2ClientStreaming?, promise: EventLoopPromise<HTTP2ClientResponse>) {
        handler.value.enqueue(request, streaming: streaming, promise: promise)
    }

    /// Writes `bytes` as the next piece of the body of `stream` (a request made with
    /// ``HTTP2ClientRequest/bodyStreams``, its stream from ``HTTP2ClientStreaming/started``), from
    /// the connection's event loop: in order, as the server's windows let it go; `end` ends the
    /// body. Dropped if the stream is over.
    public func writeBodyOnLoop(stream: UInt32, _ bytes: ByteBuffer, end: Bool) {
        handler.value.writeBody(stream: stream, bytes, end: end)
    }

    /// Fails every request on the connection with `reason` and closes it.
    public func close(reason: String) -> EventLoopFuture<Void> {
        let handler = self.handler
        let channel = self.channel
        return eventLoop.submit { handler.value.fail(reason) }.flatMap { channel.close() }.recover { _ in }
    }
}

/// The connection's HTTP/2: client streams get odd IDs in order; responses are collected per
/// stream (or streamed); flow-control credit is given back as data is read; SETTINGS and PING are
/// acknowledged; a GOAWAY lets the streams the server took finish and fails the rest as not
/// processed. One timer per connection fails requests past their deadline.
final class HTTP2ClientHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private struct Open {
        var promise: EventLoopPromise<HTTP2ClientResponse>
        var streaming: HTTP2ClientStreaming?
        var status = 0
        var headers = HPACKHeaders()
        var body = ByteBuffer()
        /// DATA bytes read on the stream and not yet credited back.
        var uncredited = 0
        var deadline: NIODeadline?
    }

    /// The body of a request that streams it: what the server's windows have not let go yet.
    private struct OutgoingBody {
        /// The stream's send window.
        var window: Int
        var pieces = Deque<(bytes: ByteBuffer, end: Bool)>()
    }

    private struct Waiting {
        var request: HTTP2ClientRequest
        var streaming: HTTP2ClientStreaming?
        var promise: EventLoopPromise<HTTP2ClientResponse>
        var deadline: NIODeadline?
    }

    private let authority: String
    private let scheme: String
    private let maxResponseBody: Int
    private let flushDelay: TimeAmount?
    /// Called once, when the connection stops taking new requests.
    var onUnusable: (@Sendable () -> Void)?
    private var context: ChannelHandlerContext?
    private var reader = HTTP2ClientFrameReader()
    private var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
    private var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
    private var nextStreamID: UInt32 = 1
    private var open: [UInt32: Open] = [:]
    private var outgoing: [UInt32: OutgoingBody] = [:]
    private var waiting = Deque<Waiting>()
    private var failure: String?
    /// The server sent GOAWAY, or the stream IDs ran out: the open streams finish, no new ones start.
    private var goingAway = false
    private var prefaceSent = false
    /// What the server allows: streams open at once, each new stream's window, the connection's window.
    private var peerMaxStreams = Int.max
    private var peerStreamWindow = HTTP2ClientFrame.initialWindow
    private var sendWindow = HTTP2ClientFrame.initialWindow
    /// DATA bytes read on the connection and not yet credited back.
    private var connectionUncredited = 0
    private static let creditEvery = 16 * 1024
    private var unflushed = false
    private var flushScheduled = false
    /// One timer per connection while requests have deadlines, instead of one per request: NIO
    /// finds a cancelled timer by a linear search of its loop's timers, and a request's timer was
    /// scheduled and cancelled thousands of times a second.
    private var sweep: Scheduled<Void>?

    init(authority: String, scheme: String, maxResponseBody: Int, flushDelay: TimeAmount?) {
        self.authority = authority
        self.scheme = scheme
        self.maxResponseBody = maxResponseBody
        self.flushDelay = flushDelay
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { sendPreface(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        sendPreface(context: context)
        context.fireChannelActive()
    }

    /// The preface and SETTINGS: no server push; otherwise the protocol's defaults.
    private func sendPreface(context: ChannelHandlerContext) {
        guard !prefaceSent else { return }
        prefaceSent = true
        var buffer = context.channel.allocator.buffer(capacity: 64)
        buffer.writeBytes(HTTP2ClientFrame.preface)
        HTTP2ClientFrameWriter.settings([.init(HTTP2ClientFrame.Setting.enablePush, 0)], into: &buffer)
        context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
    }

    func enqueue(_ request: HTTP2ClientRequest, streaming: HTTP2ClientStreaming?, promise: EventLoopPromise<HTTP2ClientResponse>) {
        if let failure {
            promise.fail(HTTP2ClientError(.connectionFailed, failure, notProcessed: true))
            return
        }
        if goingAway {
            promise.fail(HTTP2ClientError(.connectionFailed, "the connection takes no new requests", notProcessed: true))
            return
        }
        let size = request.body?.readableBytes ?? 0
        guard size <= min(peerStreamWindow, HTTP2ClientFrame.maxPayload) else {
            promise.fail(HTTP2ClientError(.invalidRequest, "a body of \(size) bytes is over one DATA frame or the server's stream window", notProcessed: true))
            return
        }
        waiting.append(Waiting(request: request, streaming: streaming, promise: promise, deadline: request.timeout.map { .now() + $0 }))
        startWaiting()
        scheduleFlush()
    }

    /// Starts the waiting requests that the server's limits let through, in order.
    private func startWaiting() {
        while !goingAway, let next = waiting.first, open.count < peerMaxStreams, (next.request.body?.readableBytes ?? 0) <= sendWindow {
            waiting.removeFirst()
            guard let stream = write(next.request) else {
                next.promise.fail(HTTP2ClientError(.connectionFailed, failure ?? "the connection is closed", notProcessed: true))
                continue
            }
            open[stream] = Open(promise: next.promise, streaming: next.streaming, deadline: next.deadline)
            if next.request.bodyStreams { outgoing[stream] = OutgoingBody(window: peerStreamWindow) }
            next.streaming?.started(stream)
            if nextStreamID > 0x7FFF_FFFF {
                stopTakingRequests(failingWaiting: "the connection's stream IDs are used up")
            }
        }
        scheduleSweep()
    }

    private func write(_ request: HTTP2ClientRequest) -> UInt32? {
        guard context != nil, failure == nil else { return nil }
        let stream = nextStreamID
        nextStreamID += 2
        var headers = HPACKHeaders([(":method", request.method), (":scheme", scheme), (":authority", authority)])
        headers.add(name: ":path", value: request.path, indexing: .nonIndexable)
        if let extendedConnectProtocol = request.extendedConnectProtocol { headers.add(name: ":protocol", value: extendedConnectProtocol) }
        headers.add(contentsOf: request.headers)
        let body = request.body
        if let body, !request.headers.contains(name: "content-length") {
            headers.add(name: "content-length", value: String(body.readableBytes), indexing: .nonIndexable)
        }
        do {
            try writeFrames { buffer in
                try HTTP2ClientFrameWriter.headers(stream: stream, endStream: body == nil && !request.bodyStreams, into: &buffer) {
                    try encoder.encode(headers: headers, to: &$0)
                }
                if let body { HTTP2ClientFrameWriter.data(stream: stream, payload: body, endStream: true, into: &buffer) }
            }
        } catch {
            // The encoder's table may now differ from the server's: the connection cannot go on.
            fail("a request's headers could not be encoded: \(error)")
            context?.close(promise: nil)
            return nil
        }
        sendWindow -= body?.readableBytes ?? 0
        return stream
    }

    func writeBody(stream: UInt32, _ bytes: ByteBuffer, end: Bool) {
        guard outgoing[stream] != nil else { return }
        // One DATA frame holds at most 16 KiB.
        var rest = bytes
        while rest.readableBytes > HTTP2ClientFrame.maxPayload, let piece = rest.readSlice(length: HTTP2ClientFrame.maxPayload) {
            outgoing[stream]?.pieces.append((piece, false))
        }
        outgoing[stream]?.pieces.append((rest, end))
        sendBodies(of: [stream])
        scheduleFlush()
    }

    /// Writes what the windows let go of the bodies of `streams`, in order.
    private func sendBodies(of streams: some Sequence<UInt32>) {
        for stream in streams {
            guard var body = outgoing.removeValue(forKey: stream) else { continue }
            var ended = false
            while let first = body.pieces.first, first.bytes.readableBytes <= min(body.window, sendWindow) {
                body.pieces.removeFirst()
                body.window -= first.bytes.readableBytes
                sendWindow -= first.bytes.readableBytes
                writeFrames { HTTP2ClientFrameWriter.data(stream: stream, payload: first.bytes, endStream: first.end, into: &$0) }
                if first.end {
                    ended = true
                    break
                }
            }
            if !ended { outgoing[stream] = body }
        }
    }

    /// Writes the frames `fill` puts in one buffer; the next flush sends them.
    private func writeFrames(_ fill: (inout ByteBuffer) throws -> Void) rethrows {
        guard let context else { return }
        // A request made where the connect future completes comes before channelActive.
        sendPreface(context: context)
        var buffer = context.channel.allocator.buffer(capacity: 256)
        try fill(&buffer)
        context.write(wrapOutboundOut(buffer), promise: nil)
        unflushed = true
    }

    /// Flushes after the tasks already queued on the loop (requests made in one turn of the loop
    /// leave together), or after the flush delay.
    private func scheduleFlush() {
        guard !flushScheduled, let context else { return }
        flushScheduled = true
        let loop = context.eventLoop.assumeIsolated()
        if let flushDelay {
            loop.scheduleTask(in: flushDelay) { [self] in
                flushScheduled = false
                flushIfNeeded()
            }
        } else {
            loop.execute { [self] in
                flushScheduled = false
                flushIfNeeded()
            }
        }
    }

    private func flushIfNeeded() {
        guard unflushed, let context else { return }
        unflushed = false
        context.flush()
    }

    private func scheduleSweep() {
        guard sweep == nil, let context else { return }
        let first = min(open.values.lazy.compactMap(\.deadline).min() ?? .distantFuture, waiting.lazy.compactMap(\.deadline).min() ?? .distantFuture)
        guard first != .distantFuture else { return }
        sweep = context.eventLoop.assumeIsolated().scheduleTask(deadline: first) { [self] in
            sweep = nil
            sweepTimeouts()
        }
    }

    /// Fails the requests whose deadline has passed (an open stream is reset with CANCEL).
    private func sweepTimeouts() {
        let now = NIODeadline.now()
        for (stream, request) in open where request.deadline.map({ $0 <= now }) ?? false {
            open[stream] = nil
            outgoing[stream] = nil
            request.promise.fail(HTTP2ClientError(.timedOut, "no answer within the request's time"))
            writeFrames { HTTP2ClientFrameWriter.rstStream(stream: stream, code: 0x8, into: &$0) }  // CANCEL
        }
        let expired = waiting.filter { $0.deadline.map { $0 <= now } ?? false }
        if !expired.isEmpty {
            waiting.removeAll { $0.deadline.map { $0 <= now } ?? false }
            for request in expired {
                request.promise.fail(HTTP2ClientError(.timedOut, "no stream for the request within its time", notProcessed: true))
            }
        }
        startWaiting()
        flushIfNeeded()
        closeIfDrained()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        reader.append(&bytes)
        do {
            while failure == nil, let frame = try reader.next() { try handle(frame) }
        } catch {
            fail("the server broke HTTP/2: \(error)")
            context.close(promise: nil)
        }
    }

    private func handle(_ frame: HTTP2ClientFrame) throws {
        switch frame {
        case .headers(let stream, var block, let endStream):
            // Every block is decoded, in order, whoever it is for: HPACK's table depends on it.
            let headers = try decoder.decodeHeaders(from: &block)
            guard var request = open[stream] else { return }
            if request.status == 0, let status = headers.first(name: ":status").flatMap({ Int($0) }), !(100..<200).contains(status) {
                request.status = status
                request.headers = headers
                open[stream] = request
                request.streaming?.head(status, headers)
            }  // else an informational response, or trailers
            if endStream { complete(stream) }
        case .data(let stream, var payload, let endStream, let flowControlled):
            connectionUncredited += flowControlled
            // Taken out of the table while its body grows, so the body's storage is not shared with
            // the table's copy and each frame appends in place (a copy per frame, before).
            guard var request = open.removeValue(forKey: stream) else { return }
            if let streaming = request.streaming {
                open[stream] = request
                streaming.data(payload)
                // What it did may have ended the connection.
                guard let stillOpen = open.removeValue(forKey: stream) else { return }
                request = stillOpen
            } else if request.body.readableBytes + payload.readableBytes > maxResponseBody {
                request.promise.fail(HTTP2ClientError(.responseTooLarge, "a response body over \(maxResponseBody) bytes"))
                writeFrames { HTTP2ClientFrameWriter.rstStream(stream: stream, code: 0x8, into: &$0) }  // CANCEL
                startWaiting()
                return
            } else {
                request.body.writeBuffer(&payload)
            }
            if endStream {
                open[stream] = request
                complete(stream)
            } else {
                request.uncredited += flowControlled
                if request.uncredited >= Self.creditEvery {
                    let increment = request.uncredited
                    request.uncredited = 0
                    writeFrames { HTTP2ClientFrameWriter.windowUpdate(stream: stream, increment: increment, into: &$0) }
                }
                open[stream] = request
            }
        case .rstStream(let stream, let code):
            outgoing[stream] = nil
            if let request = open.removeValue(forKey: stream) {
                request.promise.fail(HTTP2ClientError(.reset, "the server reset the request's stream (code \(code))", notProcessed: code == 0x7))  // REFUSED_STREAM
                startWaiting()
                closeIfDrained()
            }
        case .settings(let ack, let values):
            guard !ack else { return }
            for setting in values {
                switch setting.id {
                case HTTP2ClientFrame.Setting.maxConcurrentStreams:
                    peerMaxStreams = Int(setting.value)
                case HTTP2ClientFrame.Setting.initialWindowSize:
                    // Open streams' windows move by the difference (RFC 9113 section 6.9.2).
                    let difference = Int(setting.value) - peerStreamWindow
                    peerStreamWindow = Int(setting.value)
                    for stream in Array(outgoing.keys) { outgoing[stream]?.window += difference }
                    sendBodies(of: Array(outgoing.keys))
                case HTTP2ClientFrame.Setting.headerTableSize:  // the most the encoder's table may hold
                    try encoder.setDynamicTableSize(min(Int(setting.value), HPACKEncoder.defaultDynamicTableSize))
                default:
                    break
                }
            }
            writeFrames { HTTP2ClientFrameWriter.settingsAck(into: &$0) }
            startWaiting()
        case .ping(let ack, let payload):
            if !ack { writeFrames { HTTP2ClientFrameWriter.pingAck(payload, into: &$0) } }
        case .goAway(let lastStream, let code):
            stopTakingRequests(failingWaiting: "the server is closing the connection (GOAWAY code \(code))")
            for (stream, request) in open where stream > lastStream {
                open[stream] = nil
                outgoing[stream] = nil
                request.promise.fail(HTTP2ClientError(.connectionFailed, "the server closed the connection before taking the request (GOAWAY code \(code))", notProcessed: true))
            }
            closeIfDrained()
        case .windowUpdate(let stream, let increment):
            if stream == 0 {
                sendWindow += Int(increment)
                sendBodies(of: Array(outgoing.keys))
                startWaiting()
            } else if outgoing[stream] != nil {
                outgoing[stream]?.window += Int(increment)
                sendBodies(of: [stream])
            }
        case .ignored:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if connectionUncredited >= Self.creditEvery {
            let increment = connectionUncredited
            writeFrames { HTTP2ClientFrameWriter.windowUpdate(stream: 0, increment: increment, into: &$0) }
            connectionUncredited = 0
        }
        flushIfNeeded()
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail("the connection closed")
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail("\(error)")
        context.close(promise: nil)
    }

    private func complete(_ stream: UInt32) {
        outgoing[stream] = nil
        guard let request = open.removeValue(forKey: stream) else { return }
        request.promise.succeed(HTTP2ClientResponse(status: request.status, headers: request.headers, body: request.body))
        startWaiting()
        closeIfDrained()
    }

    /// New requests go elsewhere from now on; the waiting ones fail as not sent.
    private func stopTakingRequests(failingWaiting reason: String) {
        guard !goingAway else { return }
        goingAway = true
        onUnusable?()
        let queued = waiting
        waiting = []
        for request in queued { request.promise.fail(HTTP2ClientError(.connectionFailed, reason, notProcessed: true)) }
    }

    /// A connection that takes no new requests closes once its last stream is done.
    private func closeIfDrained() {
        guard goingAway, open.isEmpty, let context else { return }
        flushIfNeeded()
        context.close(promise: nil)
    }

    /// The first failure ends every request in flight or waiting.
    func fail(_ reason: String) {
        guard failure == nil else { return }
        failure = reason
        goingAway = true
        onUnusable?()
        sweep?.cancel()
        sweep = nil
        let requests = open
        open = [:]
        outgoing = [:]
        let queued = waiting
        waiting = []
        for request in requests.values { request.promise.fail(HTTP2ClientError(.connectionFailed, reason)) }
        for request in queued { request.promise.fail(HTTP2ClientError(.connectionFailed, reason, notProcessed: true)) }
    }
}

/// Connections to HTTP/2 servers, a few per server: a request goes on the next one in turn that
/// still takes requests; one that failed or was closed by its server is replaced when next picked.
public final class HTTP2ClientPool: Sendable {
    private struct Origin: Hashable {
        var host: String
        var port: Int
    }

    private enum Slot {
        case connecting(EventLoopFuture<HTTP2ClientConnection>, generation: Int)
        case ready(HTTP2ClientConnection)
    }

    private struct State {
        var slots: [Origin: [Slot?]] = [:]
        var turn = 0
        var generation = 0
        var shutDown = false
    }

    private let tls: NIOSSLContext?
    private let connectionsPerServer: Int
    private let group: any EventLoopGroup
    private let configure: @Sendable (inout HTTP2ClientConnection.Configuration) -> Void
    private let state = Mutex(State())

    /// - Parameters:
    ///   - tls: nil for cleartext HTTP/2 (tests).
    ///   - configure: sets what a connection's configuration does not take from the pool.
    public init(
        tls: NIOSSLContext?, connectionsPerServer: Int = 2, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        configure: @escaping @Sendable (inout HTTP2ClientConnection.Configuration) -> Void = { _ in }
    ) {
        self.tls = tls
        self.connectionsPerServer = max(1, connectionsPerServer)
        self.group = group
        self.configure = configure
    }

    /// Sends `request` to the server at `host`:`port`.
    public func execute(_ request: HTTP2ClientRequest, host: String, port: Int) -> EventLoopFuture<HTTP2ClientResponse> {
        let origin = Origin(host: host, port: port)
        let picked = state.withLock { state -> Result<Slot, HTTP2ClientError> in
            guard !state.shutDown else { return .failure(HTTP2ClientError(.connectionFailed, "the client is shut down", notProcessed: true)) }
            var slots = state.slots[origin] ?? Array(repeating: nil, count: connectionsPerServer)
            let index = state.turn % slots.count
            state.turn &+= 1
            if let slot = slots[index] {
                switch slot {
                case .connecting: return .success(slot)
                case .ready(let connection) where connection.isUsable: return .success(slot)
                case .ready: break
                }
            }
            state.generation += 1
            var configuration = HTTP2ClientConnection.Configuration(host: host, port: port, tls: tls)
            configure(&configuration)
            let slot = Slot.connecting(HTTP2ClientConnection.connect(configuration, on: group.next()), generation: state.generation)
            slots[index] = slot
            state.slots[origin] = slots
            return .success(slot)
        }
        switch picked {
        case .failure(let error):
            return group.next().makeFailedFuture(error)
        case .success(.ready(let connection)):
            return connection.execute(request)
        case .success(.connecting(let future, let generation)):
            future.whenComplete { [self] result in settle(origin, generation: generation, result) }
            return future.flatMapError { error in
                future.eventLoop.makeFailedFuture(HTTP2ClientError(.connectionFailed, "cannot connect to \(host):\(port): \(error)", notProcessed: true))
            }.flatMap { $0.execute(request) }
        }
    }

    /// A connection attempt ended: its slot holds the connection, or nothing (the next request
    /// tries again).
    private func settle(_ origin: Origin, generation: Int, _ result: Result<HTTP2ClientConnection, any Error>) {
        let late = state.withLock { state -> HTTP2ClientConnection? in
            guard var slots = state.slots[origin] else { return try? result.get() }
            for index in slots.indices {
                guard case .connecting(_, let slotGeneration)? = slots[index], slotGeneration == generation else { continue }
                slots[index] = (try? result.get()).map { .ready($0) }
                state.slots[origin] = slots
                return state.shutDown ? try? result.get() : nil
            }
            return nil
        }
        if let late { _ = late.close(reason: "the client is shut down") }
    }

    /// Closes every connection; requests on them fail.
    public func shutdown() async {
        let connections = state.withLock { state -> [HTTP2ClientConnection] in
            state.shutDown = true
            defer { state.slots = [:] }
            return state.slots.values.flatMap { $0 }.compactMap { slot in
                if case .ready(let connection)? = slot { return connection }
                return nil
            }
        }
        for connection in connections { try? await connection.close(reason: "the client is shut down").get() }
    }
}
