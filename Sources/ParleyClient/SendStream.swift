import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import ParleyModel
import Synchronization

/// The gateway's send stream (`POST /v1/sends`) as a client uses it: opened at the first send,
/// each send a line of its body whose answer comes, in order, as a line of its response. When it
/// ends (the gateway went, the connection dropped) or an answer is late (a gateway that hangs:
/// the HTTP client's read timeout does not end a response whose request is still sending), the
/// sends still waiting fail as retryable (the outbox sends them again with the same
/// `clientMessageId`) and the next send opens a new stream. A gateway that does not offer it
/// (`404`, or `400 http2_required` on a connection that is not HTTP/2) is remembered, and sends
/// to it go as requests.
final class SendStream: Sendable {
    private struct State {
        /// The open stream's body, and where and as whom it was opened: a send for another
        /// gateway or token (a new login) ends it and opens another.
        var body: AsyncStream<ByteBuffer>.Continuation?
        var gateway: URL?
        var token: String?
        /// The open stream's number: each stream's sends wait for their answers apart, oldest first.
        var generation = 0
        var waiting: [Int: [Waiter]] = [:]
        var nextWaiter = 0
        /// Gateways that answered that they have no send stream.
        var refusedBy: Set<URL> = []
    }

    private struct Waiter {
        var id: Int
        var continuation: CheckedContinuation<API.StreamedAnswer, any Error>
    }

    private let state = Mutex(State())
    /// Answers read from send streams (sends that did not go by request).
    let answered = Atomic(0)
    private let http: HTTPClient
    private let logger: Logger

    init(http: HTTPClient, logger: Logger) {
        self.http = http
        self.logger = logger
    }

    /// Sends `command` on the stream to `gateway` (opened with `token` if none is open) and
    /// returns its answer; nil when the gateway has no send stream. Throws a retryable
    /// ``ParleyError`` when the stream ended before the answer came, or no answer came within
    /// `timeout` (a gateway that hangs): the stream is then given up, with every send waiting on it.
    func send(_ command: API.StreamedCommand, to gateway: URL, token: String, timeout: Duration) async throws -> API.StreamedAnswer? {
        let line = ByteBuffer(bytes: command.jsonLine)
        var watch: Task<Void, Never>?
        defer { watch?.cancel() }
        do {
            return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<API.StreamedAnswer, any Error>) in
                let waiting = state.withLock { state -> (generation: Int, id: Int)? in
                    if state.refusedBy.contains(gateway) { return nil }
                    if state.body != nil && (state.gateway != gateway || state.token != token) {
                        // The old stream answers what it has; its sends still get their answers.
                        state.body?.finish()
                        state.body = nil
                    }
                    if state.body == nil { open(to: gateway, token: token, in: &state) }
                    state.nextWaiter += 1
                    state.waiting[state.generation, default: []].append(Waiter(id: state.nextWaiter, continuation: continuation))
                    state.body?.yield(line)
                    return (state.generation, state.nextWaiter)
                }
                guard let waiting else { return continuation.resume(throwing: Refused()) }
                watch = Task { [self] in
                    guard (try? await Task.sleep(for: timeout)) != nil else { return }
                    let stillWaiting = state.withLock { $0.waiting[waiting.generation]?.contains { $0.id == waiting.id } ?? false }
                    if stillWaiting { ended(waiting.generation, failing: ParleyError.unreachable("no answer on the send stream within \(timeout)")) }
                }
            }
        } catch is Refused {
            return nil
        }
    }

    /// The gateway has no send stream.
    private struct Refused: Error {}

    /// Ends the open stream, if any: its body ends, and the gateway answers what it read.
    func close() {
        state.withLock { $0.body?.finish() }
    }

    /// Opens a stream to `gateway` (under the lock: the first line is written right after).
    private func open(to gateway: URL, token: String, in state: inout State) {
        let (lines, body) = AsyncStream.makeStream(of: ByteBuffer.self)
        state.body = body
        state.gateway = gateway
        state.token = token
        state.generation += 1
        let generation = state.generation
        var request = HTTPClientRequest(url: gateway.absoluteString + "/v1/sends")
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "Content-Type", value: "application/x-ndjson")
        request.body = .stream(lines, length: .unknown)
        Task { [self] in
            let reason: ParleyError
            do {
                let response = try await http.execute(request, timeout: .hours(24 * 365))
                guard response.status == .ok else {
                    let bytes = try await response.body.collect(upTo: 64 * 1024)
                    let error = ParleyClient.error(status: Int(response.status.code), headers: response.headers, body: Data(buffer: bytes))
                    if error.status == 404 || error.code == "http2_required" {
                        logger.debug("the gateway has no send stream; sending by request", metadata: ["gateway": "\(gateway)"])
                        ended(generation, failing: Refused(), refusedBy: gateway)
                        return
                    }
                    ended(generation, failing: error)
                    return
                }
                var answers = JSONLines(limit: 1 << 20)
                let decoder = API.makeDecoder()
                for try await piece in response.body {
                    answers.append(piece.readableBytesView)
                    while case .line(let line)? = answers.next() {
                        let answer = try API.StreamedAnswer.read(line, decoder: decoder)
                        let waiter = self.state.withLock { state in state.waiting[generation]?.isEmpty == false ? state.waiting[generation]?.removeFirst() : nil }
                        answered.add(1, ordering: .relaxed)
                        waiter?.continuation.resume(returning: answer)
                    }
                }
                reason = ParleyError.unreachable("the send stream ended")
            } catch {
                reason = ParleyError.unreachable("the send stream failed: \(error)")
            }
            logger.debug("send stream ended", metadata: ["gateway": "\(gateway)", "reason": "\(reason.message)"])
            ended(generation, failing: reason)
        }
    }

    /// Stream `generation` is over: its sends still waiting fail with `error`, and the next send
    /// opens a new one (or, when `refusedBy` is set, goes by request to that gateway from now on).
    private func ended(_ generation: Int, failing error: any Error, refusedBy gateway: URL? = nil) {
        let failed = state.withLock { state -> [Waiter] in
            if let gateway { state.refusedBy.insert(gateway) }
            if state.generation == generation {
                state.body?.finish()
                state.body = nil
            }
            return state.waiting.removeValue(forKey: generation) ?? []
        }
        for waiter in failed { waiter.continuation.resume(throwing: error) }
    }
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
