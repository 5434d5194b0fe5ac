import DequeModule
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP1
import NIOPosix
import NIOSSL
import ParleyHTTP2Client
import ParleyModel
import Synchronization

/// The gateway's send stream (`POST /v1/sends`) as a client uses it: opened at the first send,
/// each send a line of its body whose answer comes, in order, as a line of its response. When it
/// ends (the gateway went, the connection dropped) or an answer is late (a gateway that hangs),
/// the sends still waiting fail as retryable (the outbox sends them again with the same
/// `clientMessageId`) and the next send opens a new stream. A gateway that does not offer it
/// (`404`, `400 http2_required`, or an `http://` URL: the gateway speaks HTTP/2 only over TLS) is
/// remembered, and sends to it go as requests.
///
/// It runs on a connection of its own to the gateway, driven frame by frame
/// (``HTTP2ClientConnection``), not on AsyncHTTPClient's: when a stream's response has ended while
/// its request body is still open and the stream is then reset — what a gateway does, as RFC 9113
/// section 8.1 allows, when it ends a send stream (a revoked token) — AsyncHTTPClient 1.37's
/// HTTP/2 request handler force-unwraps a request it has already let go and the process stops.
///
/// All its state lives on one event loop; ``send(_:to:token:timeout:)`` is called from any task.
final class SendStream: Sendable {
    private struct State {
        /// The open stream new sends go on, if any.
        var current: Int?
        var streams: [Int: OpenStream] = [:]
        var generation = 0
        /// The connection new streams go on, and every connection still carrying a stream.
        var currentConnection: Int?
        var connections: [Int: Connection] = [:]
        var connectionNumber = 0
        var nextWaiter = 0
        /// Gateways that answered that they have no send stream.
        var refusedBy: Set<URL> = []
        var closed = false
    }

    /// One `POST /v1/sends`.
    private struct OpenStream {
        var gateway: URL
        var token: String
        var connection: Int
        /// Its HTTP/2 stream, once its headers are written; the lines before that wait.
        var id: UInt32?
        var unstarted: [ByteBuffer] = []
        /// The sends waiting for their answers, which come in the order of the lines.
        var waiting = Deque<Waiter>()
        var answers = JSONLines(limit: 1 << 20)
        var status = 0
        var headers = HPACKHeaders()
        /// A refusal's body (its status is not 200), kept to say why.
        var refusal = ByteBuffer()
    }

    private struct Waiter {
        var id: Int
        var promise: EventLoopPromise<API.StreamedAnswer?>
        var timer: Scheduled<Void>
    }

    private struct Connection {
        var gateway: URL
        /// Nil while it connects.
        var http2: HTTP2ClientConnection?
        var streams: Set<Int> = []
        /// False once a stream on it went unanswered: new streams go on a new connection.
        var reusable = true
    }

    private let loop: any EventLoop
    private let state: NIOLoopBoundBox<State>
    /// Answers read from send streams (sends that did not go by request).
    let answered = Atomic(0)
    /// Nil when the TLS configuration cannot be made into a context: sends then go by request,
    /// whose failure says why.
    private let tls: NIOSSLContext?
    private let connectTimeout: TimeAmount
    private let userAgent: String?
    private let logger: Logger

    init(tls: TLSConfiguration, connectTimeout: TimeAmount, userAgent: String?, logger: Logger) {
        var tls = tls
        tls.applicationProtocols = ["h2"]
        self.tls = try? NIOSSLContext(configuration: tls)
        self.loop = MultiThreadedEventLoopGroup.singleton.next()
        self.state = NIOLoopBoundBox.makeBoxSendingValue(State(), eventLoop: loop)
        self.connectTimeout = connectTimeout
        self.userAgent = userAgent
        self.logger = logger
    }

