import Foundation
import Synchronization

/// The time a node runs on: monotonic instants for timeouts, leases and failure detection, the
/// wall clock for what clients see, and waits. A node takes its clock as it takes its transport:
/// in production the machine's (`ContinuousClock`); in a simulation one manual clock for every
/// node, so that a run's timing is its seed's and nothing waits for real time.
public protocol ClusterClock: Clock, Sendable where Instant == ContinuousClock.Instant, Duration == Swift.Duration {
    /// The wall clock: when a message was sent, when a user was last seen.
    var wallNow: Date { get }
}

extension ClusterClock {
    public func sleep(until deadline: Instant) async throws {
        try await sleep(until: deadline, tolerance: nil)
    }
}

extension ContinuousClock: ClusterClock {
    public var wallNow: Date { Date() }
}

/// The randomness a node draws on for what is no secret — the IDs of ephemeral actors and of
/// sessions, the phases of timers: the system's generator in production, a seeded one in a
/// simulation, so that the same seed draws the same numbers. Secrets (tokens, password salts)
/// never come from here.
public final class ClusterRandomness: Sendable {
    private let generator: Mutex<AnyGenerator>

    public init(_ generator: some RandomNumberGenerator & Sendable = SystemRandomNumberGenerator()) {
        self.generator = Mutex(AnyGenerator(base: generator))
    }

    public func next() -> UInt64 {
        generator.withLock { $0.next() }
    }

    public func int(in range: Range<Int>) -> Int {
        generator.withLock { Int.random(in: range, using: &$0) }
    }

    /// A version 4 UUID of this randomness.
    public func uuid() -> UUID {
        var bytes = generator.withLock { generator -> (UInt64, UInt64) in (generator.next(), generator.next()) }
        bytes.0 = (bytes.0 & ~0xF000) | 0x4000  // version 4 (bits 12–15 of the third group)
        bytes.1 = (bytes.1 & ~(0xC0 << 56)) | (0x80 << 56)  // RFC 9562 variant
        let a = bytes.0.bigEndian, b = bytes.1.bigEndian
        return withUnsafeBytes(of: (a, b)) { raw in
            UUID(uuid: (raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7],
                        raw[8], raw[9], raw[10], raw[11], raw[12], raw[13], raw[14], raw[15]))
        }
    }

    private struct AnyGenerator: RandomNumberGenerator, Sendable {
        var base: any RandomNumberGenerator & Sendable
        mutating func next() -> UInt64 { base.next() }
    }
}
