import DequeModule
import Foundation
import NIOCore
import NIOHPACK
import NIOPosix
import NIOSSL
import ParleyClient
import ParleyLoad
import ParleyModel

/// One user's connection to a gateway, driven frame by frame: TLS with ALPN `h2`, HTTP/2 without
/// a channel per stream, the user's event stream on one HTTP/2 stream and each send on a stream of
/// its own — what an app's connection looks like to the gateway, for less of the load generator's
/// CPU, which shares the servers' cores: AsyncHTTPClient builds a child channel pipeline and a task
/// chain per request (the client engine took 0.47–0.56 core at 500 msg/s here, this one 0.33–0.37).
/// The frames are read and written here (``HTTP2ClientFrameReader``), not by NIOHTTP2's handler,
/// whose code (state machines, buffers, HPACK) was a fifth of the load generator at 4,000 msg/s.
///
/// It follows no failure: a stream or connection that fails is reported (the run then counts the
/// deliveries missing) instead of resumed elsewhere. Runs that kill nodes use the default engine,
/// ``ParleyClient``, which reconnects and resumes like an app.
final class FrameLevelConnection: Sendable {
    /// What the connection's event stream delivers, on the connection's event loop.
    enum StreamEvent {
        case ready
        case message(Message)
        case failed(String)
    }

    struct Response {
        var status: Int
        var body: ByteBuffer
    }

    private let channel: any Channel
    private let handler: NIOLoopBound<FrameLevelHandler>

    private init(channel: any Channel, handler: NIOLoopBound<FrameLevelHandler>) {
        self.channel = channel
        self.handler = handler
    }

    /// Connects to `gateway` (`https://host:port`) and opens the user's event stream.
    static func open(
        gateway: URL, tls: NIOSSLContext, token: String, onEvent: @escaping @Sendable (StreamEvent) -> Void
    ) async throws -> FrameLevelConnection {
        guard let host = gateway.host, let port = gateway.port ?? (gateway.scheme == "https" ? 443 : nil) else {
            throw ParleyError(status: 0, code: "invalid_configuration", message: "\(gateway) has no host and port", retryable: false)
        }
        let isAddress = (try? SocketAddress(ipAddress: host, port: 0)) != nil
        let authority = "\(host):\(port)"
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: tls, serverHostname: isAddress ? nil : host))
                    try sync.addHandler(FrameLevelHandler(authority: authority, token: token, onEvent: onEvent))
                    return channel
                }
            }
        let handler = try await channel.eventLoop.submit {
            NIOLoopBound(try channel.pipeline.syncOperations.handler(type: FrameLevelHandler.self), eventLoop: channel.eventLoop)
        }.get()
        let connection = FrameLevelConnection(channel: channel, handler: handler)
        channel.eventLoop.execute { handler.value.openEvents() }
        return connection
    }

    /// The event loop the connection runs on.
    var eventLoop: any EventLoop { channel.eventLoop }

    /// Where a conversation's messages are sent (worked out once per conversation by a caller
    /// that sends thousands a second).
    static func messagesPath(_ conversation: ConversationID) -> String {
        "/v1/conversations/\(conversation.rawValue.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? conversation.rawValue)/messages"
    }

    /// `POST` to `path` (``messagesPath(_:)``): the acknowledged message, or the API's error. Made
    /// from the connection's event loop (call it there), with no task: what
    /// ``OpenLoop/run(on:send:)`` starts. `completion` runs on the loop.
    func send(
        _ text: String, path: String, clientMessageId: String,
        completion: @escaping @Sendable (Result<Message, any Error>) -> Void
    ) {
        let body = ByteBuffer(bytes: API.NewMessage(clientMessageId: clientMessageId, text: text).json)
        let promise = channel.eventLoop.makePromise(of: Response.self)
        promise.futureResult.whenComplete { result in
            completion(result.flatMap { response in Result { try Self.message(from: response) } })
        }
        handler.value.request(method: "POST", path: path, body: body, promise: promise)
    }

    /// A send's response: the acknowledged message, or the API's error.
    private static func message(from response: Response) throws -> Message {
        let ok = (200..<300).contains(response.status)
        if ok, let message = Message.fromWrappedJSON(response.body.readableBytesView) { return message }  // the gateway's own form
        let bytes = Data(response.body.readableBytesView)
        guard ok else {
            let detail = try? Self.decoder.decode(API.ErrorBody.self, from: bytes).error
            throw ParleyError(status: response.status, code: detail?.code ?? "http_\(response.status)", message: detail?.message ?? "", retryable: detail?.retryable ?? false)
        }
        return try Self.decoder.decode(API.SentMessage.self, from: bytes).message
    }

    /// Closes the connection; its event stream ends without counting as a failure.
    func close() async {
        let handler = self.handler
        try? await channel.eventLoop.submit { handler.value.closing() }.get()
        try? await channel.close()
    }

    static let decoder = API.makeDecoder()
}

