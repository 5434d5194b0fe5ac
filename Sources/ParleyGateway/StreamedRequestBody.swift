import NIOCore
import Synchronization

/// A request body read by its route as it arrives on an HTTP/2 stream (an upload). The
/// connection appends each DATA frame's bytes from its event loop; each piece the route takes is
/// reported through `consumed`, and only then given back to the client as flow-control window —
/// so what waits here is bounded by the stream's window, however large the upload. One reader.
final class StreamedRequestBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    /// The request stopped arriving before its end (reset, timed out, the connection closed).
    struct Ended: Error, CustomStringConvertible {
        var description: String { "the request's body stopped before its end" }
    }

    private enum End {
        case open
        case finished
        case failed(any Error)
    }

    private struct State {
        var pieces: [ByteBuffer] = []
        var end = End.open
        var waiter: CheckedContinuation<ByteBuffer?, any Error>?
    }

    private let state = Mutex(State())
    private let consumed: @Sendable (Int) -> Void

    init(consumed: @escaping @Sendable (Int) -> Void) {
        self.consumed = consumed
    }

    /// More of the body (from the connection's loop).
    func append(_ piece: ByteBuffer) {
        let waiter = state.withLock { state -> CheckedContinuation<ByteBuffer?, any Error>? in
            guard case .open = state.end else { return nil }
            guard let waiter = state.waiter else {
                state.pieces.append(piece)
                return nil
            }
            state.waiter = nil
            return waiter
        }
        if let waiter {
            consumed(piece.readableBytes)
            waiter.resume(returning: piece)
        }
    }

    /// The body is over: whole (`error` nil), or cut off.
    func finish(_ error: (any Error)? = nil) {
        let waiter = state.withLock { state -> CheckedContinuation<ByteBuffer?, any Error>? in
            guard case .open = state.end else { return nil }
            state.end = error.map { .failed($0) } ?? .finished
            if error != nil { state.pieces = [] }
            defer { state.waiter = nil }
            return state.waiter
        }
        if let error { waiter?.resume(throwing: error) } else { waiter?.resume(returning: nil) }
    }

    func next() async throws -> ByteBuffer? {
        let piece = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ByteBuffer?, any Error>) in
                let now = state.withLock { state -> Result<ByteBuffer?, any Error>? in
                    if !state.pieces.isEmpty { return .success(state.pieces.removeFirst()) }
                    switch state.end {
                    case .finished: return .success(nil)
                    case .failed(let error): return .failure(error)
                    case .open:
                        state.waiter = continuation
                        return nil
                    }
                }
                if let now {
                    if case .success(let piece?) = now { consumed(piece.readableBytes) }
                    continuation.resume(with: now)
                }
            }
        } onCancel: {
            finish(CancellationError())
        }
        return piece
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let body: StreamedRequestBody
        mutating func next() async throws -> ByteBuffer? { try await body.next() }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: self) }
}
