import ParleySimulation
import ParleyCluster
import ParleyModel
import ParleyTestKit
import Testing

@testable import ParleyTransport

@Suite struct ConnectionTableTests {
    typealias Table = ConnectionTable<Int>
    static func identity(_ name: String, _ incarnation: UInt64 = 1) -> PeerIdentity {
        PeerIdentity(id: NodeID(name: name, incarnation: incarnation), roles: .worker, address: NodeAddress(host: "127.0.0.1", port: 7000 + name.count))
    }

    /// Both nodes dial each other at once, the hellos cross in every order: both keep the same
    /// connection, the one dialed by the smaller name.
    @Test(arguments: [false, true])
    func simultaneousDialsKeepTheSameConnection(bHearsFirst acceptFirst: Bool) {
        let a = Self.identity("a"), b = Self.identity("b")
        var tableA = Table(me: a.id), tableB = Table(me: b.id)
        let now = ContinuousClock.now
        // Connection 1 is dialed by a, connection 2 by b.
        let dial1 = tableA.startDial(to: b.address, node: "b", now: now)
        #expect(dial1)
        let dial2 = tableB.startDial(to: a.address, node: "a", now: now)
        #expect(dial2)
        var bOnDialFromA = Table.InboundDecision.reject("not yet"), aOnDialFromB = bOnDialFromA
        if acceptFirst {
            bOnDialFromA = tableB.helloReceived(from: a, on: 1, serial: 1)
            aOnDialFromB = tableA.helloReceived(from: b, on: 2, serial: 2)
        } else {
            aOnDialFromB = tableA.helloReceived(from: b, on: 2, serial: 2)
            bOnDialFromA = tableB.helloReceived(from: a, on: 1, serial: 1)
        }
        #expect(bOnDialFromA == .accept(replacing: nil))
        #expect(aOnDialFromB == .reject("simultaneous dial: a's own dial to b is the one kept"))
        #expect(tableA.helloAccepted(by: b, on: 1, serial: 3, dialed: b.address) == .keep(replacing: nil))
        #expect(tableA.established["b"]?.handle == 1)
        #expect(tableB.established["a"]?.handle == 1)
    }

    @Test func whenBothHellosWereAcceptedBothSidesCloseTheSameOne() {
        // Each side accepted the other's hello before its own was answered.
        let a = Self.identity("a"), b = Self.identity("b")
        var tableA = Table(me: a.id), tableB = Table(me: b.id)
        #expect(tableA.helloReceived(from: b, on: 2, serial: 1) == .accept(replacing: nil))
        #expect(tableB.helloReceived(from: a, on: 1, serial: 1) == .accept(replacing: nil))
        // Now each learns its own dial was accepted too.
        #expect(tableA.helloAccepted(by: b, on: 1, serial: 2, dialed: b.address) == .keep(replacing: 2))
        #expect(tableB.helloAccepted(by: a, on: 2, serial: 2, dialed: a.address) == .close("duplicate connection: keeping the existing one to a"))
        #expect(tableA.established["b"]?.handle == 1)
        #expect(tableB.established["a"]?.handle == 1)
    }

    @Test func aRestartedPeerReplacesItsOldConnection() {
        var table = Table(me: NodeID(name: "b", incarnation: 1))
        #expect(table.helloReceived(from: Self.identity("a", 1), on: 1, serial: 1) == .accept(replacing: nil))
        #expect(table.helloReceived(from: Self.identity("a", 2), on: 2, serial: 2) == .accept(replacing: 1))
        #expect(table.helloReceived(from: Self.identity("a", 1), on: 3, serial: 3) == .reject("duplicate connection: b keeps its existing connection to a"))
        #expect(table.closed(1) == nil, "the replaced connection is no one's any more")
        #expect(table.closed(2) == Self.identity("a", 2))
    }

    @Test func aPeerThatRedialsReplacesItsOwnOldConnection() {
        var table = Table(me: NodeID(name: "b", incarnation: 1))
        #expect(table.helloReceived(from: Self.identity("a"), on: 1, serial: 1) == .accept(replacing: nil))
        #expect(table.helloReceived(from: Self.identity("a"), on: 2, serial: 2) == .accept(replacing: 1))
    }

    @Test func thisNodeItselfIsRefusedAndNotDialedAgain() {
        let me = Self.identity("a")
        var table = Table(me: me.id)
        #expect(table.helloReceived(from: me, on: 1, serial: 1) == .reject("that is this node (a) itself"))
        let now = ContinuousClock.now
        let alias = NodeAddress(host: "localhost", port: 7001)
        let dial3 = table.startDial(to: alias, node: nil, now: now)
        #expect(dial3)
        table.helloRejected(dialed: alias, reason: "that is this node (a) itself", isSelf: true)
        let dial4 = table.startDial(to: alias, node: nil, now: now.advanced(by: .seconds(60)))
        #expect(!dial4)
    }

    @Test func failedDialsBackOffDoublingToTheCap() {
        var table = Table(me: NodeID(name: "a", incarnation: 1), backoff: Backoff(first: .milliseconds(50), max: .seconds(2)))
        let address = NodeAddress(host: "127.0.0.1", port: 9)
        var time = ManualTime()
        var backoffs: [Duration] = []
        for _ in 0..<8 {
            let dial5 = table.startDial(to: address, node: "b", now: time.now)
            #expect(dial5)
            let again = table.startDial(to: address, node: "b", now: time.now)
            #expect(!again, "one dial in flight at a time")
            let backoff = table.dialFailed(to: address, now: time.now)
            backoffs.append(backoff)
            let dial6 = table.startDial(to: address, node: "b", now: time.now.advanced(by: backoff - .milliseconds(1)))
            #expect(!dial6)
            time.advance(by: backoff)
        }
        #expect(backoffs == [.milliseconds(50), .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .milliseconds(1600), .seconds(2), .seconds(2)])
    }
}
