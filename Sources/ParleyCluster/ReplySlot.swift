import Synchronization

/// Where the outcome of one call lands: filled once (by the reply, the deadline sweep or a lost
/// connection, whichever is first) and awaited once. Completion before the wait is fine.
final class ReplySlot: Sendable {
    private struct State {
        var outcome: ReplyEnvelope.Outcome?
        var waiter: CheckedContinuation<ReplyEnvelope.Outcome, Never>?
    }

    private let state = Mutex(State())

    /// Fills the slot; later completions are ignored.
    func complete(_ outcome: ReplyEnvelope.Outcome) {
        let waiter = state.withLock { state -> CheckedContinuation<ReplyEnvelope.Outcome, Never>? in
            guard state.outcome == nil else { return nil }
            state.outcome = outcome
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: outcome)
    }

    func wait() async -> ReplyEnvelope.Outcome {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> ReplyEnvelope.Outcome? in
                if let outcome = state.outcome { return outcome }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
