import Foundation

/// How arguments and results of remote calls become bytes. One small interface, so that the format
/// can change (to a binary one) without touching the actor system.
public protocol ClusterSerialization: Sendable {
    func encode<Value: Encodable>(_ value: Value) throws -> [UInt8]
    func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value
}

/// JSON via Foundation: readable in captures, fast enough for control traffic.
public struct JSONClusterSerialization: ClusterSerialization {
    public init() {}

    public func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        // Top-level scalars are valid JSON fragments for JSONEncoder on every platform we build on.
        Array(try JSONEncoder().encode(value))
    }

    public func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        try JSONDecoder().decode(type, from: Data(bytes))
    }
}
