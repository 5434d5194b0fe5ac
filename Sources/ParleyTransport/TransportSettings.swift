import ParleyModel

/// Limits and timings of the cluster transport.
public struct TransportSettings: Sendable {
    /// Largest frame accepted or sent; a bigger length prefix closes the connection.
    public var frameBytesMax: Int = 4 << 20
    /// Bytes queued to one peer beyond which callers wait (back-pressure) until the deadline.
    public var outboundBytesMax: Int = 4 << 20
    /// How long a TCP connect may take.
    public var connectTimeout: Duration = .seconds(2)
    /// How long a new connection may take to complete its hello exchange.
    public var helloTimeout: Duration = .seconds(5)
    /// A connection that brings nothing for this long is closed (peers gossip several times a
    /// second, so only a dead or half-open connection is this quiet).
    public var idleTimeout: Duration = .seconds(6)
    /// The wait before dialing a peer again after failed dials.
    public var reconnect = Backoff(first: .milliseconds(50), max: .seconds(2))

    public init() {}

    public static let `default` = TransportSettings()
}