/// The connection's HTTP/2, frame by frame (``HTTP2ClientFrameReader``, HPACK from NIOHPACK):
/// client streams get odd IDs in order; responses are collected per stream; the event stream's
/// DATA goes through the SSE parser; flow-control credit is given back as data is read; SETTINGS
/// and PING are acknowledged. A request waits while the peer's limit of concurrent streams or the
/// connection's send window would be passed.
private final class FrameLevelHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private struct Pending {
        var promise: EventLoopPromise<FrameLevelConnection.Response>
        var status = 0
        var body = ByteBuffer()
        /// Past this the request fails with `timeout` (``sweepTimeouts()``).
        var deadline: NIODeadline
    }

    /// A request waiting for a stream or for the connection's send window.
    private struct Waiting {
        var method: String
        var path: String
        var body: ByteBuffer
        var promise: EventLoopPromise<FrameLevelConnection.Response>
    }

    /// How long a request may wait for its whole response (as ParleyClient's request timeout).
    private static let requestTimeout = TimeAmount.seconds(15)

    private let authority: String
    /// The `authorization` header's value, made once.
    private let authorization: String
    private let onEvent: @Sendable (FrameLevelConnection.StreamEvent) -> Void
    private var context: ChannelHandlerContext?
    private var reader = HTTP2ClientFrameReader()
    private var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
    private var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
    private var nextStreamID: UInt32 = 1
    private var pending: [UInt32: Pending] = [:]
    private var waiting = Deque<Waiting>()
    private var eventsStream: UInt32?
    private var parser = ServerSentEventParser()
    private var failure: String?
    private var prefaceSent = false
    /// What the peer allows: streams open at once, each new stream's window, the connection's window.
    private var peerMaxStreams = Int.max
    private var peerStreamWindow = HTTP2ClientFrame.initialWindow
    private var sendWindow = HTTP2ClientFrame.initialWindow
    /// DATA bytes read and not yet credited back, on the connection and on the event stream.
    private var connectionUncredited = 0
    private var eventsUncredited = 0
    private static let creditEvery = 16 * 1024
    /// Frames written since the last flush.
    private var unflushed = false

    init(authority: String, token: String, onEvent: @escaping @Sendable (FrameLevelConnection.StreamEvent) -> Void) {
        self.authority = authority
        self.authorization = "Bearer \(token)"
        self.onEvent = onEvent
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { sendPreface(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

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

    func openEvents() {
        eventsStream = write(method: "GET", path: "/v1/events", body: nil)
        flushIfNeeded()
    }

    /// The run is over: what ends from now on is no failure.
    func closing() {
        failure = failure ?? "the connection was closed by the load generator"
        failRequests(ParleyError.connectionFailed("the connection was closed"))
    }

    func request(method: String, path: String, body: ByteBuffer, promise: EventLoopPromise<FrameLevelConnection.Response>) {
        if let failure {
            promise.fail(ParleyError.connectionFailed(failure))
            return
        }
        guard body.readableBytes <= min(peerStreamWindow, HTTP2ClientFrame.maxPayload) else {
            promise.fail(ParleyError(status: 0, code: "invalid_request", message: "a body of \(body.readableBytes) bytes is over one DATA frame or the gateway's stream window", retryable: false))
            return
        }
        waiting.append(Waiting(method: method, path: path, body: body, promise: promise))
        startWaiting()
        flushIfNeeded()
    }

    /// Starts the waiting requests that the peer's limits let through, in order.
    private func startWaiting() {
        while let next = waiting.first, pending.count + (eventsStream == nil ? 0 : 1) < peerMaxStreams,
            next.body.readableBytes <= sendWindow
        {
            waiting.removeFirst()
            guard let context, let stream = write(method: next.method, path: next.path, body: next.body) else {
                next.promise.fail(ParleyError.connectionFailed("the connection is closed"))
                continue
            }
            pending[stream] = Pending(promise: next.promise, deadline: .now() + Self.requestTimeout)
            if sweep == nil { scheduleSweep(context: context) }
        }
    }

    /// One timer per connection while requests are in flight, instead of one per request: a
    /// request's timer was scheduled and cancelled thousands of times a second, and NIO finds a
    /// cancelled timer by a linear search of its loop's timers.
    private var sweep: Scheduled<Void>?

    private func scheduleSweep(context: ChannelHandlerContext) {
        guard let first = pending.values.lazy.map(\.deadline).min() else { return }
        sweep = context.eventLoop.assumeIsolated().scheduleTask(deadline: first) { [self] in
            sweep = nil
            sweepTimeouts()
        }
    }

    /// Fails the requests whose deadline has passed (each stream reset with CANCEL) and sets the
    /// timer for the next deadline.
    private func sweepTimeouts() {
        let now = NIODeadline.now()
        for (stream, request) in pending where request.deadline <= now {
            pending[stream] = nil
            request.promise.fail(ParleyError(status: 0, code: "timeout", message: "no answer within \(Self.requestTimeout)", retryable: true))
            writeFrames { HTTP2ClientFrameWriter.rstStream(stream: stream, code: 0x8, into: &$0) }  // CANCEL
        }
        flushIfNeeded()
        startWaiting()
        if sweep == nil, let context { scheduleSweep(context: context) }
    }

    private func write(method: String, path: String, body: ByteBuffer?) -> UInt32? {
        guard context != nil else { return nil }
        let stream = nextStreamID
        nextStreamID += 2
        var headers = HPACKHeaders([
            (":method", method), (":scheme", "https"), (":authority", authority), (":path", path),
            ("authorization", authorization),
        ])
        if let body {
            headers.add(name: "content-type", value: "application/json")
            headers.add(name: "content-length", value: String(body.readableBytes))
        }
        do {
            try writeFrames { buffer in
                try HTTP2ClientFrameWriter.headers(stream: stream, endStream: body == nil, into: &buffer) { try encoder.encode(headers: headers, to: &$0) }
                if let body { HTTP2ClientFrameWriter.data(stream: stream, payload: body, endStream: true, into: &buffer) }
            }
        } catch {
            fail("the request's headers could not be encoded: \(error)")
            return nil
        }
        if let body { sendWindow -= body.readableBytes }
        return stream
    }

    /// Writes the frames `fill` puts in one buffer; the next flush sends them.
    private func writeFrames(_ fill: (inout ByteBuffer) throws -> Void) rethrows {
        guard let context else { return }
        var buffer = context.channel.allocator.buffer(capacity: 256)
        try fill(&buffer)
        context.write(wrapOutboundOut(buffer), promise: nil)
        unflushed = true
    }

    private func flushIfNeeded() {
        guard unflushed, let context else { return }
        unflushed = false
        context.flush()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        reader.append(&bytes)
        do {
            while failure == nil, let frame = try reader.next() { try handle(frame) }
        } catch {
            fail("the gateway broke HTTP/2: \(error)")
            context.close(promise: nil)
        }
    }

    private func handle(_ frame: HTTP2ClientFrame) throws {
        switch frame {
        case .headers(let stream, var block, let endStream):
            // Every block is decoded, in order, whoever it is for: HPACK's table depends on it.
            let headers = try decoder.decodeHeaders(from: &block)
            let status = headers.first(name: ":status").flatMap { Int($0) } ?? 0
            if stream == eventsStream {
                if status != 200 { fail("the event stream answered \(status)") }
                if endStream { fail("the gateway ended the event stream") }
            } else if var request = pending[stream] {
                request.status = max(request.status, status)  // trailers carry no :status
                pending[stream] = request
                if endStream { complete(stream) }
            }
        case .data(let stream, var payload, let endStream, let flowControlled):
            connectionUncredited += flowControlled
            if stream == eventsStream {
                eventsUncredited += flowControlled
                for sse in parser.feed(payload.readableBytesView) {
                    switch ParleyClient.decode(sse, decoder: FrameLevelConnection.decoder) {
                    case .ready: onEvent(.ready)
                    case .message(let message): onEvent(.message(message))
                    default: break
                    }
                }
                if endStream { fail("the gateway ended the event stream") }
            } else if pending[stream] != nil {
                pending[stream]?.body.writeBuffer(&payload)
                if endStream { complete(stream) }
            }
        case .rstStream(let stream, let code):
            if stream == eventsStream {
                fail("the gateway reset the event stream (code \(code))")
            } else if let request = pending.removeValue(forKey: stream) {
                request.promise.fail(ParleyError.connectionFailed("the gateway reset the request's stream (code \(code))"))
                startWaiting()
            }
        case .settings(let ack, let values):
            guard !ack else { return }
            for setting in values {
                switch setting.id {
                case HTTP2ClientFrame.Setting.maxConcurrentStreams:
                    peerMaxStreams = Int(setting.value)
                case HTTP2ClientFrame.Setting.initialWindowSize:
                    peerStreamWindow = Int(setting.value)
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
        case .goAway(_, let code):
            fail("the gateway closed the connection (GOAWAY code \(code))")
        case .windowUpdate(let stream, let increment):
            if stream == 0 {
                sendWindow += Int(increment)
                startWaiting()
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
        if let eventsStream, eventsUncredited >= Self.creditEvery {
            let increment = eventsUncredited
            writeFrames { HTTP2ClientFrameWriter.windowUpdate(stream: eventsStream, increment: increment, into: &$0) }
            eventsUncredited = 0
        }
        flushIfNeeded()
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail("the connection closed")
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail("\(error)")
        context.close(promise: nil)
    }

    private func complete(_ stream: UInt32) {
        guard let request = pending.removeValue(forKey: stream) else { return }
        request.promise.succeed(.init(status: request.status, body: request.body))
        startWaiting()
    }

    /// The first failure ends the event stream and every request in flight or waiting.
    private func fail(_ reason: String) {
        guard failure == nil else { return }
        failure = reason
        if eventsStream != nil { onEvent(.failed(reason)) }
        failRequests(ParleyError.connectionFailed(reason))
    }

    private func failRequests(_ error: ParleyError) {
        let requests = pending
        pending = [:]
        let queued = waiting
        waiting = []
        for request in requests.values { request.promise.fail(error) }
        for request in queued { request.promise.fail(error) }
    }
}

extension ParleyError {
    static func connectionFailed(_ reason: String) -> ParleyError {
        ParleyError(status: 0, code: "connection_failed", message: reason, retryable: true)
    }
}
