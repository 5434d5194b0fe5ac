import Distributed

/// Records the arguments of an outgoing distributed call, each encoded on its own.
public struct ClusterInvocationEncoder: DistributedTargetInvocationEncoder {
    public typealias SerializationRequirement = any Codable

    let serialization: any ClusterSerialization
    var arguments: [[UInt8]] = []

    public mutating func recordGenericSubstitution<T>(_ type: T.Type) throws {
        throw ClusterCallError(code: .serialization, message: "generic distributed methods are not supported (\(type))")
    }

    public mutating func recordArgument<Value: Codable>(_ argument: RemoteCallArgument<Value>) throws {
        do {
            arguments.append(try serialization.encode(argument.value))
        } catch {
            throw ClusterCallError(code: .serialization, message: "cannot encode argument \(argument.label ?? "_"): \(error)")
        }
    }

    public mutating func recordErrorType<E: Error>(_ type: E.Type) throws {}
    public mutating func recordReturnType<R: Codable>(_ type: R.Type) throws {}
    public mutating func doneRecording() throws {}
}

/// Hands the arguments of an incoming call to the target, in order.
public final class ClusterInvocationDecoder: DistributedTargetInvocationDecoder {
    public typealias SerializationRequirement = any Codable

    private let serialization: any ClusterSerialization
    private let arguments: [[UInt8]]
    private var nextIndex = 0

    init(serialization: any ClusterSerialization, arguments: [[UInt8]]) {
        self.serialization = serialization
        self.arguments = arguments
    }

    public func decodeGenericSubstitutions() throws -> [any Any.Type] { [] }

    public func decodeNextArgument<Argument: Codable>() throws -> Argument {
        guard nextIndex < arguments.count else {
            throw ClusterCallError(code: .serialization, message: "call has \(arguments.count) arguments, the target wants more")
        }
        defer { nextIndex += 1 }
        do {
            return try serialization.decode(Argument.self, from: arguments[nextIndex])
        } catch {
            throw ClusterCallError(code: .serialization, message: "cannot decode argument \(nextIndex) as \(Argument.self): \(error)")
        }
    }

    public func decodeErrorType() throws -> (any Any.Type)? { nil }
    public func decodeReturnType() throws -> (any Any.Type)? { nil }
}

/// Turns what a target did into a reply outcome and hands it to the sink (the network or a local
/// caller).
public struct ClusterResultHandler: DistributedTargetInvocationResultHandler {
    public typealias SerializationRequirement = any Codable

    let serialization: any ClusterSerialization
    let sink: @Sendable (ReplyEnvelope.Outcome) -> Void

    public func onReturn<Success: Codable>(value: Success) async throws {
        do {
            sink(.value(try serialization.encode(value)))
        } catch {
            sink(.error(ClusterCallError(code: .serialization, message: "cannot encode result \(Success.self): \(error)")))
        }
    }

    public func onReturnVoid() async throws {
        sink(.void)
    }

    public func onThrow<Err: Error>(error: Err) async throws {
        sink(.error(ClusterCallError(converting: error)))
    }
}

extension ClusterCallError {
    /// The value an error thrown by a target travels as.
    init(converting error: any Error) {
        if let convertible = error as? any ClusterErrorConvertible {
            self = convertible.clusterError
        } else {
            self.init(code: .remoteError, message: "\(type(of: error as any Error)): \(error)")
        }
    }
}
