import Testing

@testable import ParleyGateway

/// The count of open client connections against the limit, and of closed ones for the memory trim.
@Suite struct ConnectionCountTests {
    @Test func connectionsPastTheLimitAreRefusedUntilOneCloses() {
        let connections = ConnectionCount(max: 2)
        #expect(connections.open() && connections.open())
        #expect(!connections.open(), "a third connection was let in past a limit of 2")
        connections.closed()
        #expect(connections.open())
        #expect(connections.current == 2)
    }

    @Test func closedConnectionsAreTakenForATrimOnlyOnceEnoughHaveClosed() {
        let connections = ConnectionCount(max: 1_000)
        for _ in 0..<300 { _ = connections.open() }
        for _ in 0..<200 { connections.closed() }
        #expect(connections.takeClosedSinceTrim(atLeast: 256) == nil, "a trim after only 200 closes")
        for _ in 0..<100 { connections.closed() }
        #expect(connections.takeClosedSinceTrim(atLeast: 256) == 300, "the closes before the threshold were forgotten")
        #expect(connections.takeClosedSinceTrim(atLeast: 1) == nil, "the count did not start over")
        #expect(connections.current == 0)
    }
}
