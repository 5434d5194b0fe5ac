import ParleyCluster

/// `body`'s result, or nil if `deadline` on `clock` comes first; then `body` goes on in the
/// background and its result is dropped. For a wait that is pointless past a known instant (a
/// lease that ends), whatever the call's own timeout.
public func untilDeadline<Value: Sendable>(
    _ deadline: ContinuousClock.Instant, on clock: any ClusterClock, _ body: @escaping @Sendable () async -> Value
) async -> Value? {
    let slot = OneShot<Value?>()
    Task { slot.complete(await body()) }
    let timer = Task {
        try? await clock.sleep(until: deadline)
        slot.complete(nil)
    }
    let result = await slot.wait()
    timer.cancel()
    return result
}
