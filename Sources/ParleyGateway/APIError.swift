import Foundation
import Logging
import HTTPTypes
import Hummingbird
import ParleyChat
import ParleyCluster
import ParleyModel

/// An error as API.md answers it: a status, a code, a message a person can act on, whether a retry
/// may succeed, and for 429/503 when to retry.
struct APIError: Error, HTTPResponseError, CustomStringConvertible {
    var status: HTTPResponse.Status
    var code: String
    var message: String
    var retryable: Bool
    var retryAfterSeconds: Int?

    init(_ status: HTTPResponse.Status, _ code: String, _ message: String, retryable: Bool = false, retryAfterSeconds: Int? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable
        self.retryAfterSeconds = retryAfterSeconds
    }

    var description: String { "\(status.code) \(code): \(message)" }

    static func invalid(_ message: String) -> APIError { APIError(.badRequest, "invalid_request", message) }
    static func unauthorized(_ message: String) -> APIError { APIError(.unauthorized, "unauthorized", message) }
    static func notFound(_ message: String) -> APIError { APIError(.notFound, "not_found", message) }
    static func unavailable(_ message: String) -> APIError {
        APIError(.serviceUnavailable, "unavailable", message, retryable: true, retryAfterSeconds: 1)
    }
    /// `429 rate_limited`, retryable after `wait` (in whole seconds, at least 1).
    static func rateLimited(retryAfter wait: Duration, _ message: String) -> APIError {
        APIError(.tooManyRequests, "rate_limited", message, retryable: true, retryAfterSeconds: wholeSeconds(wait))
    }

    /// `duration` rounded up to whole seconds, at least 1: what `Retry-After` says.
    static func wholeSeconds(_ duration: Duration) -> Int {
        max(1, Int(duration.components.seconds) + (duration.components.attoseconds > 0 ? 1 : 0))
    }

    /// An error from the cluster: an actor's own code maps to its status; a failure of the call
    /// itself (deadline, lost connection, no owner) is `503 unavailable`, retryable.
    init(_ error: ClusterCallError) {
        switch error.code.rawValue {
        case ChatError.Code.invalidRequest.rawValue: self = .invalid(error.message)
        case ChatError.Code.notFound.rawValue: self = .notFound(error.message)
        case ChatError.Code.forbidden.rawValue: self.init(.forbidden, "forbidden", error.message)
        case ChatError.Code.conflict.rawValue: self.init(.conflict, "conflict", error.message)
        case ChatError.Code.cursorExpired.rawValue: self.init(.gone, "cursor_expired", error.message)
        case "unauthorized": self = .unauthorized(error.message)
        // The message may name nodes, stores or their errors: logged (APIErrorMiddleware), not sent.
        default: self = .unavailable("the cluster cannot serve this now (\(error.code)); retry")
        }
    }

    /// Any error a route met, as the client should see it.
    static func from(_ error: any Error) -> APIError {
        switch error {
        case let error as APIError: return error
        case let error as ClusterCallError: return APIError(error)
        case let error as ChatError: return APIError(error.clusterError)
        case let error as HTTPError:
            switch error.status {
            case .contentTooLarge: return APIError(.contentTooLarge, "payload_too_large", "the body is over the limit")
            case .notFound: return .notFound(error.body ?? "no such route")
            case .methodNotAllowed: return APIError(.methodNotAllowed, "invalid_request", "method not allowed on this route")
            default:
                if error.status.code >= 500 { return .unavailable(error.status.reasonPhrase) }
                return APIError(error.status, "invalid_request", error.body ?? error.status.reasonPhrase)
            }
        default:
            // What went wrong is logged; the client learns only that it was the server.
            return .unavailable("internal error; retry")
        }
    }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let retryAfterSeconds { headers[.retryAfter] = "\(retryAfterSeconds)" }
        let body = (try? Gateway.encoder.encode(API.ErrorBody(code: code, message: message, retryable: retryable))) ?? Data()
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}

/// The admin token: the operations port's bearer token, and the gateway's for operators' routes.
public enum AdminToken {
    /// Whether `authorization` is `Bearer <token>`, compared in time that depends only on the
    /// lengths, so that how long a refusal takes does not tell how much of a guess was right.
    public static func matches(_ authorization: String?, _ token: String) -> Bool {
        guard let authorization else { return false }
        let given = Array(authorization.utf8)
        let expected = Array("Bearer \(token)".utf8)
        var difference = UInt8(given.count == expected.count ? 0 : 1)
        for index in expected.indices {
            difference |= expected[index] ^ (index < given.count ? given[index] : 0)
        }
        return difference == 0
    }
}
