import NIOCore

/// One flush for whatever a channel handler writes over the next few turns of its event loop's
/// task queue: a handler that asks after every write gets a single flush, made once the loop has
/// run `turns` more rounds of queued tasks (each round runs what the one before queued). Bound to
/// the handler's loop; use it only there.
public final class LoopTurnFlush {
    public let turns: Int
    private var scheduled = false

    public init(afterTurns turns: Int) {
        precondition(turns >= 1, "a flush waits at least one turn, got \(turns)")
        self.turns = turns
    }

    /// Flushes `handler` `turns` turns of `loop`'s task queue from now, unless a flush is already
    /// due. Allocates nothing when one is.
    public func request(on loop: any EventLoop, for handler: some LoopTurnFlushable) {
        guard !scheduled else { return }
        scheduled = true
        run(after: turns, on: loop.assumeIsolated(), handler)
    }

    private func run(after turns: Int, on loop: NIOIsolatedEventLoop, _ handler: some LoopTurnFlushable) {
        loop.execute { [self] in
            guard turns <= 1 else { return run(after: turns - 1, on: loop, handler) }
            scheduled = false
            handler.flushWritten()
        }
    }
}

/// A channel handler that a ``LoopTurnFlush`` flushes.
public protocol LoopTurnFlushable: AnyObject {
    /// Flushes what the handler wrote (nothing if it has left its pipeline).
    func flushWritten()
}
