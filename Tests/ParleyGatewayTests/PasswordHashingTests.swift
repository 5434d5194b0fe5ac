import HTTPTypes
import Testing
@testable import ParleyGateway

@Suite struct PasswordHashingTests {
    /// Past `outstandingMax` hashes running or waiting, the next is refused at once with a
    /// retryable 503 instead of queueing behind them; once they end, hashing goes on.
    @Test func hashesPastTheBoundAreRefusedNotQueued() async throws {
        let hashing = PasswordHashing(cost: 12, outstandingMax: 2)
        let slow = (0..<2).map { _ in Task { try await hashing.hash("correct horse battery") } }
        for _ in 0..<5_000 where hashing.count < 2 { try await Task.sleep(for: .milliseconds(1)) }
        #expect(hashing.count == 2)
        do {
            _ = try await hashing.verify("x", hash: "$2b$04$abcdefghijklmnopqrstuu5s2v8.iXieOjg/.AySBTTZIIVFJeBui")
            Issue.record("a third hash must be refused while two are outstanding")
        } catch let error as APIError {
            #expect(error.status.code == 503 && error.retryable)
        }
        let hashes = try await [slow[0].value, slow[1].value]
        #expect(hashing.count == 0)
        #expect(try await hashing.verify("correct horse battery", hash: hashes[0]))
    }
}
