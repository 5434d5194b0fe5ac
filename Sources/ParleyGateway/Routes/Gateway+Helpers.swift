import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ParleyModel

/// What every route shares: JSON in and out, query parameters, IDs from the path.
extension Gateway {
    static func text(_ text: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text + "\n")))
    }

    /// The JSON body as `T`: at most the body limit (`413`), valid JSON of the right shape (`400`
    /// naming the field). A route with a reader of its body's common form passes it as `canonical`
    /// (``API/NewMessage/fromCanonicalJSON(_:)``); what that reader leaves goes to `JSONDecoder`.
    func decode<T: Decodable>(
        _ type: T.Type, from request: Request, readingFirst canonical: (ByteBufferView) -> T? = { _ in nil }
    ) async throws -> T {
        var request = request
        let buffer: ByteBuffer
        do {
            buffer = try await request.collectBody(upTo: configuration.bodyLimitBytes)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw APIError(.contentTooLarge, "payload_too_large", "the body is over \(configuration.bodyLimitBytes / 1024) KiB")
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, "payload_too_large", "the body is over \(configuration.bodyLimitBytes / 1024) KiB")
        }
        if let value = canonical(buffer.readableBytesView) { return value }
        do {
            return try Self.decoder.decode(T.self, from: Data(buffer.readableBytesView))
        } catch let error as DecodingError {
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty, let field = Self.fieldWithUnrepresentableNumber(buffer.readableBytesView) {
                throw APIError.invalid("\(field) must be a whole number from \(Int64.min) to \(Int64.max)")
            }
            throw APIError.invalid(Self.describe(error))
        } catch {
            throw APIError.invalid("malformed JSON")
        }
    }

    /// A top-level field of a JSON object body whose number no `Int64` holds (too large, or not
    /// whole): Foundation's decoder reports such a number only as "not valid JSON", without the
    /// field's name.
    static func fieldWithUnrepresentableNumber(_ body: ByteBufferView) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else { return nil }
        for (key, value) in object.sorted(by: { $0.key < $1.key }) {
            guard !(value is Bool), let number = value as? NSNumber else { continue }
            let double = number.doubleValue
            if double.rounded() != double || double >= 9.223372036854775807e18 || double < -9.223372036854775808e18 { return key }
        }
        return nil
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let names = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
            return names.isEmpty ? "the body" : names.joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
        }
        switch error {
        case .keyNotFound(let key, let context):
            let parent = path(context)
            return "\(parent == "the body" ? key.stringValue : "\(parent).\(key.stringValue)") is required"
        case .typeMismatch(let type, let context): return "\(path(context)) must be \(jsonType(type))"
        case .valueNotFound(let type, let context): return "\(path(context)) must be \(jsonType(type)), not null"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "malformed JSON" : "\(path(context)) is invalid: \(context.debugDescription)"
        @unknown default: return "malformed JSON"
        }
    }

    private static func jsonType(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type, is Int64.Type, is Double.Type: "a number"
        case is [Any].Type: "an array"
        default: "\(type)"
        }
    }

    /// One encoder and decoder for every request (both are thread-safe once configured).
    static let encoder = API.makeEncoder()
    static let decoder = API.makeDecoder()

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        json(bytes: try encoder.encode(value), status: status)
    }

    static func json(bytes: some Sequence<UInt8>, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    static func intParameter(_ request: Request, _ name: String, default fallback: Int, range: ClosedRange<Int>) throws -> Int {
        do {
            return try ClientInput.integer(request.uri.queryParameters[Substring(name)], name: name, default: fallback, range: range)
        } catch {
            throw APIError.invalid(error.message)
        }
    }

    /// A query parameter that is `true` or `false`, else `fallback` when absent.
    static func boolParameter(_ request: Request, _ name: String, default fallback: Bool) throws -> Bool {
        switch request.uri.queryParameters[Substring(name)] {
        case nil: return fallback
        case "true": return true
        case "false": return false
        case let other?: throw APIError.invalid("\(name) must be true or false, not '\(other.prefix(32))'")
        }
    }

    static func userID(_ text: String) throws -> UserID {
        guard ClientInput.isPlausibleID(text) else { throw APIError.notFound("user not found") }
        return UserID(rawValue: text)
    }

    static func conversationID(_ context: some RequestContext) throws -> ConversationID {
        let text = try context.parameters.require("id")
        guard ClientInput.isPlausibleID(text) else { throw APIError.notFound("conversation not found") }
        return ConversationID(rawValue: text)
    }

    /// The `seq` of a message's path.
    static func seqParameter(_ context: some RequestContext) throws -> Int64 {
        guard let seq = Int64(try context.parameters.require("seq")), seq >= 1 else { throw APIError.invalid("seq must be a whole number, at least 1") }
        return seq
    }

    /// A path parameter as the text it encodes: path parameters arrive as sent, percent-encoded
    /// (an emoji is its UTF-8 bytes, each `%XX`).
    static func decodedParameter(_ context: some RequestContext, _ name: String) throws -> String {
        guard let text = try context.parameters.require(name).removingPercentEncoding else {
            throw APIError.invalid("\(name) must be percent-encoded UTF-8")
        }
        return text
    }
}
