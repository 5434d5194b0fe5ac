import ParleyChat
import ParleySimulation
import Testing

@Suite struct DeadlineTests {
    @Test func anAnswerBeforeTheDeadlineIsReturned() async {
        let clock = SteppedClock()
        let answer = await untilDeadline(clock.now.advanced(by: .seconds(3)), on: clock) { 42 }
        #expect(answer == 42)
    }

    @Test func noAnswerByTheDeadlineIsNilAndTheWaitEndsThere() async throws {
        let clock = SteppedClock()
        let never = AsyncStream<Int>.makeStream()  // a call that never answers
        let waiting = Task { await untilDeadline(clock.now.advanced(by: .seconds(3)), on: clock) { await never.stream.first { _ in true } ?? -1 } }
        while clock.sleeperCount == 0 { try await Task.sleep(for: .milliseconds(1)) }
        clock.advance(by: .seconds(2))
        clock.advance(by: .seconds(1))
        #expect(await waiting.value == nil, "the lease ended before the answer")
        never.continuation.finish()
    }
}
