import Synchronization

/// A value that arrives once, from whichever of several sources is first (a reply, a deadline, a
/// lost connection, a commit), awaited once. Completing before the wait is fine; later
/// completions are ignored.
///
/// Inlinable, so that the modules that use it (a commit's slot, a delivery's) get it specialized:
/// unspecialized, each use looked up the generic metadata of its state, its mutex and its
/// continuation about 15 times (`Scripts/bench-instructions`).
public final class OneShot<Value: Sendable>: Sendable {
    @usableFromInline
    struct State {
        @usableFromInline var value: Value?
        @usableFromInline var waiter: CheckedContinuation<Value, Never>?

        @inlinable init() {}
    }

    @usableFromInline let state = Mutex(State())

    @inlinable public init() {}

    /// Fills the slot; returns false if it was already filled.
    @discardableResult
    @inlinable
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

    @inlinable
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
