import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Metrics
import NIOCore
import ParleyChat
import ParleyCluster
import ParleyModel

extension Gateway {
    static let sendStreamPath = "/v1/sends"
    /// WebSockets whose token was accepted (the count of requests has them only once they end).
    static let sendSocketsOpened = Counter(label: "parley.gateway.send_sockets_opened")

    /// `POST /v1/sends`: the send stream. One long-lived request on an HTTP/2 connection whose
    /// body is JSON lines (``API/StreamedCommand``: a message, receipts or typing), each answered
    /// by one line of the response (``API/StreamedAnswer``) with what the REST route would have
    /// answered. The lines are taken one at a time, in order, so a client's sends reach each
    /// conversation in the order it wrote them; an answer `201`/`200` means what the REST route's
    /// does — the message is committed. A send costs the gateway a line instead of a request: no
    /// stream to open, no headers to code, no route to find, no task to start.
    func addSendStreamRoutes(to v1: RouterGroup<GatewayContext>) {
        // Each line is counted against its own limit (sends, or writes), not the request.
        v1.authenticated(by: self, writes: .ownLimit).post("sends") { request, context in try await self.sendStream(request, context) }
        // The same stream as a WebSocket over HTTP/2 (RFC 8441), for browsers: a `fetch` streams
        // a request body only half-duplex (no answer is read before the body ends). Its token is
        // its first message, so the route itself is not behind the authenticator.
        v1.on("sends", method: .connect) { request, context in try await self.webSocketSendStream(request, context) }
        // A browser with no HTTP/2 connection to offer it tries a WebSocket over HTTP/1.1 (`GET`
        // with `Upgrade`), which the gateway does not serve: said plainly, not as an unknown route.
        v1.get("sends") { _, _ -> Response in
            throw APIError(.badRequest, "http2_required", "the send socket is a WebSocket over HTTP/2 (RFC 8441: CONNECT /v1/sends with :protocol websocket); without it send with POST /v1/conversations/{id}/messages")
        }
    }

    private func sendStream(_ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        guard context.eventSink != nil else {
            throw APIError(.badRequest, "http2_required", "the send stream needs HTTP/2 (its body and its answers flow at once); send with POST /v1/conversations/{id}/messages instead")
        }
        let caller = context.caller
        let token = try Self.bearerToken(of: request)
        let reservation = try reserveSendStream(for: caller)
        let lineLimit = configuration.bodyLimitBytes
        let body = ResponseBody { [self] writer in
            var lines = JSONLines(limit: lineLimit)
            do {
                reading: for try await piece in request.body {
                    lines.append(piece.readableBytesView)
                    while let line = lines.next() {
                        let answer: SendStreamAnswer
                        switch line {
                        case .line(let bytes): answer = await self.answer(bytes, token: token)
                        case .tooLong: answer = .end(Self.answerLine(APIError(.contentTooLarge, "payload_too_large", "a line is over \(lineLimit / 1024) KiB"), to: nil))
                        }
                        switch answer {
                        case .next(let bytes):
                            try await writer.write(ByteBuffer(bytes: bytes))
                        case .end(let bytes):
                            try await writer.write(ByteBuffer(bytes: bytes))
                            break reading
                        }
                    }
                }
                try await writer.finish(nil)
            } catch {
                // The client went (reset, closed) or stopped reading: nothing is left to answer.
                logger.debug("send stream ended", metadata: ["user.id": "\(caller.id)", "error": "\(error)"])
            }
            withExtendedLifetime(reservation) {}
        }
        return Response(status: .ok, headers: [.contentType: "application/x-ndjson", .cacheControl: "no-cache"], body: body)
    }

    private func reserveSendStream(for caller: Caller) throws -> UserTally.Reservation {
        guard sendStreamsOpen.reserve(1, for: caller.id, within: Int64(configuration.streamsPerUserMax)) else {
            throw APIError(.tooManyRequests, "too_many_streams", "at most \(configuration.streamsPerUserMax) send streams per user are open at once on this gateway; close one first", retryable: true, retryAfterSeconds: 5)
        }
        return UserTally.Reservation(sendStreamsOpen, 1, for: caller.id)
    }

