import Distributed
import Foundation
@_spi(Testing) import ParleyCluster
import ParleyTransport
import Synchronization
import ParleyTestKit
import Testing

@Suite(.serialized) struct ClusterSystemTests {
    static func probe(_ key: String, on system: ClusterSystem) throws -> Probe {
        try Probe.resolve(id: ClusterActorID(kind: "probe", key: key), using: system)
    }

    /// `probe.fail(code:)` reaches its caller as the error its owner `node` threw, code and message.
    static func expectFailureOnPurpose(from probe: Probe, on node: String) async throws {
        do {
            try await probe.fail(code: "test_refused")
            Issue.record("fail(code:) must throw")
        } catch let error as ClusterCallError {
            #expect(error.code.rawValue == "test_refused")
            #expect(error.message == "failed on purpose on \(node)")
        }
    }

    @Test func aVirtualActorIsReachableFromEveryNodeAndActivatedOnceOnItsOwner() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b", "node-c"] { try await cluster.start(name) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b", "node-c"])

        for key in (0..<12).map({ "key-\($0)" }) {
            let owner = try #require(cluster["node-a"].owner(of: ClusterActorID(kind: "probe", key: key)))
            // 30 concurrent first calls, 10 from each node.
            let answers = try await withThrowingTaskGroup(of: String.self) { group in
                for name in ["node-a", "node-b", "node-c"] {
                    let system = cluster[name]
                    for _ in 0..<10 {
                        group.addTask { try await Self.probe(key, on: system).whereAreYou() }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(Set(answers) == [owner], "\(key) answered from \(Set(answers)), owner is \(owner)")
            let id = ClusterActorID(kind: "probe", key: key)
            #expect(cluster.activations.withLock { $0[id] } == [owner], "\(key) activated \(cluster.activations.withLock { $0[id] ?? [] })")
            #expect(try await Self.probe(key, on: cluster["node-b"]).count() == 1)
            #expect(try await Self.probe(key, on: cluster["node-c"]).count() == 2, "the same activation serves every node")
        }
    }

    /// A call with a direct target (`registerDirect`: no lookup of the method by its mangled name)
    /// answers as the general path does: the value, the method's own error; a target registered
    /// with the wrong argument type refuses the call as one that cannot be invoked.
    @Test func directTargetsAnswerAsTheGeneralPathDoes() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b"] { try await cluster.start(name) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])
        let twice = "$s20ParleyTransportTests5ProbeC5twiceyS2SYaKFTE"
        let fail = "$s20ParleyTransportTests5ProbeC4fail4codeySS_tYaKFTE"
        let echo = "$s20ParleyTransportTests5ProbeC4echo_5timesSaySSGSS_SitYaKFTE"
        for name in ["node-a", "node-b"] {
            cluster[name].registerDirect(twice, of: Probe.self) { probe, text in try await probe.twice(text) }
            cluster[name].registerDirect(fail, of: Probe.self) { probe, code in try await probe.fail(code: code) }
            cluster[name].registerDirect(echo, of: Probe.self) { probe, text, times in try await probe.echo(text, times: times) }
        }
        let probe = try Self.probe(probeKey(ownedBy: "node-b", on: cluster["node-a"]), on: cluster["node-a"])
        #expect(try await probe.twice("ab") == "abab")
        #expect(try await probe.echo("x", times: 3) == ["x", "x", "x"], "two arguments, in order")
        try await Self.expectFailureOnPurpose(from: probe, on: "node-b")
        #expect(
            cluster["node-b"].directCalls(to: twice) == 1 && cluster["node-b"].directCalls(to: fail) == 1 && cluster["node-b"].directCalls(to: echo) == 1,
            "all three ran directly on the owner")
        #expect(cluster["node-a"].directCalls(to: twice) == 0)
        #expect(cluster["node-b"].directCalls(to: "no such target") == nil)

        cluster["node-b"].registerDirect(twice, of: Probe.self) { (probe: Probe, number: Int) in "\(number)" }
        do {
            _ = try await probe.twice("ab")
            Issue.record("a String is not an Int")
        } catch let error as ClusterCallError {
            #expect(error.code == .serialization, "\(error)")
        }
        #expect(try await probe.count() == 1, "the general path still serves the other methods")
    }

    @Test func argumentsResultsAndTypedErrorsCrossNodes() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b"] { try await cluster.start(name) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])
        // A key owned by node-b, called from node-a: a real network hop.
        let probe = try Self.probe(probeKey(ownedBy: "node-b", on: cluster["node-a"]), on: cluster["node-a"])
        #expect(try await probe.echo("héllo 👋", times: 3) == ["héllo 👋", "héllo 👋", "héllo 👋"])
        try await probe.doNothing()
        // A call a node receives runs on the event loop that read it (`currentLoopExecutor`),
        // not on the cooperative pool.
        #expect(try await probe.runsOnAnEventLoop())
        try await Self.expectFailureOnPurpose(from: probe, on: "node-b")
        do {
            _ = try await ClusterSystemTests.unknownKind(on: cluster["node-a"])
            Issue.record("an unknown kind must fail")
        } catch let error as ClusterCallError {
            #expect(error.code == .actorNotFound)
        }
    }

    /// A call to an actor on the caller's own node hands its argument and result over as values,
    /// encoding nothing; a call to another node encodes the argument once, and what comes back is
    /// a decoded copy.
    @Test func aCallOnTheSameNodePassesValuesAndOnlyACallToAnotherNodeEncodes() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b"] { try await cluster.start(name) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])
        let local = try Self.probe(probeKey(ownedBy: "node-a", on: cluster["node-a"]), on: cluster["node-a"])
        let sent = Tallied("here")
        let back = try await local.handBack(sent)
        #expect(back.text == "here" && back.tally === sent.tally, "the same value came back")
        #expect(sent.tally.encodes.withLock { $0 } == 0, "nothing was encoded")

        let remote = try Self.probe(probeKey(ownedBy: "node-b", on: cluster["node-a"]), on: cluster["node-a"])
        let far = Tallied("there")
        let answer = try await remote.handBack(far)
        #expect(answer.text == "there" && answer.tally !== far.tally, "a decoded copy came back")
        #expect(far.tally.encodes.withLock { $0 } == 1, "the argument was encoded once")
    }

    @Test func aPinnedActorIsReachedOnItsNodeUntilItIsGone() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b"] { try await cluster.start(name) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])
        var pinned: Probe? = Probe(actorSystem: cluster["node-a"])
        let id = try #require(pinned?.id)
        #expect(id.node == "node-a" && !id.isVirtual)
        #expect(try Probe.resolve(id: id, using: cluster["node-a"]) === pinned, "resolved locally on its own node")
        let remote = try Probe.resolve(id: id, using: cluster["node-b"])
        #expect(try await remote.whereAreYou() == "node-a")
        #expect(try await remote.count() == 1)
        pinned = nil
        do {
            _ = try await remote.count()
            Issue.record("a released pinned actor must not answer")
        } catch let error as ClusterCallError {
            #expect(error.code == .actorNotFound)
        }
        do {
            _ = try await Probe.resolve(id: ClusterActorID(kind: "Probe", key: "x", node: "ghost"), using: cluster["node-b"]).count()
            Issue.record("an actor on an unknown node must not answer")
        } catch let error as ClusterCallError {
            #expect(error.code == .unavailable, "\(error)")
        }
    }

    static func unknownKind(on system: ClusterSystem) async throws -> String {
        try await Probe.resolve(id: ClusterActorID(kind: "no-such-kind", key: "x"), using: system).whereAreYou()
    }

    @Test func whenANodeStopsAbruptlyItsActorsMoveToSurvivors() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b", "node-c"] { try await cluster.start(name) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b", "node-c"])
        let keys = (0..<30).map { "key-\($0)" }
        let onC = keys.filter { cluster["node-a"].owner(of: ClusterActorID(kind: "probe", key: $0)) == "node-c" }
        try #require(!onC.isEmpty)
        for key in onC { #expect(try await Self.probe(key, on: cluster["node-a"]).whereAreYou() == "node-c") }

        let victim = cluster["node-c"]
        cluster.remove("node-c")
        await victim.stop()  // no leave: peers must find out by failure detection

        try await eventually(timeout: .seconds(10), "both survivors mark node-c down") {
            ["node-a", "node-b"].allSatisfy { cluster[$0].members.first { $0.name == "node-c" }?.status == .down }
        }
        for key in onC {
            for caller in ["node-a", "node-b"] {
                let answer = try await Self.probe(key, on: cluster[caller]).whereAreYou()
                #expect(answer == "node-a" || answer == "node-b")
            }
        }
    }

    @Test func withGossipToTwoPeersARoundSixNodesMeetAndFindACrashedOne() async throws {
        var membership = LoopbackCluster.membership
        membership.gossipPeersPerRound = 2
        let cluster = try makeTestCluster()
        let names = (1...6).map { "node-\($0)" }
        for name in names { try await cluster.start(name, membership: membership) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(Set(names))

        let victim = cluster["node-4"]
        cluster.remove("node-4")
        await victim.stop()
        let survivors = names.filter { $0 != "node-4" }
        try await eventually(timeout: .seconds(10), "every survivor marks node-4 down") {
            survivors.allSatisfy { cluster[$0].members.first { $0.name == "node-4" }?.status == .down }
        }
        // Each hears from most peers only through others, and takes none of them for dead.
        for name in survivors {
            let others = cluster[name].members.filter { $0.name != "node-4" }
            #expect(others.map(\.status) == Array(repeating: .up, count: 5), "\(name) sees \(others)")
        }
    }

    @Test func nodesThatFormAndJoinAClusterHearOfNoMerge() async throws {
        let merged = Mutex<[String]>([])
        let cluster = try LoopbackCluster { system, _ in
            let name = system.settings.name
            system.onMerge { members in merged.withLock { $0.append("\(name) met \(members.map(\.name))") } }
        }
        defer { Task { await cluster.stopAll() } }
        for name in ["node-a", "node-b", "node-c"] { try await cluster.start(name) }
        try await cluster.waitForUp(["node-a", "node-b", "node-c"])
        try await cluster.start("node-d")
        try await cluster.waitForUp(["node-a", "node-b", "node-c", "node-d"])
        // node-b and node-c hear of node-d only once it is up: that is no merge.
        #expect(merged.withLock { $0 }.isEmpty)
    }

    @Test func aGracefulLeaveMovesActorsWithoutWaitingForFailureDetection() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b", "node-c"] { try await cluster.start(name) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b", "node-c"])
        let leaver = cluster["node-b"]
        cluster.remove("node-b")
        await leaver.shutdown()
        try await eventually(timeout: .seconds(5), "survivors see node-b as left") {
            ["node-a", "node-c"].allSatisfy { cluster[$0].members.first { $0.name == "node-b" }?.status == .left }
        }
        // Left, not down: the ring moved on the leave itself, not after a failure-detection timeout.
        #expect(cluster["node-a"].ring.workers == ["node-a", "node-c"])
        let key = try #require((0..<100).map { "k\($0)" }.first { HashRingOwner.before(["node-a", "node-b", "node-c"], $0) == "node-b" })
        let answer = try await Self.probe(key, on: cluster["node-c"]).whereAreYou()
        #expect(answer == "node-a" || answer == "node-c")
    }

    @Test func aRestartedNodeReplacesItsOldIncarnation() async throws {
        let cluster = try makeTestCluster()
        for name in ["node-a", "node-b"] { try await cluster.start(name) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])
        let old = cluster["node-b"]
        let oldIncarnation = old.me.id.incarnation
        cluster.remove("node-b")
        await old.stop()
        try await cluster.start("node-b", incarnation: oldIncarnation + 1)
        // node-a may still list the old incarnation as up for a moment: wait for the new one.
        try await eventually(timeout: .seconds(5), "node-a knows node-b's new incarnation") {
            cluster["node-a"].members.first { $0.name == "node-b" }?.id.incarnation == oldIncarnation + 1
        }
        try await cluster.waitForUp(["node-a", "node-b"])
        #expect(cluster["node-a"].members.filter { $0.name == "node-b" }.count == 1, "one member per name")
    }
}

