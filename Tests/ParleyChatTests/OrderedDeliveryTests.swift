import ParleyChat
import Testing

@Suite struct OrderedDeliveryStateMachineTests {
    typealias Machine = OrderedDeliveryStateMachine<String, Int>

    static func sent(_ action: Machine.Action) -> [Int]? {
        if case .send(_, let items) = action { return items }
        return nil
    }

    @Test func oneBatchInFlightPerDestinationInEnqueueOrder() {
        var machine = Machine(batchMax: 3)
        #expect(Self.sent(machine.enqueue(1, to: "g1")) == [1])
        #expect(Self.sent(machine.enqueue(10, to: "g2")) == [10], "destinations do not wait for each other")
        for i in 2...5 { #expect(Self.sent(machine.enqueue(i, to: "g1")) == nil) }
        #expect(Self.sent(machine.delivered(to: "g1")) == [2, 3, 4])
        #expect(Self.sent(machine.delivered(to: "g1")) == [5])
        #expect(Self.sent(machine.delivered(to: "g1")) == nil)
        #expect(machine.backlog(of: "g1") == 0)
    }

    /// A failed batch goes again, first in line, while its destination is live and for at most
    /// `retryMax` from the first failure in a row; then it is dropped with everything behind it.
    @Test func aFailedBatchGoesAgainFirstUntilRetryMaxThenIsDroppedWithItsBacklog() {
        let start = ContinuousClock.now
        var machine = Machine(batchMax: 2, retryMax: .seconds(30))
        _ = machine.enqueue(1, to: "g")
        _ = machine.enqueue(2, to: "g")
        _ = machine.enqueue(3, to: "g")
        #expect(Self.sent(machine.failed(to: "g", destinationLive: true, now: start)) == [1, 2], "retried first, order kept")
        #expect(Self.sent(machine.failed(to: "g", destinationLive: true, now: start + .seconds(29))) == [1, 2])
        guard case .drop("g", let dropped) = machine.failed(to: "g", destinationLive: true, now: start + .seconds(30)) else {
            Issue.record("failing for retryMax drops")
            return
        }
        #expect(dropped == [1, 2, 3])
        #expect(machine.backlog(of: "g") == 0)
        #expect(Self.sent(machine.enqueue(4, to: "g")) == [4], "a later item starts afresh")
        // A success ends the streak.
        #expect(Self.sent(machine.failed(to: "g", destinationLive: true, now: start + .seconds(40))) == [4])
        #expect(Self.sent(machine.delivered(to: "g")) == nil)
        _ = machine.enqueue(5, to: "g")
        #expect(Self.sent(machine.failed(to: "g", destinationLive: true, now: start + .seconds(100))) == [5])
    }

    /// A destination the cluster no longer counts as live (down, left, gone) gets nothing more:
    /// its streams ended with it.
    @Test func aBatchForADestinationThatIsNotLiveIsDroppedAtOnce() {
        var machine = Machine(batchMax: 2)
        _ = machine.enqueue(1, to: "g")
        _ = machine.enqueue(2, to: "g")
        guard case .drop("g", let dropped) = machine.failed(to: "g", destinationLive: false, now: .now) else {
            Issue.record("a destination that is not live is dropped")
            return
        }
        #expect(dropped == [1, 2])
    }
}
