import Foundation
import ParleyCluster

/// Incarnations from a wall clock, in milliseconds since 1970: they grow across restarts of a node
/// as long as its clock does. What real nodes give ``ClusterSettings`` (the cluster core takes its
/// time sources injected).
public enum WallClockIncarnations {
    public static func of(_ clock: some ClusterClock) -> @Sendable () -> UInt64 {
        { UInt64(max(1, clock.wallNow.timeIntervalSince1970 * 1000)) }
    }
}
