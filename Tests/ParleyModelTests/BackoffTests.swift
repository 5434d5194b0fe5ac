import ParleyModel
import Testing

@Suite struct BackoffTests {
    @Test func doublesFromTheFirstWaitToTheMostAndStaysThere() {
        let backoff = Backoff(first: .milliseconds(50), max: .milliseconds(500))
        #expect((0...7).map { backoff.delay(afterFailures: $0) }
            == [50, 50, 100, 200, 400, 500, 500, 500].map { Duration.milliseconds($0) })
        #expect(backoff.delay(afterFailures: .max) == .milliseconds(500), "a failure count past any doubling")
        #expect(backoff.next(after: .milliseconds(50)) == .milliseconds(100))
        #expect(backoff.next(after: .milliseconds(400)) == .milliseconds(500))
    }

    @Test func whatTheOtherSideAskedForIsTheLeastWait() {
        let backoff = Backoff(first: .seconds(1), max: .seconds(600))
        #expect(backoff.delay(afterFailures: 1, atLeast: .seconds(120)) == .seconds(120))
        #expect(backoff.delay(afterFailures: 4, atLeast: .seconds(2)) == .seconds(8))
        #expect(backoff.delay(afterFailures: 4, atLeast: nil) == .seconds(8))
    }

    @Test func aMostBelowTheFirstIsTheFirst() {
        #expect(Backoff(first: .seconds(2), max: .seconds(1)).delay(afterFailures: 3) == .seconds(2))
    }
}
