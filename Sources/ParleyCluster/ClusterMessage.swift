/// What nodes send each other once connected. The transport frames these; the system reads them.
public enum ClusterMessage: Sendable, Equatable {
    /// Invoke a distributed method.
    case call(CallEnvelope)
    /// The answer to a call.
    case reply(ReplyEnvelope)
    /// A member list, which is also a heartbeat.
    case gossip(Gossip)
}

/// A remote call: which actor, which method, the encoded arguments, and how long the caller waits.
public struct CallEnvelope: Sendable, Equatable {
    /// Chosen by the caller; the reply carries it back.
    public var callID: UInt64
    public var recipient: ClusterActorID
    /// The `RemoteCallTarget` identifier (a mangled name: never persisted or parsed).
    public var target: String
    /// Each argument encoded by the ``ClusterSerialization``.
    public var arguments: [[UInt8]]
    /// The time the caller has left when it sent the call; the callee does not start a call whose
    /// time ran out while it waited to run.
    public var timeout: Duration

    public init(callID: UInt64, recipient: ClusterActorID, target: String, arguments: [[UInt8]], timeout: Duration) {
        self.callID = callID
        self.recipient = recipient
        self.target = target
        self.arguments = arguments
        self.timeout = timeout
    }
}

/// The outcome of a remote call.
public struct ReplyEnvelope: Sendable, Equatable {
    /// What the method did.
    public enum Outcome: Sendable, Equatable {
        /// Returned a value, encoded.
        case value([UInt8])
        /// Returned nothing.
        case void
        /// Threw, or the call could not run.
        case error(ClusterCallError)
    }

    public var callID: UInt64
    public var outcome: Outcome

    public init(callID: UInt64, outcome: Outcome) {
        self.callID = callID
        self.outcome = outcome
    }
}
