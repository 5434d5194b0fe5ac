import Logging
import Metrics
import ParleyCluster
import ParleyModel

/// A send through a conversation's owner, as a gateway makes it: when the owner dies mid-request
/// (a lost connection, no reply, the ring moving), the same send goes again — its
/// `clientMessageId` is the idempotency key, so a send that did commit returns the original —
/// until the window runs out. This is the send's only retry: each call is attempted once
/// (``ClusterSystem/retriedByCaller(_:)``).
public enum SendRetry {
    /// Between attempts: 50 ms, doubling up to 500 ms; after `not_owner`, the cluster's own short
    /// pause (``ClusterSystem/callRetry``).
    public static let backoff = Backoff(first: .milliseconds(50), max: .milliseconds(500))
    static let retries = Counter(label: "parley.gateway.send_retries")

    /// The cluster errors after which a send may go again: the call did not run, or its outcome
    /// is unknown (idempotency makes a second try safe either way).
    public static let retryableCodes: Set<String> = [
        ClusterCallError.Code.deadlineExceeded.rawValue, ClusterCallError.Code.notOwner.rawValue,
        ClusterCallError.Code.unavailable.rawValue, ClusterCallError.Code.connectionLost.rawValue,
        ClusterCallError.Code.shutdown.rawValue,
    ]

    /// The window ran out: the last attempt failed with `last`.
    public struct GaveUp: Error {
        public var window: Duration
        public var last: ClusterCallError
    }

    /// `send` until it succeeds, fails with an error that is not a retryable cluster error, or
    /// `window` on `clock` runs out (then ``GaveUp``), pausing by ``backoff`` between attempts.
    public static func send<Result>(
        within window: Duration, clock: some ClusterClock, logger: Logger, conversation: ConversationID, _ send: () async throws -> Result
    ) async throws -> Result {
        let deadline = clock.now.advanced(by: window)
        var attempt = 0
        while true {
            attempt += 1
            do {
                let result = try await ClusterSystem.retriedByCaller(send)
                if attempt > 1 {
                    logger.info("send succeeded after retries", metadata: ["conversation.id": "\(conversation)", "attempts": "\(attempt)"])
                }
                return result
            } catch let error as ClusterCallError where retryableCodes.contains(error.code.rawValue) {
                // `not_owner`: the ring moved first, and the owner is usually ready within
                // milliseconds; `unavailable` may be the owner's store, which a quick retry does
                // not help.
                let pause = (error.code == .notOwner ? ClusterSystem.callRetry : backoff).delay(afterFailures: attempt)
                guard clock.now.advanced(by: pause) < deadline else { throw GaveUp(window: window, last: error) }
                logger.debug("send failed; retrying on the owner", metadata: ["conversation.id": "\(conversation)", "error": "\(error)"])
                retries.increment()
                try await clock.sleep(for: pause)
            }
        }
    }
}
