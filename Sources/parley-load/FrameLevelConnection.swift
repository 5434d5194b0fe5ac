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
/// With `sendsOnStream` the user's sends go as lines of one send stream (`POST /v1/sends`) instead.
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
    /// With `--engine stream`: the user's send stream (`POST /v1/sends`), on the connection's loop.
    private let sendStream: NIOLoopBoundBox<SendStream>?

    /// The send stream's lines waiting for their stream, and the sends waiting for their answers,
    /// which come in the order of the lines.
    private final class SendStream {
        var stream: UInt32?
        var unstarted: [ByteBuffer] = []
        var waiting = Deque<@Sendable (Result<Message, any Error>) -> Void>()
        var lines = JSONLines(limit: 1 << 20)

        /// Every send still waiting fails with `error`.
        func failAll(_ error: any Error) {
            let failed = waiting
            waiting = []
            for completion in failed { completion(.failure(error)) }
        }
    }

    /// How long a request may wait for its whole response (as ParleyClient's request timeout).
    private static let requestTimeout = TimeAmount.seconds(15)

    private init(connection: HTTP2ClientConnection, token: String, sendsOnStream: Bool) {
        self.connection = connection
        self.authorization = "Bearer \(token)"
        self.sendStream = sendsOnStream ? NIOLoopBoundBox.makeBoxSendingValue(SendStream(), eventLoop: connection.eventLoop) : nil
    }

    /// Connects to `gateway` (`https://host:port`) and opens the user's event stream, and with
    /// `sendsOnStream` its send stream.
    static func open(
        gateway: URL, tls: NIOSSLContext, token: String, sendsOnStream: Bool = false, onEvent: @escaping @Sendable (StreamEvent) -> Void
    ) async throws -> FrameLevelConnection {
        guard let host = gateway.host, let port = gateway.port ?? (gateway.scheme == "https" ? 443 : nil) else {
            throw ParleyError(status: 0, code: "invalid_configuration", message: "\(gateway) has no host and port", retryable: false)
        }
        let http2 = try await HTTP2ClientConnection.connect(.init(host: host, port: port, tls: tls), on: MultiThreadedEventLoopGroup.singleton.next()).get()
        let connection = FrameLevelConnection(connection: http2, token: token, sendsOnStream: sendsOnStream)
        http2.eventLoop.execute {
            connection.openEvents(onEvent: onEvent)
            connection.openSendStream()
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
            head: { status, _ in
                if status != 200 { _ = connection.close(reason: "the event stream answered \(status)") }
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

    /// `POST /v1/sends`, its body written line by line (``send(_:attachments:to:path:clientMessageId:completion:)``),
    /// each answer going to the send that waits longest. On the event loop.
    private func openSendStream() {
        guard let sendStream else { return }
        let connection = self.connection
        let streaming = HTTP2ClientStreaming(
            head: { status, _ in
                if status != 200 { _ = connection.close(reason: "the send stream answered \(status)") }
            },
            data: { bytes in
                let state = sendStream.value
                state.lines.append(bytes.readableBytesView)
                while let line = state.lines.next() {
                    guard case .line(let bytes) = line, let completion = state.waiting.popFirst() else { continue }
                    completion(Result { try API.StreamedAnswer.read(bytes, decoder: Self.decoder).acknowledged() })
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
        connection.executeOnLoop(
            HTTP2ClientRequest(
                method: "POST", path: "/v1/sends", headers: ["authorization": authorization, "content-type": "application/x-ndjson"], timeout: nil,
                bodyStreams: true),
            streaming: streaming, promise: promise)
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
            let line = ByteBuffer(bytes: API.StreamedCommand(conversationId: conversation, .message(message)).jsonLine)
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
