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

    @Test func manyCallsCompletedOrWaitingExpireExactlyAtTheirDeadlines() {
        var time = ManualTime()
        var table = CallTable<ContinuousClock.Instant, Int>()
        var waiting: [Int: Int] = [:]  // pending → deadline in ms
        // Thousands of calls with deadlines out of order, most completing before them: past the
        // point where the table rebuilds its deadlines from the calls still waiting.
        for index in 0..<5_000 {
            let id = table.makeCallID()
            let deadline = 100 + (index * 7919) % 1_000
            table.register(id, peer: "p", deadline: time.at(.milliseconds(deadline)), pending: index)
            if index % 5 == 0 {
                waiting[index] = deadline
            } else {
                #expect(table.complete(id) == index)
            }
        }
        #expect(table.count == waiting.count)
        var expired: [Int] = []
        for step in stride(from: 0, through: 1_200, by: 50) {
            let now = time.advance(by: .milliseconds(step == 0 ? 0 : 50))
            let batch = table.expire(now: now)
            for call in batch {
                #expect(waiting[call.pending].map { $0 <= step && $0 > step - 50 } == true, "call \(call.pending) expired at \(step) ms")
            }
            expired += batch.map(\.pending)
        }
        #expect(expired.sorted() == waiting.keys.sorted(), "every waiting call expired once, no completed one")
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
