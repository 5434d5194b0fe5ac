import Synchronization

/// A value that arrives once, from whichever of several sources is first (a reply, a deadline, a
/// lost connection, a commit), awaited once. Completing before the wait is fine; later
/// completions are ignored.
public final class OneShot<Value: Sendable>: Sendable {
    private struct State {
        var value: Value?
        var waiter: CheckedContinuation<Value, Never>?
    }

    private let state = Mutex(State())

    public init() {}

    /// Fills the slot; returns false if it was already filled.
    @discardableResult
    public func complete(_ value: Value) -> Bool {
        let (filled, waiter) = state.withLock { state -> (Bool, CheckedContinuation<Value, Never>?) in
            guard state.value == nil else { return (false, nil) }
            state.value = value
            defer { state.waiter = nil }
            return (true, state.waiter)
        }
        waiter?.resume(returning: value)
        return filled
    }

    public func wait() async -> Value {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Value? in
                if let value = state.value { return value }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

/// Where the outcome of one call lands.
typealias ReplySlot = OneShot<ReplyEnvelope.Outcome>