enum HashRingOwner {
    static func before(_ workers: [String], _ key: String) -> String? {
        HashRing(workers: workers).owner(of: ClusterActorID(kind: "probe", key: key).placementKey)
    }
}

@Suite(.serialized) struct OversizedFrameTests {
    /// A call or a reply over the frame limit fails as that call's own typed error, at once, and
    /// is never written: the peer would close the connection on it, failing every other call in
    /// flight there.
    @Test func aCallOrReplyOverTheFrameLimitFailsAloneWithATypedError() async throws {
        let cluster = try makeTestCluster()
        // A small limit, so that the test's messages are small too (a 5 MiB string is seconds of a
        // debug build's CPU, taken from the suites running beside it).
        var small = TransportSettings()
        small.frameBytesMax = 64 * 1024
        for name in ["node-a", "node-b"] { try await cluster.start(name, transportSettings: small) }
        defer { Task { await cluster.stopAll() } }
        try await cluster.waitForUp(["node-a", "node-b"])
        let key = try #require((0..<100).map { "big-\($0)" }.first { cluster["node-a"].owner(of: ClusterActorID(kind: "probe", key: $0)) == "node-b" })
        let probe = try ClusterSystemTests.probe(key, on: cluster["node-a"])
        #expect(try await probe.whereAreYou() == "node-b")
        do {
            _ = try await probe.echo(String(repeating: "x", count: 80 * 1024), times: 1)
            Issue.record("a call of 80 KiB must fail")
        } catch let error as ClusterCallError {
            // Not connection_lost (the peer closed on it) nor deadline_exceeded (nobody answered).
            #expect(error.code == .serialization, "\(error)")
        }
        do {
            _ = try await probe.echo(String(repeating: "y", count: 20 * 1024), times: 5)
            Issue.record("a reply of 100 KiB must fail")
        } catch let error as ClusterCallError {
            #expect(error.code == .serialization && error.message.contains("reply"), "\(error)")
        }
        // The connection stayed up: calls in flight meanwhile and after go through.
        async let during = probe.echo("small", times: 3)
        _ = try? await probe.echo(String(repeating: "x", count: 80 * 1024), times: 1)
        #expect(try await during == ["small", "small", "small"])
        #expect(try await probe.count() >= 1)
    }
}