    /// Sends `command` on the stream to `gateway` (opened with `token` if none is open) and
    /// returns its answer; nil when the gateway has no send stream. Throws a retryable
    /// ``ParleyError`` when the stream ended before the answer came, or no answer came within
    /// `timeout` (a gateway that hangs): the stream is then given up, with every send waiting on it.
    func send(_ command: API.StreamedCommand, to gateway: URL, token: String, timeout: Duration) async throws -> API.StreamedAnswer? {
        let line = ByteBuffer(bytes: command.jsonLine)
        let promise = loop.makePromise(of: API.StreamedAnswer?.self)
        loop.execute { [self] in send(line, to: gateway, token: token, timeout: TimeAmount(timeout), promise: promise) }
        return try await promise.futureResult.get()
    }

    /// Ends every stream (the sends still waiting fail as retryable) and closes the connections.
    func close() async {
        let closed = loop.flatSubmit { [self] () -> EventLoopFuture<Void> in
            state.value.closed = true
            for generation in state.value.streams.keys { ended(generation, failing: ParleyError.unreachable("the client was shut down")) }
            let connections = state.value.connections.values.compactMap(\.http2)
            state.value.connections = [:]
            state.value.currentConnection = nil
            return EventLoopFuture.andAllComplete(connections.map { $0.close(reason: "the client was shut down") }, on: loop)
        }
        try? await closed.get()
    }

    // MARK: On the loop

    private func send(_ line: ByteBuffer, to gateway: URL, token: String, timeout: TimeAmount, promise: EventLoopPromise<API.StreamedAnswer?>) {
        guard !state.value.closed else { return promise.fail(ParleyError.unreachable("the client was shut down")) }
        guard gateway.scheme == "https", tls != nil, !state.value.refusedBy.contains(gateway) else { return promise.succeed(nil) }
        if let current = state.value.current, let open = state.value.streams[current], open.gateway != gateway || open.token != token {
            // The old stream answers what it has; its sends still get their answers.
            endBody(of: current)
            state.value.current = nil
        }
        let generation = state.value.current ?? open(to: gateway, token: token)
        state.value.nextWaiter += 1
        let id = state.value.nextWaiter
        let timer = loop.assumeIsolated().scheduleTask(in: timeout) { [self] in
            guard state.value.streams[generation]?.waiting.contains(where: { $0.id == id }) == true else { return }
            if let connection = state.value.streams[generation]?.connection { state.value.connections[connection]?.reusable = false }
            ended(generation, failing: ParleyError.unreachable("no answer on the send stream within \(timeout.nanoseconds / 1_000_000) ms"))
        }
        state.value.streams[generation]?.waiting.append(Waiter(id: id, promise: promise, timer: timer))
        write(line, on: generation)
    }

    /// Opens a stream to `gateway`, on the connection to it if one is usable; its lines wait until
    /// its headers are written.
    private func open(to gateway: URL, token: String) -> Int {
        state.value.generation += 1
        let generation = state.value.generation
        let connection = connection(to: gateway)
        state.value.streams[generation] = OpenStream(gateway: gateway, token: token, connection: connection)
        state.value.connections[connection]?.streams.insert(generation)
        state.value.current = generation
        if let http2 = state.value.connections[connection]?.http2 { start(generation, on: http2) }
        return generation
    }

    private func connection(to gateway: URL) -> Int {
        if let number = state.value.currentConnection, let connection = state.value.connections[number], connection.gateway == gateway, connection.reusable,
            connection.http2?.isUsable ?? true
        {
            return number
        }
        let old = state.value.currentConnection
        state.value.connectionNumber += 1
        let number = state.value.connectionNumber
        state.value.connections[number] = Connection(gateway: gateway)
        state.value.currentConnection = number
        if let old { closeIfUnused(old) }
        let host = gateway.host ?? ""
        var configuration = HTTP2ClientConnection.Configuration(host: host, port: gateway.port ?? 443, tls: tls)
        configuration.connectTimeout = connectTimeout
        HTTP2ClientConnection.connect(configuration, on: loop).whenComplete { [self] result in connected(number, result) }
        return number
    }

