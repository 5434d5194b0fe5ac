import ParleyChat
import Synchronization
import Testing

/// A clock that moves only when the test says so; sleepers wake when it passes their deadline.
final class SteppedClock: Clock, Sendable {
    typealias Instant = ContinuousClock.Instant
    private struct State {
        var now = ContinuousClock.now
        var sleepers: [(deadline: Instant, wake: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Mutex(State())
    var now: Instant { state.withLock { $0.now } }
    var minimumResolution: Duration { .zero }
    var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        await withCheckedContinuation { continuation in
            let due = state.withLock { state -> Bool in
                guard deadline > state.now else { return true }
                state.sleepers.append((deadline, continuation))
                return false
            }
            if due { continuation.resume() }
        }
    }

    func advance(by duration: Duration) {
        let woken = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.now = state.now.advanced(by: duration)
            let now = state.now
            let due = state.sleepers.filter { $0.deadline <= now }
            state.sleepers.removeAll { $0.deadline <= now }
            return due.map(\.wake)
        }
        for wake in woken { wake.resume() }
    }
}

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
