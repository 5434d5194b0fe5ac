import DequeModule
import Foundation
import NIOCore
import NIOHPACK
import ParleyHTTP2Client
import NIOPosix
import NIOSSL
import ParleyClient
import ParleyLoad
import ParleyModel
import Synchronization

/// One user's connection to a gateway, driven frame by frame (``HTTP2ClientConnection``): TLS with
/// ALPN `h2`, HTTP/2 without a channel per stream, the user's event stream on one HTTP/2 stream and
/// each send on a stream of its own — what an app's connection looks like to the gateway, for less
/// of the load generator's CPU, which shares the servers' cores: AsyncHTTPClient builds a child
/// channel pipeline and a task chain per request (the client engine took 0.47–0.56 core at 500
/// msg/s here, this one 0.33–0.37).
///
/// With `sends: .stream` the user's sends go as lines of one send stream (`POST /v1/sends`)
/// instead; with `.webSocket` as text messages of the same stream as a WebSocket over HTTP/2
/// (`CONNECT /v1/sends`, RFC 8441), as the web client sends.
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

    private let connection: HTTP2ClientConnection
    private let authorization: String
    /// Whether the load generator closed the connection: what ends from then on is no failure.
    private let closed = Atomic(false)
    /// How the user's messages are sent.
    enum Sends: Sendable {
        /// `POST /v1/conversations/{id}/messages`, a request each.
        case requests
        /// Lines of one send stream, `POST /v1/sends`.
        case stream
        /// Text messages of the send stream's WebSocket, `CONNECT /v1/sends`.
        case webSocket
    }

    /// With `--engine stream` or `websocket`: the user's send stream, on the connection's loop.
    private let sendStream: NIOLoopBoundBox<SendStream>?
    private let sends: Sends

    /// The send stream's lines waiting for their stream, and the sends waiting for their answers,
    /// which come in the order of the lines.
    private final class SendStream {
        var stream: UInt32?
        var unstarted: [ByteBuffer] = []
        var waiting = Deque<@Sendable (Result<Message, any Error>) -> Void>()
        var lines = JSONLines(limit: 1 << 20)
        /// A WebSocket's frames, and whether its first answer (to the token) is still to come.
        var frames = WebSocketMessages(limit: 1 << 20, from: .server)
        var named = false

        /// Every send still waiting fails with `error`.
        func failAll(_ error: any Error) {
            let failed = waiting
            waiting = []
            for completion in failed { completion(.failure(error)) }
        }
    }

    /// How long a request may wait for its whole response (as ParleyClient's request timeout).
    private static let requestTimeout = TimeAmount.seconds(15)

    private init(connection: HTTP2ClientConnection, token: String, sends: Sends) {
        self.connection = connection
        self.authorization = "Bearer \(token)"
        self.sends = sends
        let state = SendStream()
        if sends == .webSocket {
            // The socket's first message, written as soon as its stream starts.
            let hello = (try? API.makeEncoder().encode(API.SendStreamHello(token: token))).map { Array($0) } ?? []
            state.unstarted.append(ByteBuffer(bytes: Self.maskedText(hello)))
        }
        self.sendStream = sends == .requests ? nil : NIOLoopBoundBox.makeBoxSendingValue(state, eventLoop: connection.eventLoop)
    }

    /// A client's text frame (RFC 6455: masked, with a key of its own).
    private static func maskedText(_ payload: some Collection<UInt8>) -> [UInt8] {
        let key = UInt32.random(in: .min ... .max)
        return WebSocketMessages.frame(.text, payload, mask: [UInt8(key >> 24), UInt8(key >> 16 & 0xFF), UInt8(key >> 8 & 0xFF), UInt8(key & 0xFF)])
    }

    /// Connects to `gateway` (`https://host:port`) and opens the user's event stream, and unless it
    /// sends by request its send stream (a WebSocket once the event stream's head shows the
    /// server's SETTINGS came).
    static func open(
        gateway: URL, tls: NIOSSLContext, token: String, sends: Sends = .requests, onEvent: @escaping @Sendable (StreamEvent) -> Void
    ) async throws -> FrameLevelConnection {
        guard let host = gateway.host, let port = gateway.port ?? (gateway.scheme == "https" ? 443 : nil) else {
            throw ParleyError(status: 0, code: "invalid_configuration", message: "\(gateway) has no host and port", retryable: false)
        }
        let http2 = try await HTTP2ClientConnection.connect(.init(host: host, port: port, tls: tls), on: MultiThreadedEventLoopGroup.singleton.next()).get()
        let connection = FrameLevelConnection(connection: http2, token: token, sends: sends)
        http2.eventLoop.execute {
            connection.openEvents(onEvent: onEvent)
            if sends == .stream { connection.openSendStream() }
        }
        return connection
    }

    /// The event loop the connection runs on.
    var eventLoop: any EventLoop { connection.eventLoop }

    /// `GET /v1/events`: its events go to `onEvent`; its end, or the connection's, is a failure
    /// unless the load generator closed the connection. On the event loop.
    private func openEvents(onEvent: @escaping @Sendable (StreamEvent) -> Void) {
        var parser = ServerSentEventParser()
        let connection = self.connection
        let streaming = HTTP2ClientStreaming(
            head: { [self] status, _ in
                if status != 200 { _ = connection.close(reason: "the event stream answered \(status)") }
                // RFC 8441: no `:protocol` before the server's SETTINGS allow it, which precede
                // any response.
                if sends == .webSocket { openSendStream() }
            },
            data: { bytes in
                for sse in parser.feed(bytes.readableBytesView) {
                    switch ParleyClient.decode(sse, decoder: Self.decoder) {
                    case .ready: onEvent(.ready)
                    case .message(let message): onEvent(.message(message))
                    default: break
                    }
                }
            })
        let promise = eventLoop.makePromise(of: HTTP2ClientResponse.self)
        promise.futureResult.whenComplete { [self] result in
            guard !closed.load(ordering: .relaxed) else { return }
            switch result {
            case .success:
                onEvent(.failed("the gateway ended the event stream"))
                _ = connection.close(reason: "the gateway ended the event stream")
            case .failure(let error):
                onEvent(.failed("\(error)"))
            }
        }
        connection.executeOnLoop(
            HTTP2ClientRequest(method: "GET", path: "/v1/events", headers: ["authorization": authorization], timeout: nil), streaming: streaming,
            promise: promise)
    }

    /// Where a conversation's messages are sent (worked out once per conversation by a caller
    /// that sends thousands a second).
    static func messagesPath(_ conversation: ConversationID) -> String {
        "/v1/conversations/\(conversation.rawValue.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? conversation.rawValue)/messages"
    }

    /// `POST /v1/sends` (or its WebSocket), its body written line by line
    /// (``send(_:attachments:to:path:clientMessageId:completion:)``), each answer going to the send
    /// that waits longest. On the event loop.
    private func openSendStream() {
        guard let sendStream else { return }
        let connection = self.connection
        let webSocket = sends == .webSocket
        let streaming = HTTP2ClientStreaming(
            head: { status, _ in
                if status != 200 { _ = connection.close(reason: "the send stream answered \(status)") }
            },
            data: { bytes in
                let state = sendStream.value
                guard webSocket else {
                    state.lines.append(bytes.readableBytesView)
                    while let line = state.lines.next() {
                        guard case .line(let bytes) = line, let completion = state.waiting.popFirst() else { continue }
                        completion(Result { try API.StreamedAnswer.read(bytes, decoder: Self.decoder).acknowledged() })
                    }
                    return
                }
                state.frames.append(bytes.readableBytesView)
                while let message = state.frames.next() {
                    switch message {
                    case .text(let bytes) where !state.named:
                        state.named = true
                        let status = (try? API.StreamedAnswer.read(bytes, decoder: Self.decoder))?.status
                        if status != 200 { _ = connection.close(reason: "the send socket refused the token: \(status.map(String.init) ?? "no answer")") }
                    case .text(let bytes):
                        guard let completion = state.waiting.popFirst() else { continue }
                        completion(Result { try API.StreamedAnswer.read(bytes, decoder: Self.decoder).acknowledged() })
                    case .ping, .pong:
                        continue
                    case .close(let code):
                        _ = connection.close(reason: "the gateway closed the send socket (\(code.map(String.init) ?? "no code"))")
                    case .failed(let code):
                        _ = connection.close(reason: "the send socket's frames broke RFC 6455 (\(code))")
                    }
                }
            },
            started: { stream in
                let state = sendStream.value
                state.stream = stream
                for line in state.unstarted { connection.writeBodyOnLoop(stream: stream, line, end: false) }
                state.unstarted = []
            })
        let promise = eventLoop.makePromise(of: HTTP2ClientResponse.self)
        promise.futureResult.whenComplete { [self] result in
            let reason: String
            switch result {
            case .success: reason = "the gateway ended the send stream"
            case .failure(let error): reason = "\(error)"
            }
            sendStream.value.failAll(ParleyError.connectionFailed(reason))
            if !closed.load(ordering: .relaxed) { _ = connection.close(reason: reason) }
        }
        var request = HTTP2ClientRequest(
            method: "POST", path: "/v1/sends", headers: ["authorization": authorization, "content-type": "application/x-ndjson"], timeout: nil,
            bodyStreams: true)
        if webSocket {
            request = HTTP2ClientRequest(method: "CONNECT", path: "/v1/sends", headers: ["sec-websocket-version": "13"], timeout: nil, bodyStreams: true)
            request.extendedConnectProtocol = "websocket"
        }
        connection.executeOnLoop(request, streaming: streaming, promise: promise)
    }

    /// Sends a message: on the send stream (`--engine stream`), else `POST` to `path`
    /// (``messagesPath(_:)``): the acknowledged message, or the API's error. Made from the
    /// connection's event loop (call it there), with no task: what ``OpenLoop/run(on:send:)``
    /// starts. `completion` runs on the loop.
    func send(
        _ text: String, attachments: [API.NewAttachment]? = nil, to conversation: ConversationID, path: String, clientMessageId: String,
        completion: @escaping @Sendable (Result<Message, any Error>) -> Void
    ) {
        let message = API.NewMessage(clientMessageId: clientMessageId, text: text, attachments: attachments)
        if let sendStream {
            let state = sendStream.value
            state.waiting.append(completion)
            let jsonLine = API.StreamedCommand(conversationId: conversation, .message(message)).jsonLine
            let line = ByteBuffer(bytes: sends == .webSocket ? Self.maskedText(jsonLine.dropLast()) : jsonLine)
            if let stream = state.stream {
                connection.writeBodyOnLoop(stream: stream, line, end: false)
            } else {
                state.unstarted.append(line)
            }
            return
        }
        let body = ByteBuffer(bytes: message.json)
        let promise = eventLoop.makePromise(of: HTTP2ClientResponse.self)
        promise.futureResult.whenComplete { result in
            completion(
                result.mapError { error in
                    if let error = error as? HTTP2ClientError, error.kind == .timedOut {
                        return ParleyError(status: 0, code: "timeout", message: error.reason, retryable: true)
                    }
                    return ParleyError.connectionFailed("\(error)")
                }
                    .flatMap { response in Result { try Self.message(from: response) } })
        }
        let request = HTTP2ClientRequest(
            method: "POST", path: path, headers: ["authorization": authorization, "content-type": "application/json"], body: body,
            timeout: Self.requestTimeout)
        connection.executeOnLoop(request, streaming: nil, promise: promise)
    }

    /// A send's response: the acknowledged message, or the API's error.
    private static func message(from response: HTTP2ClientResponse) throws -> Message {
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
        closed.store(true, ordering: .relaxed)
        try? await connection.close(reason: "the connection was closed by the load generator").get()
    }

    static let decoder = API.makeDecoder()
}

extension ParleyError {
    static func connectionFailed(_ reason: String) -> ParleyError {
        ParleyError(status: 0, code: "connection_failed", message: reason, retryable: true)
    }
}