    /// `CONNECT /v1/sends` with `:protocol websocket`: the send stream as a WebSocket. Its first
    /// text message is ``API/SendStreamHello`` (the token), answered `{"status":200}`; then each
    /// text message is one ``API/StreamedCommand``, answered by one text message, in order, as on
    /// `POST /v1/sends`. A refused token, a message over the body limit or a frame that breaks
    /// RFC 6455 is answered with a close frame, and the stream ends.
    private func webSocketSendStream(_ request: Request, _ context: GatewayContext) async throws -> Response {
        guard let sink = context.eventSink, request.head.extendedConnectProtocol == "websocket" else {
            throw APIError(.badRequest, "websocket_required", "this is the send stream's WebSocket over HTTP/2 (RFC 8441: CONNECT with :protocol websocket); over HTTP/1.1 send with POST /v1/conversations/{id}/messages")
        }
        guard request.headers[.secWebSocketVersion] == "13" else {
            throw APIError(.badRequest, "websocket_version", "Sec-WebSocket-Version: 13 is required")
        }
        let messageLimit = configuration.bodyLimitBytes
        let helloTimeout = TimeAmount.nanoseconds(configuration.requestTimeout.nanoseconds)
        let body = ResponseBody { [self] writer in
            var messages = WebSocketMessages(limit: messageLimit, from: .client)
            var token: String?
            var reservation: UserTally.Reservation?
            var closed = false
            // A socket that has not named its user in time holds a stream of the connection for
            // nothing: it is reset.
            let unnamed = sink.loop.scheduleTask(in: helloTimeout) { sink.close() }
            do {
                reading: for try await piece in request.body {
                    messages.append(piece.readableBytesView)
                    while let message = messages.next() {
                        var reply: [UInt8]
                        var close: UInt16?
                        switch message {
                        case .text(let bytes):
                            if let token {
                                switch await self.answer(bytes, token: token) {
                                case .next(let line): reply = WebSocketMessages.frame(.text, line.dropLast())
                                case .end(let line):
                                    reply = WebSocketMessages.frame(.text, line.dropLast())
                                    close = WebSocketMessages.CloseCode.policyViolation
                                }
                            } else {
                                let hello = await self.hello(bytes)
                                reply = WebSocketMessages.frame(.text, hello.line.dropLast())
                                switch hello.outcome {
                                case .success(let named):
                                    unnamed.cancel()
                                    token = named.token
                                    reservation = named.reservation
                                case .failure(let error):
                                    // A lookup that failed (the store failing over) or too many
                                    // streams: the client may come back; a refused token: not so.
                                    close = error.retryable ? WebSocketMessages.CloseCode.tryAgainLater : WebSocketMessages.CloseCode.policyViolation
                                }
                            }
                        case .ping(let payload): reply = WebSocketMessages.frame(.pong, payload)
                        case .pong: continue
                        case .close(let code):
                            reply = []
                            close = code ?? WebSocketMessages.CloseCode.normal
                        case .failed(let code):
                            reply = []
                            close = code
                        }
                        if let close { reply += WebSocketMessages.frame(.close, WebSocketMessages.closePayload(close)) }
                        try await writer.write(ByteBuffer(bytes: reply))
                        if close != nil {
                            closed = true
                            break reading
                        }
                    }
                }
                // The body ended without a close (the gateway shutting down ends it so): the
                // client is told it may reconnect.
                if !closed { try await writer.write(ByteBuffer(bytes: WebSocketMessages.frame(.close, WebSocketMessages.closePayload(WebSocketMessages.CloseCode.goingAway)))) }
                try await writer.finish(nil)
            } catch {
                // The client went (reset, closed), stopped reading, or never named itself in time.
                logger.debug("send stream's WebSocket ended", metadata: ["error": "\(error)"])
            }
            unnamed.cancel()
            withExtendedLifetime(reservation) {}
        }
        return Response(status: .ok, body: body)
    }

