import Dispatch
import HTTPTypes
import Testing
@testable import ParleyGateway

@Suite struct PasswordHashingTests {
    /// Past `outstandingMax` hashes running or waiting, the next is refused at once with a
    /// retryable 503 instead of queueing behind them; once they end, hashing goes on. (The
    /// outstanding work here waits on a semaphore rather than hashing, so that the test holds two
    /// of the pool's threads, not two cores.)
    @Test func hashesPastTheBoundAreRefusedNotQueued() async throws {
        let hashing = PasswordHashing(cost: 4, outstandingMax: 2)
        let release = DispatchSemaphore(value: 0)
        let held = (0..<2).map { _ in Task { try await hashing.run { release.wait(); return 1 } } }
        for _ in 0..<5_000 where hashing.count < 2 { try await Task.sleep(for: .milliseconds(1)) }
        #expect(hashing.count == 2)
        do {
            _ = try await hashing.hash("correct horse battery")
            Issue.record("a third hash must be refused while two are outstanding")
        } catch let error as APIError {
            #expect(error.status.code == 503 && error.retryable)
        }
        release.signal()
        release.signal()
        #expect(try await held[0].value + held[1].value == 2)
        #expect(hashing.count == 0)
        let hash = try await hashing.hash("correct horse battery")
        #expect(try await hashing.verify("correct horse battery", hash: hash))
    }
}
