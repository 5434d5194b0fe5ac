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

    @Test func aFailedBatchGoesAgainFirstThenIsDroppedWithItsBacklog() {
        var machine = Machine(batchMax: 2, attemptsMax: 2)
        _ = machine.enqueue(1, to: "g")
        _ = machine.enqueue(2, to: "g")
        _ = machine.enqueue(3, to: "g")
        #expect(Self.sent(machine.failed(to: "g")) == [1, 2], "retried first, order kept")
        guard case .drop("g", let dropped) = machine.failed(to: "g") else {
            Issue.record("the second failure in a row drops")
            return
        }
        #expect(dropped == [1, 2, 3])
        #expect(machine.backlog(of: "g") == 0)
        #expect(Self.sent(machine.enqueue(4, to: "g")) == [4], "a later item starts afresh")
    }
}