    /// The WebSocket's first message: its caller's token, checked; the stream counted against
    /// the user's open send streams.
    private func hello(_ bytes: ArraySlice<UInt8>) async -> (line: [UInt8], outcome: Result<(token: String, reservation: UserTally.Reservation), APIError>) {
        do {
            guard let hello = try? Self.decoder.decode(API.SendStreamHello.self, from: Data(bytes)) else {
                throw APIError.unauthorized("the first message is {\"token\": \"<token>\"}")
            }
            let caller = try await caller(token: hello.token)
            let reservation = try reserveSendStream(for: caller)
            Self.sendSocketsOpened.increment()
            return (Self.encodedLine(API.StreamedAnswer(status: 200)), .success((hello.token, reservation)))
        } catch {
            let apiError = APIError.from(error)
            return (Self.answerLine(apiError, to: nil), .failure(apiError))
        }
    }

    private enum SendStreamAnswer {
        /// Answered; the next line follows.
        case next([UInt8])
        /// Answered, and the stream ends (the token is refused, a line is too long).
        case end([UInt8])
    }

    /// One line's answer. The token is checked for every line (a lease lookup, mostly), so a
    /// logout or a deleted account ends the stream at its next line as it refuses the next request.
    private func answer(_ line: ArraySlice<UInt8>, token: String) async -> SendStreamAnswer {
        let command: API.StreamedCommand
        if let canonical = API.StreamedCommand.fromCanonicalJSON(line) {
            command = canonical
        } else {
            do {
                command = try Self.decoder.decode(API.StreamedCommand.self, from: Data(line))
            } catch let error as DecodingError {
                return .next(Self.answerLine(APIError.invalid(Self.describe(error)), to: nil))
            } catch {
                return .next(Self.answerLine(APIError.invalid("malformed JSON"), to: nil))
            }
        }
        let caller: Caller
        do {
            caller = try await self.caller(token: token)
        } catch {
            // A token refused ends the stream; a lookup that failed (the user's actor moving, the
            // store failing over) is answered as the request would be, and the next line tries again.
            let apiError = APIError.from(error)
            let line = Self.answerLine(apiError, to: command)
            return apiError.status == .unauthorized || apiError.status == .forbidden ? .end(line) : .next(line)
        }
        do {
            guard ClientInput.isPlausibleID(command.conversationId.rawValue) else { throw APIError.notFound("conversation not found") }
            switch command.action {
            case .message(let message):
                let sent = try await send(message, to: command.conversationId, by: caller)
                return .next(API.StreamedAnswer.jsonLine(id: command.id, status: sent.created ? 201 : 200, wrappedMessage: sent.json))
            case .receipts(let receipts):
                try limitWrite(by: caller)
                try await markReceipts(receipts, in: command.conversationId, by: caller)
            case .typing(let typing):
                try limitWrite(by: caller)
                try await setTyping(typing, in: command.conversationId, by: caller)
            }
            return .next(Self.encodedLine(API.StreamedAnswer(id: command.id, status: 204)))
        } catch {
            let apiError = APIError.from(error)
            if apiError.status.code >= 500 {
                logger.warning("send stream line failed", metadata: ["user.id": "\(caller.id)", "error": "\(error)"])
            }
            return .next(Self.answerLine(apiError, to: command))
        }
    }

    private func limitWrite(by caller: Caller) throws {
        if let wait = writeLimiter.acquire(caller.id.rawValue, now: system.clock.now) { throw APIError.rateLimited(retryAfter: wait, "too many changes; slow down") }
    }

    /// An error's answer line: the REST route's status and error body, and the line's names.
    private static func answerLine(_ error: APIError, to command: API.StreamedCommand?) -> [UInt8] {
        var clientMessageId: String?
        if case .message(let message)? = command?.action { clientMessageId = message.clientMessageId }
        return encodedLine(API.StreamedAnswer(
            id: command?.id, clientMessageId: clientMessageId, status: Int(error.status.code),
            error: API.ErrorBody.Detail(code: error.code, message: error.message, retryable: error.retryable), retryAfterSeconds: error.retryAfterSeconds))
    }

    private static func encodedLine(_ answer: API.StreamedAnswer) -> [UInt8] {
        var bytes = (try? Array(encoder.encode(answer))) ?? Array(#"{"status":500}"#.utf8)
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }
}
