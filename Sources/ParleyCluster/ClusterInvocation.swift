import Distributed

/// A call's arguments as its caller recorded them. A call that runs on this node hands the values
/// to the target as they are; only a call that crosses the network encodes them, each on its own.
public struct ClusterArguments: @unchecked Sendable {
    // Unchecked: these are a distributed method's arguments, which the compiler has checked can be
    // sent to the actor, as for any call across isolation domains.
    fileprivate(set) var values: [any Codable] = []
    fileprivate(set) var labels: [String?] = []

    /// Each argument's bytes, for a call to another node.
    func encoded(with serialization: any ClusterSerialization) throws(ClusterCallError) -> [[UInt8]] {
        var encoded: [[UInt8]] = []
        encoded.reserveCapacity(values.count)
        for (value, label) in zip(values, labels) {
            do {
                encoded.append(try serialization.encode(value))
            } catch {
                throw ClusterCallError(code: .serialization, message: "cannot encode argument \(label ?? "_"): \(error)")
            }
        }
        return encoded
    }
}

/// Records the arguments of an outgoing distributed call.
public struct ClusterInvocationEncoder: DistributedTargetInvocationEncoder {
    public typealias SerializationRequirement = any Codable

    var arguments = ClusterArguments()

    public mutating func recordGenericSubstitution<T>(_ type: T.Type) throws {
        throw ClusterCallError(code: .serialization, message: "generic distributed methods are not supported (\(type))")
    }

    public mutating func recordArgument<Value: Codable>(_ argument: RemoteCallArgument<Value>) throws {
        arguments.values.append(argument.value)
        arguments.labels.append(argument.label)
    }

    public mutating func recordErrorType<E: Error>(_ type: E.Type) throws {}
    public mutating func recordReturnType<R: Codable>(_ type: R.Type) throws {}
    public mutating func doneRecording() throws {}
}

/// Hands the arguments of an incoming call to the target, in order.
public final class ClusterInvocationDecoder: DistributedTargetInvocationDecoder {
    public typealias SerializationRequirement = any Codable

    private enum Source {
        /// A call from another node.
        case encoded([[UInt8]], any ClusterSerialization)
        /// A call from this node.
        case values([any Codable])
    }

    private let source: Source
    private var nextIndex = 0

    init(serialization: any ClusterSerialization, arguments: [[UInt8]]) {
        source = .encoded(arguments, serialization)
    }

    init(_ arguments: ClusterArguments) {
        source = .values(arguments.values)
    }

    public func decodeGenericSubstitutions() throws -> [any Any.Type] { [] }

    public func decodeNextArgument<Argument: Codable>() throws -> Argument {
        defer { nextIndex += 1 }
        switch source {
        case .encoded(let arguments, let serialization):
            guard nextIndex < arguments.count else {
                throw ClusterCallError(code: .serialization, message: "call has \(arguments.count) arguments, the target wants more")
            }
            do {
                return try serialization.decode(Argument.self, from: arguments[nextIndex])
            } catch {
                throw ClusterCallError(code: .serialization, message: "cannot decode argument \(nextIndex) as \(Argument.self): \(error)")
            }
        case .values(let values):
            guard nextIndex < values.count else {
                throw ClusterCallError(code: .serialization, message: "call has \(values.count) arguments, the target wants more")
            }
            guard let value = values[nextIndex] as? Argument else {
                throw ClusterCallError(code: .serialization, message: "argument \(nextIndex) is a \(type(of: values[nextIndex])), the target wants \(Argument.self)")
            }
            return value
        }
    }

    public func decodeErrorType() throws -> (any Any.Type)? { nil }
    public func decodeReturnType() throws -> (any Any.Type)? { nil }
}

/// What a call answered, as its caller gets it: the value itself when the target ran on this
/// node, the reply's outcome when it came over the network.
enum CallAnswer: Sendable {
    case value(ReturnedValue)
    case outcome(ReplyEnvelope.Outcome)

    /// The answer as a reply to another node.
    func encoded(with serialization: any ClusterSerialization) -> ReplyEnvelope.Outcome {
        switch self {
        case .outcome(let outcome):
            return outcome
        case .value(let returned):
            do {
                return .value(try serialization.encode(returned.value))
            } catch {
                return .error(ClusterCallError(code: .serialization, message: "cannot encode result \(type(of: returned.value)): \(error)"))
            }
        }
    }
}

/// A distributed method's result, handed to its caller on this node.
struct ReturnedValue: @unchecked Sendable {
    // Unchecked: the result of a distributed method, which the compiler has checked can be sent
    // back to the caller, as for any call across isolation domains.
    let value: any Codable
}

/// Hands what a target did to the sink: the value it returned (encoded only if the answer goes
/// to another node), nothing, or the error it threw.
public struct ClusterResultHandler: DistributedTargetInvocationResultHandler {
    public typealias SerializationRequirement = any Codable

    let sink: @Sendable (CallAnswer) -> Void

    public func onReturn<Success: Codable>(value: Success) async throws {
        sink(.value(ReturnedValue(value: value)))
    }

    public func onReturnVoid() async throws {
        sink(.outcome(.void))
    }

    public func onThrow<Err: Error>(error: Err) async throws {
        sink(.outcome(.error(ClusterCallError(converting: error))))
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