    private func connected(_ number: Int, _ result: Result<HTTP2ClientConnection, any Error>) {
        guard let connection = state.value.connections[number] else {
            // Given up while it connected.
            if case .success(let http2) = result { _ = http2.close(reason: "no longer needed") }
            return
        }
        switch result {
        case .success(let http2):
            state.value.connections[number]?.http2 = http2
            for generation in connection.streams.sorted() { start(generation, on: http2) }
        case .failure(let error):
            state.value.connections[number] = nil
            if state.value.currentConnection == number { state.value.currentConnection = nil }
            let reason = ParleyError.unreachable("cannot connect to \(connection.gateway) for the send stream: \(error)")
            for generation in connection.streams.sorted() { ended(generation, failing: reason) }
        }
    }

    private func start(_ generation: Int, on http2: HTTP2ClientConnection) {
        guard let open = state.value.streams[generation] else { return }
        var headers: HPACKHeaders = ["authorization": "Bearer \(open.token)", "content-type": "application/x-ndjson"]
        if let userAgent { headers.add(name: "user-agent", value: userAgent) }
        let streaming = HTTP2ClientStreaming(
            head: { [self] status, headers in
                state.value.streams[generation]?.status = status
                state.value.streams[generation]?.headers = headers
            },
            data: { [self] bytes in received(bytes, on: generation) },
            started: { [self] id in
                guard let unstarted = state.value.streams[generation]?.unstarted else {
                    // Ended before its headers went: its body ends at once.
                    return http2.writeBodyOnLoop(stream: id, ByteBuffer(), end: true)
                }
                state.value.streams[generation]?.id = id
                state.value.streams[generation]?.unstarted = []
                for line in unstarted { http2.writeBodyOnLoop(stream: id, line, end: false) }
            })
        let response = loop.makePromise(of: HTTP2ClientResponse.self)
        response.futureResult.whenComplete { [self] result in finished(generation, result) }
        let path = (open.gateway.path.hasSuffix("/") ? String(open.gateway.path.dropLast()) : open.gateway.path) + "/v1/sends"
        http2.executeOnLoop(HTTP2ClientRequest(method: "POST", path: path, headers: headers, timeout: nil, bodyStreams: true), streaming: streaming, promise: response)
    }

    private func write(_ line: ByteBuffer, on generation: Int) {
        guard let open = state.value.streams[generation] else { return }
        if let id = open.id, let http2 = state.value.connections[open.connection]?.http2 {
            http2.writeBodyOnLoop(stream: id, line, end: false)
        } else {
            state.value.streams[generation]?.unstarted.append(line)
        }
    }

    /// Ends the body of stream `generation`: the gateway answers what it read, then ends the stream.
    private func endBody(of generation: Int) {
        guard let open = state.value.streams[generation], let id = open.id, let http2 = state.value.connections[open.connection]?.http2 else { return }
        http2.writeBodyOnLoop(stream: id, ByteBuffer(), end: true)
    }

    /// Answer lines: each goes to the send waiting longest. A refusal's body is kept.
    private func received(_ bytes: ByteBuffer, on generation: Int) {
        // Taken out of the table while it changes, so that its lines' buffer and its waiting sends
        // are not copied for every piece read (the table would still share them).
        guard var open = state.value.streams.removeValue(forKey: generation) else { return }
        guard open.status == 200 else {
            if open.refusal.readableBytes < 64 * 1024 { open.refusal.writeImmutableBuffer(bytes) }
            state.value.streams[generation] = open
            return
        }
        open.answers.append(bytes.readableBytesView)
        var answered: [(Waiter, API.StreamedAnswer)] = []
        var unreadable: String?
        while let line = open.answers.next() {
            guard let waiter = open.waiting.popFirst() else {
                unreadable = "an answer came for no send"
                break
            }
            waiter.timer.cancel()
            do {
                guard case .line(let bytes) = line else { throw ParleyError.unreachable("an answer over 1 MiB") }
                answered.append((waiter, try API.StreamedAnswer.read(bytes, decoder: Self.decoder)))
            } catch {
                open.waiting.prepend(waiter)
                unreadable = "an unreadable answer: \(error)"
                break
            }
        }
        state.value.streams[generation] = open
        self.answered.add(answered.count, ordering: .relaxed)
        for (waiter, answer) in answered { waiter.promise.succeed(answer) }
        if let unreadable {
            // Which answer is whose is no longer known: the stream is given up.
            ended(generation, failing: ParleyError.unreachable("the send stream failed: \(unreadable)"))
        }
    }

