import Logging
import ParleyCluster
import ParleyModel
import Synchronization
import Testing

@testable import ParleyGateway

/// The gateway's retry of a send whose owner could not take it (it died mid-request, the ring
/// moved): the same send again, until it succeeds or the window runs out.
@Suite struct SendRetryTests {
    static let logger = Logger(label: "parley.test.send-retry")

    @Test func aSendTheOwnerCouldNotTakeIsRetriedUntilItGoesThrough() async throws {
        let attempts = Mutex(0)
        // A window far longer than the two short pauses: the test is about what is retried, not how
        // fast a busy machine resumes the task after each pause.
        let result = try await Gateway.retryingSend(within: .seconds(120), clock: ContinuousClock(), logger: Self.logger, conversation: "c_1") { () throws -> String in
            let attempt = attempts.withLock { attempts in
                attempts += 1
                return attempts
            }
            switch attempt {
            case 1: throw ClusterCallError(code: .connectionLost, message: "the owner's connection closed mid-call")
            case 2: throw ClusterCallError(code: .notOwner, message: "the ring moved")
            default: return "stored"
            }
        }
        #expect(result == "stored")
        #expect(attempts.withLock { $0 } == 3)
    }

    @Test func aRefusalOfTheSendItselfIsNotRetried() async throws {
        let attempts = Mutex(0)
        do {
            _ = try await Gateway.retryingSend(within: .seconds(5), clock: ContinuousClock(), logger: Self.logger, conversation: "c_1") { () throws -> String in
                attempts.withLock { $0 += 1 }
                throw ClusterCallError(code: ClusterCallError.Code(rawValue: ChatError.Code.notFound.rawValue), message: "conversation not found")
            }
            Issue.record("a refusal must reach the caller")
        } catch let error as ClusterCallError {
            #expect(error.code.rawValue == ChatError.Code.notFound.rawValue)
        }
        #expect(attempts.withLock { $0 } == 1)
    }

    @Test func pastTheWindowTheClientGetsARetryableUnavailable() async throws {
        let attempts = Mutex(0)
        do {
            _ = try await Gateway.retryingSend(within: .milliseconds(200), clock: ContinuousClock(), logger: Self.logger, conversation: "c_1") { () throws -> String in
                attempts.withLock { $0 += 1 }
                throw ClusterCallError(code: .unavailable, message: "no worker is up to own it")
            }
            Issue.record("a send that never goes through must fail")
        } catch let error as APIError {
            #expect(error.code == "unavailable" && error.retryable, "503 unavailable, retryable: \(error)")
        }
        #expect(attempts.withLock { $0 } >= 2, "retried before giving up")
    }
}
