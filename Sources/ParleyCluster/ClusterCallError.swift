/// Why a remote call failed, as a value that crosses nodes unchanged.
///
/// An error thrown by a distributed actor's method arrives at the caller as a
/// `ClusterCallError` carrying the thrower's ``code`` and ``message`` (see ``ClusterErrorConvertible``),
/// never as a generic failure. Failures of the call itself (deadline, unreachable owner, bad
/// frame) use the codes below.
public struct ClusterCallError: Error, Hashable, Sendable, Codable, CustomStringConvertible {
    /// A stable, machine-readable code.
    public struct Code: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible,
        ExpressibleByStringLiteral
    {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { self.rawValue = value }
        public var description: String { rawValue }

        /// No reply before the call's deadline; the call may or may not have run.
        public static let deadlineExceeded: Code = "deadline_exceeded"
        /// The node that received the call does not own the actor (the ring moved). Retried by the
        /// caller within the deadline; seen only if that runs out.
        public static let notOwner: Code = "not_owner"
        /// No worker is up to own the actor, or its node cannot be reached.
        public static let unavailable: Code = "unavailable"
        /// The connection closed after the call was sent; the call may or may not have run.
        public static let connectionLost: Code = "connection_lost"
        /// No actor with this ID exists (an unknown kind, or a pinned actor that is gone).
        public static let actorNotFound: Code = "actor_not_found"
        /// The arguments or result could not be encoded or decoded.
        public static let serialization: Code = "serialization"
        /// The remote method threw an error that carries no code of its own.
        public static let remoteError: Code = "remote_error"
        /// The local system is shutting down.
        public static let shutdown: Code = "shutdown"
    }

    public var code: Code
    public var message: String

    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}

/// An error a distributed actor throws that should reach the caller with its own code.
public protocol ClusterErrorConvertible: Error {
    var clusterError: ClusterCallError { get }
}

extension ClusterCallError: ClusterErrorConvertible {
    public var clusterError: ClusterCallError { self }
}
