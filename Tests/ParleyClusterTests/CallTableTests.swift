import ParleySimulation
import ParleyCluster
import ParleyTestKit
import Testing

@Suite struct CallTableTests {
    @Test func callsExpireAtTheirDeadlineAndNotBefore() {
        var time = ManualTime()
        var table = CallTable<ContinuousClock.Instant, String>()
        let a = table.makeCallID(), b = table.makeCallID()
        #expect(a != b)
        table.register(a, peer: "x", deadline: time.at(.seconds(1)), pending: "a")
        table.register(b, peer: "y", deadline: time.at(.seconds(5)), pending: "b")
        #expect(table.expire(now: time.advance(by: .milliseconds(999))).isEmpty)
        #expect(table.expire(now: time.advance(by: .milliseconds(1))).map(\.pending) == ["a"])
        #expect(table.complete(a) == nil, "an expired call is gone")
        #expect(table.complete(b) == "b")
        #expect(table.count == 0)
    }

    @Test func aLostPeerTakesOnlyItsCalls() {
        let time = ManualTime()
        var table = CallTable<ContinuousClock.Instant, Int>()
        for i in 0..<6 {
            table.register(table.makeCallID(), peer: i % 2 == 0 ? "even" : "odd", deadline: time.at(.seconds(5)), pending: i)
        }
        #expect(table.removeAll(peer: "odd").map(\.pending) == [1, 3, 5])
        #expect(table.count == 3)
        #expect(table.earliestDeadline == time.at(.seconds(5)))
    }
}
