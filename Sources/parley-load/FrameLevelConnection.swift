import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import ParleyClient
import ParleyModel

/// One user's connection to a gateway, driven frame by frame: TLS with ALPN `h2`, HTTP/2 without
/// a channel per stream, the user's event stream on one HTTP/2 stream and each send on a stream of
/// its own — what an app's connection looks like to the gateway, for less of the load generator's
/// CPU, which shares the servers' cores: AsyncHTTPClient builds a child channel pipeline and a task
/// chain per request (the client engine took 0.47–0.56 core at 500 msg/s here, this one 0.33–0.37).
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
                    try sync.addHandler(NIOHTTP2Handler(mode: .client))
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

/// The connection's HTTP/2 frames: client streams get odd IDs in order; responses are collected
/// per stream; the event stream's DATA goes through the SSE parser; flow-control credit is given
/// back as data is read (this handler stands where NIOHTTP2's stream multiplexer would).
private final class FrameLevelHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private struct Pending {
        var promise: EventLoopPromise<FrameLevelConnection.Response>
        var status = 0
        var body = ByteBuffer()
        var timeout: Scheduled<Void>?

        func fail(_ error: ParleyError) {
            timeout?.cancel()
            promise.fail(error)
        }
    }

    /// How long a request may wait for its whole response (as ParleyClient's request timeout).
    private static let requestTimeout = TimeAmount.seconds(15)

    private let authority: String
    private let token: String
    private let onEvent: @Sendable (FrameLevelConnection.StreamEvent) -> Void
    private var context: ChannelHandlerContext?
    private var nextStreamID = HTTP2StreamID(1)
    private var pending: [HTTP2StreamID: Pending] = [:]
    private var eventsStream: HTTP2StreamID?
    private var parser = ServerSentEventParser()
    private var failure: String?
    /// DATA bytes read and not yet credited back, on the connection and on the event stream.
    private var connectionUncredited = 0
    private var eventsUncredited = 0
    private static let creditEvery = 16 * 1024

    init(authority: String, token: String, onEvent: @escaping @Sendable (FrameLevelConnection.StreamEvent) -> Void) {
        self.authority = authority
        self.token = token
        self.onEvent = onEvent
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func openEvents() {
        eventsStream = write(method: "GET", path: "/v1/events", body: nil)
    }

    /// The run is over: what ends from now on is no failure.
    func closing() {
        failure = failure ?? "the connection was closed by the load generator"
        let requests = pending
        pending = [:]
        for request in requests.values { request.fail(ParleyError.connectionFailed("the connection was closed")) }
    }

    func request(method: String, path: String, body: ByteBuffer, promise: EventLoopPromise<FrameLevelConnection.Response>) {
        if let failure {
            promise.fail(ParleyError.connectionFailed(failure))
            return
        }
        guard let context, let stream = write(method: method, path: path, body: body) else {
            promise.fail(ParleyError.connectionFailed("the connection is closed"))
            return
        }
        let timeout = context.eventLoop.assumeIsolated().scheduleTask(in: Self.requestTimeout) { [self] in
            guard let request = pending.removeValue(forKey: stream) else { return }
            request.promise.fail(ParleyError(status: 0, code: "timeout", message: "no answer within \(Self.requestTimeout)", retryable: true))
            self.context?.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .rstStream(.cancel))), promise: nil)
        }
        pending[stream] = Pending(promise: promise, timeout: timeout)
    }

    private func write(method: String, path: String, body: ByteBuffer?) -> HTTP2StreamID? {
        guard let context else { return nil }
        let stream = nextStreamID
        nextStreamID = HTTP2StreamID(Int32(stream) + 2)
        var headers = HPACKHeaders([
            (":method", method), (":scheme", "https"), (":authority", authority), (":path", path),
            ("authorization", "Bearer \(token)"),
        ])
        if let body {
            headers.add(name: "content-type", value: "application/json")
            headers.add(name: "content-length", value: String(body.readableBytes))
        }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .headers(.init(headers: headers, endStream: body == nil)))), promise: nil)
        if let body {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .data(.init(data: .byteBuffer(body), endStream: true)))), promise: nil)
        }
        context.flush()
        return stream
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            let status = headers.headers.first(name: ":status").flatMap { Int($0) } ?? 0
            if frame.streamID == eventsStream {
                if status != 200 { fail("the event stream answered \(status)") }
            } else if var request = pending[frame.streamID] {
                request.status = max(request.status, status)  // trailers carry no :status
                pending[frame.streamID] = request
                if headers.endStream { complete(frame.streamID) }
            }
        case .data(let payload):
            guard case .byteBuffer(var bytes) = payload.data else { return }
            connectionUncredited += bytes.readableBytes + (payload.paddingBytes ?? 0)
            if frame.streamID == eventsStream {
                eventsUncredited += bytes.readableBytes + (payload.paddingBytes ?? 0)
                for sse in parser.feed(bytes.readableBytesView) {
                    switch ParleyClient.decode(sse, decoder: FrameLevelConnection.decoder) {
                    case .ready: onEvent(.ready)
                    case .message(let message): onEvent(.message(message))
                    default: break
                    }
                }
                if payload.endStream { fail("the gateway ended the event stream") }
            } else if pending[frame.streamID] != nil {
                pending[frame.streamID]?.body.writeBuffer(&bytes)
                if payload.endStream { complete(frame.streamID) }
            }
        case .rstStream(let code):
            if frame.streamID == eventsStream {
                fail("the gateway reset the event stream (\(code))")
            } else if let request = pending.removeValue(forKey: frame.streamID) {
                request.fail(ParleyError.connectionFailed("the gateway reset the request's stream (\(code))"))
            }
        case .goAway(_, let code, _):
            fail("the gateway closed the connection (GOAWAY \(code))")
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        var credited = false
        if connectionUncredited >= Self.creditEvery {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: connectionUncredited))), promise: nil)
            connectionUncredited = 0
            credited = true
        }
        if let eventsStream, eventsUncredited >= Self.creditEvery {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: eventsStream, payload: .windowUpdate(windowSizeIncrement: eventsUncredited))), promise: nil)
            eventsUncredited = 0
            credited = true
        }
        if credited { context.flush() }
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail("the connection closed")
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail("\(error)")
        context.close(promise: nil)
    }

    private func complete(_ stream: HTTP2StreamID) {
        guard let request = pending.removeValue(forKey: stream) else { return }
        request.timeout?.cancel()
        request.promise.succeed(.init(status: request.status, body: request.body))
    }

    /// The first failure ends the event stream and every request in flight.
    private func fail(_ reason: String) {
        guard failure == nil else { return }
        failure = reason
        if eventsStream != nil { onEvent(.failed(reason)) }
        let requests = pending
        pending = [:]
        for request in requests.values { request.fail(ParleyError.connectionFailed(reason)) }
    }
}

extension ParleyError {
    static func connectionFailed(_ reason: String) -> ParleyError {
        ParleyError(status: 0, code: "connection_failed", message: reason, retryable: true)
    }
}
