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

    /// One address holds at most its share: a host without an account cannot take every slot,
    /// and the others still get in; a refused connection counts for neither.
    @Test func oneAddressHoldsAtMostItsShare() {
        let connections = ConnectionCount(max: 10, perAddressMax: 3)
        for _ in 0..<3 { #expect(connections.open(from: "203.0.113.7")) }
        #expect(!connections.open(from: "203.0.113.7"), "a fourth from one address")
        #expect(connections.open(from: "198.51.100.2"), "another address still gets in")
        #expect(connections.current == 4 && connections.held(by: "203.0.113.7") == 3)
        connections.closed(from: "203.0.113.7")
        #expect(connections.open(from: "203.0.113.7"), "its own slot back once one closed")
        // At the overall limit, an address under its share is refused, and not counted.
        for index in 0..<6 { _ = connections.open(from: "192.0.2.\(index)") }
        #expect(connections.current == 10)
        #expect(!connections.open(from: "192.0.2.99") && connections.held(by: "192.0.2.99") == 0)
    }
}