    /// The response ended (or failed): a refusal says whether the gateway has no send stream.
    private func finished(_ generation: Int, _ result: Result<HTTP2ClientResponse, any Error>) {
        guard let open = state.value.streams[generation] else { return }
        switch result {
        case .success where open.status != 200:
            let headers = HTTPHeaders(open.headers.map { ($0.name, $0.value) })
            let error = ParleyClient.error(status: open.status, headers: headers, body: Data(open.refusal.readableBytesView))
            if error.status == 404 || error.code == "http2_required" {
                logger.debug("the gateway has no send stream; sending by request", metadata: ["gateway": "\(open.gateway)"])
                state.value.refusedBy.insert(open.gateway)
                ended(generation, failing: nil)
            } else {
                ended(generation, failing: error)
            }
        case .success:
            ended(generation, failing: ParleyError.unreachable("the send stream ended"))
        case .failure(let error):
            ended(generation, failing: ParleyError.unreachable("the send stream failed: \(error)"))
        }
    }

    /// Stream `generation` is over: its body ends, its sends still waiting fail with `error` (nil:
    /// they go by request), and the next send opens a new stream. Its connection closes once it
    /// carries no stream and new ones go elsewhere.
    private func ended(_ generation: Int, failing error: (any Error)?) {
        endBody(of: generation)
        guard let open = state.value.streams.removeValue(forKey: generation) else { return }
        if state.value.current == generation { state.value.current = nil }
        state.value.connections[open.connection]?.streams.remove(generation)
        closeIfUnused(open.connection)
        if let error { logger.debug("send stream ended", metadata: ["gateway": "\(open.gateway)", "reason": "\(error)"]) }
        for waiter in open.waiting {
            waiter.timer.cancel()
            if let error { waiter.promise.fail(error) } else { waiter.promise.succeed(nil) }
        }
    }

    private func closeIfUnused(_ number: Int) {
        guard let connection = state.value.connections[number], connection.streams.isEmpty else { return }
        guard state.value.currentConnection != number || !connection.reusable else { return }
        state.value.connections[number] = nil
        if state.value.currentConnection == number { state.value.currentConnection = nil }
        _ = connection.http2?.close(reason: "no send stream left on it")
    }

    private static let decoder = API.makeDecoder()
}

extension API.StreamedAnswer {
    /// One answer line of the send stream: the gateway's own form of a message's read directly,
    /// anything else decoded.
    public static func read(_ line: ArraySlice<UInt8>, decoder: JSONDecoder) throws -> API.StreamedAnswer {
        if let (message, status) = messageFromCanonicalJSON(line) { return API.StreamedAnswer(status: status, message: message) }
        return try decoder.decode(API.StreamedAnswer.self, from: Data(line))
    }

    /// The acknowledged message of a send's answer, or its error as the REST route's would be
    /// thrown (`429` retryable, with when to retry).
    public func acknowledged() throws -> Message {
        if let message, (200..<300).contains(status) { return message }
        throw ParleyError(
            status: status, code: error?.code ?? "http_\(status)", message: error?.message ?? "", retryable: (error?.retryable ?? false) || status == 429,
            retryAfter: retryAfterSeconds.map { .seconds($0) })
    }
}
