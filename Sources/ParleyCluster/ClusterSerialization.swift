/// How arguments and results of remote calls become bytes. One small interface, so that the format
/// can change without touching the actor system (``BinaryClusterSerialization`` is the default).
public protocol ClusterSerialization: Sendable {
    func encode<Value: Encodable>(_ value: Value) throws -> [UInt8]
    func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value
}
