import ParleySimulation
import ParleyCluster
import ParleyTestKit
import Testing

@Suite struct MembershipStateMachineTests {
    typealias Machine = MembershipStateMachine
    static let settings = MembershipSettings(
        heartbeatInterval: .milliseconds(100), suspectAfter: .milliseconds(1000), downAfter: .milliseconds(2000),
        formClusterAfter: .milliseconds(1500))

    static func member(_ name: String, _ incarnation: UInt64 = 1, _ status: MemberStatus = .up, roles: NodeRoles = .worker) -> Member {
        Member(id: NodeID(name: name, incarnation: incarnation), address: NodeAddress(host: "127.0.0.1", port: 7000 + Int(name.utf8.last ?? 0)), roles: roles, status: status)
    }

    /// A machine for node `name` that is already up, knowing `peers` (up, heard at `time.now`).
    static func upMachine(_ name: String, peers: [Member], time: ManualTime, settings: MembershipSettings = settings) -> Machine {
        var machine = Machine(me: member(name, 1, .joining), seeds: [], settings: settings, now: time.now)
        _ = machine.tick(now: time.now)
        #expect(machine.me.status == .up)
        _ = machine.gossipReceived(Gossip(from: NodeID(name: "seedless", incarnation: 0), members: peers), now: time.now)
        return machine
    }

    static func events(_ directives: [MembershipDirective]) -> [String] {
        directives.compactMap { directive in
            switch directive {
            case .gossip: nil
            case .selfUp(let formed): "selfUp(\(formed))"
            case .selfPaused: "selfPaused"
            case .selfDowned: "selfDowned"
            case .selfReplaced: "selfReplaced"
            case .memberJoined(let m): "joined \(m.name)"
            case .memberUp(let m): "up \(m.name)"
            case .memberSuspected(let m, _): "suspected \(m.name)"
            case .memberReachable(let m): "reachable \(m.name)"
            case .memberDowned(let m, _): "down \(m.name)"
            case .memberLeft(let m): "left \(m.name)"
            case .memberReplaced(_, let new): "replaced \(new.id)"
            }
        }
    }

    /// Ticks every 100 ms, `count` times; the events they produced.
    static func ticks(_ machine: inout Machine, _ time: inout ManualTime, count: Int) -> [String] {
        (0..<count).flatMap { _ in events(machine.tick(now: time.advance(by: .milliseconds(100)))) }
    }

    @Test func aSeedWaitsThenFormsTheCluster() {
        var time = ManualTime()
        let me = Self.member("a", 1, .joining)
        var machine = Machine(me: me, seeds: [me.address, Self.member("z").address], settings: Self.settings, now: time.now)
        #expect(Self.ticks(&machine, &time, count: 14) == [])
        #expect(machine.me.status == .joining)
        #expect(Self.ticks(&machine, &time, count: 1) == ["selfUp(true)"])
        #expect(machine.ringWorkers == ["a"])
    }

    @Test func aNonSeedJoinsOnlyThroughAnUpMember() {
        var time = ManualTime()
        var machine = Machine(me: Self.member("b", 1, .joining), seeds: [Self.member("a").address], settings: Self.settings, now: time.now)
        _ = Self.ticks(&machine, &time, count: 100)
        #expect(machine.me.status == .joining, "a non-seed never forms a cluster by itself")
        let seed = Self.member("a")
        let directives = machine.gossipReceived(Gossip(from: seed.id, members: [seed]), now: time.now)
        #expect(Self.events(directives) == ["joined a", "selfUp(false)"])
        #expect(machine.ringWorkers == ["a", "b"])
    }

    @Test func silenceMakesSuspectThenDownAtTheConfiguredTimes() {
        var time = ManualTime()
        let b = Self.member("b"), c = Self.member("c")
        var machine = Self.upMachine("a", peers: [b, c], time: time)
        var log: [String] = []
        // c keeps talking every 100 ms; b is silent from the start.
        for _ in 0..<25 {
            time.advance(by: .milliseconds(100))
            _ = machine.gossipReceived(Gossip(from: c.id, members: [c]), now: time.now)
            log += Self.events(machine.tick(now: time.now)).map { "\(time.origin.duration(to: time.now)): \($0)" }
        }
        #expect(log == ["1.0 seconds: suspected b", "2.0 seconds: down b"])
        #expect(machine.member(named: "b")?.status == .down)
        #expect(machine.ringWorkers == ["a", "c"])
    }

    @Test func aLateHeartbeatRefutesSuspicion() {
        var time = ManualTime()
        let b = Self.member("b")
        var machine = Self.upMachine("a", peers: [b], time: time)
        #expect(Self.ticks(&machine, &time, count: 12) == ["suspected b"])
        #expect(machine.member(named: "b")?.status == .suspect)
        #expect(machine.ringWorkers == ["a", "b"], "suspicion alone does not move actors")
        #expect(Self.events(machine.gossipReceived(Gossip(from: b.id, members: [b]), now: time.advance(by: .milliseconds(50)))) == ["reachable b"])
        #expect(Self.ticks(&machine, &time, count: 9) == [])
        #expect(machine.member(named: "b")?.status == .up)
    }

    @Test func aHigherIncarnationReplacesTheOldAndALowerOneIsIgnored() {
        let time = ManualTime()
        var machine = Self.upMachine("a", peers: [Self.member("b", 5)], time: time)
        let restarted = Self.member("b", 9, .joining)
        #expect(Self.events(machine.gossipReceived(Gossip(from: restarted.id, members: [restarted]), now: time.now)) == ["replaced b#9"])
        #expect(machine.member(named: "b")?.id.incarnation == 9)
        #expect(machine.ringWorkers == ["a"], "the new incarnation is joining: not on the ring yet")
        let stale = Self.member("b", 5, .up)
        #expect(Self.events(machine.gossipReceived(Gossip(from: stale.id, members: [stale]), now: time.now)) == [])
        #expect(machine.member(named: "b")?.id.incarnation == 9)
    }

    @Test func statusesOfOneIncarnationOnlyMoveForward() {
        let time = ManualTime()
        var machine = Self.upMachine("a", peers: [Self.member("b", 1, .down)], time: time)
        #expect(machine.member(named: "b")?.status == .down)
        _ = machine.gossipReceived(Gossip(from: NodeID(name: "c", incarnation: 1), members: [Self.member("b", 1, .up)]), now: time.now)
        #expect(machine.member(named: "b")?.status == .down, "stale gossip cannot bring a down member back")
    }

    @Test func gracefulLeaveGossipsLeftAndPeersDropItAtOnce() {
        let time = ManualTime()
        var leaver = Self.upMachine("b", peers: [Self.member("a")], time: time)
        var stayer = Self.upMachine("a", peers: [Self.member("b")], time: time)
        let directives = leaver.leave()
        guard case .gossip(let gossip, to: .everyone)? = directives.first else {
            Issue.record("leave must gossip to everyone")
            return
        }
        #expect(gossip.members.first { $0.name == "b" }?.status == .left)
        #expect(Self.events(stayer.gossipReceived(gossip, now: time.now)) == ["left b"])
        #expect(stayer.ringWorkers == ["a"])
        #expect(stayer.livePeers.isEmpty)
    }

    @Test func onlyUpWorkersAreOnTheRing() {
        let time = ManualTime()
        let machine = Self.upMachine("a", peers: [
            Self.member("b", 1, .joining), Self.member("g", 1, .up, roles: .gateway),
            Self.member("h", 1, .up, roles: [.worker, .gateway]), Self.member("d", 1, .left),
        ], time: time)
        #expect(machine.ringWorkers == ["a", "h"])
    }

    @Test func aDownedNodeLearnsItAndRejoinsAsANewIncarnation() {
        var time = ManualTime()
        var machine = Self.upMachine("a", peers: [Self.member("b")], time: time)
        let verdict = Gossip(from: NodeID(name: "b", incarnation: 1), members: [Self.member("a", 1, .down), Self.member("b")])
        #expect(Self.events(machine.gossipReceived(verdict, now: time.advance(by: .milliseconds(50)))) == ["selfDowned"])
        machine.rejoin(incarnation: 2, now: time.now)
        #expect(machine.me.id.incarnation == 2)
        #expect(machine.me.status == .joining)
        #expect(machine.livePeers.isEmpty, "a rejoining node forgets its old opinions")
        #expect(machine.formerPeerAddresses == [Self.member("b").address], "but dials where its peers were, with the seeds")
        let hello = Gossip(from: NodeID(name: "b", incarnation: 1), members: [Self.member("a", 1, .down), Self.member("b")])
        #expect(Self.events(machine.gossipReceived(hello, now: time.now)) == ["joined b", "selfUp(false)"], "the old incarnation's tombstone is not about us")
    }

    /// A lone seed forms its cluster at once when it starts, but not when it rejoins: the cluster
    /// that declared it down is there, and a cluster of one would own every actor — its presence
    /// shards answering "no stream" for everyone — until the two merged. It joins the cluster it
    /// meets; only after `formClusterAfter` without meeting anyone does it form one alone.
    @Test func aLoneSeedThatRejoinsJoinsTheClusterInsteadOfFormingOne() {
        var time = ManualTime()
        let seed = Self.member("a", 1, .joining)
        var starting = Machine(me: seed, seeds: [seed.address], settings: Self.settings, now: time.now)
        #expect(Self.events(starting.tick(now: time.now)) == ["selfUp(true)"], "a lone seed starting forms at once")

        var machine = Self.upMachine("a", peers: [Self.member("b")], time: time)
        machine = Machine(me: seed, seeds: [seed.address], settings: Self.settings, now: time.now)
        _ = machine.tick(now: time.now)
        _ = machine.gossipReceived(Gossip(from: NodeID(name: "b", incarnation: 1), members: [Self.member("b")]), now: time.now)
        let verdict = Gossip(from: NodeID(name: "b", incarnation: 1), members: [Self.member("a", 1, .down), Self.member("b")])
        #expect(Self.events(machine.gossipReceived(verdict, now: time.advance(by: .milliseconds(50)))) == ["selfDowned"])
        machine.rejoin(incarnation: 2, now: time.now)
        #expect(!Self.events(machine.tick(now: time.advance(by: .milliseconds(100)))).contains("selfUp(true)"), "not alone at once")
        #expect(machine.me.status == .joining)
        let hello = Gossip(from: NodeID(name: "b", incarnation: 1), members: [Self.member("a", 1, .down), Self.member("b")])
        #expect(Self.events(machine.gossipReceived(hello, now: time.advance(by: .milliseconds(100)))) == ["joined b", "selfUp(false)"], "it joins b's cluster")

        var alone = Machine(me: seed, seeds: [seed.address], settings: Self.settings, now: time.now)
        _ = alone.tick(now: time.now)
        alone.rejoin(incarnation: 2, now: time.now)
        #expect(!Self.events(alone.tick(now: time.advance(by: .milliseconds(1_400)))).contains("selfUp(true)"))
        #expect(Self.events(alone.tick(now: time.advance(by: .milliseconds(100)))).contains("selfUp(true)"), "nobody met within formClusterAfter")
    }

    @Test func aPausedNodeDoesNotBlameItsPeers() {
        var time = ManualTime()
        var machine = Self.upMachine("a", peers: [Self.member("b"), Self.member("c")], time: time)
        _ = machine.tick(now: time.advance(by: .milliseconds(100)))
        // SIGSTOP for 30 s: the next tick comes late.
        #expect(Self.events(machine.tick(now: time.advance(by: .seconds(30)))) == ["selfPaused"])
        #expect(machine.livePeers.map(\.name) == ["b", "c"])
    }

    @Test func aNodeCutOffAloneDoesNotDownTheOthers() {
        var time = ManualTime()
        var machine = Self.upMachine("a", peers: [Self.member("b"), Self.member("c")], time: time)
        #expect(Self.ticks(&machine, &time, count: 50) == ["suspected b", "suspected c"], "hearing from 1 of 3, it may suspect but not down")
    }

    @Test func gossipFromAnEndedIncarnationIsIgnoredButForWhatItSaysAboutUs() {
        let time = ManualTime()
        var machine = Self.upMachine("a", peers: [Self.member("b", 1, .down), Self.member("c")], time: time)
        let stale = Gossip(from: NodeID(name: "b", incarnation: 1), members: [Self.member("b"), Self.member("c", 1, .down)], heartbeats: [50, 50])
        let answer = machine.gossipReceived(stale, now: time.now)
        #expect(Self.events(answer) == [])
        #expect(machine.member(named: "c")?.status == .up)
        // The ended node is told so directly: nobody picks it for a round any more.
        guard case .gossip(let told, to: .peers(["b"]))? = answer.first else {
            Issue.record("an ended incarnation's gossip is answered to it alone, got \(answer)")
            return
        }
        #expect(told.members.first { $0.name == "b" }?.status == .down)
        let verdict = Gossip(from: NodeID(name: "b", incarnation: 1), members: [Self.member("a", 1, .down)])
        #expect(Self.events(machine.gossipReceived(verdict, now: time.now)) == ["selfDowned"])
    }

    @Test func aHeartbeatRelayedByAnotherPeerKeepsAPeerAliveAndAStaleOneDoesNot() {
        var time = ManualTime()
        var machine = Self.upMachine("a", peers: [Self.member("b"), Self.member("c")], time: time)
        // a hears only c; c relays b's count, rising each heartbeat.
        var relayed: [String] = []
        for count in UInt64(1)...30 {
            relayed += Self.events(machine.tick(now: time.advance(by: .milliseconds(100))))
            let gossip = Gossip(from: NodeID(name: "c", incarnation: 1), members: [Self.member("c"), Self.member("b")], heartbeats: [count, count])
            relayed += Self.events(machine.gossipReceived(gossip, now: time.now))
        }
        #expect(relayed == [], "b's count rose through c: b is alive")
        // c goes on, but b's count stops rising: b is silent however often c speaks.
        var stalled: [String] = []
        for count in UInt64(31)...60 {
            stalled += Self.events(machine.tick(now: time.advance(by: .milliseconds(100))))
            let gossip = Gossip(from: NodeID(name: "c", incarnation: 1), members: [Self.member("c"), Self.member("b")], heartbeats: [count, 30])
            stalled += Self.events(machine.gossipReceived(gossip, now: time.now))
        }
        #expect(stalled == ["suspected b", "down b"])
    }

    @Test func eachRoundGossipsToTheNextFewPeersInTurn() {
        var settings = Self.settings
        settings.gossipPeersPerRound = 2
        let time = ManualTime()
        let names = ["b", "c", "d", "e", "f"]
        var machine = Self.upMachine("a", peers: names.map { Self.member($0) }, time: time, settings: settings)
        var rounds: [[String]] = []
        for directive in (0..<6).flatMap({ _ in machine.tick(now: time.now) }) {
            guard case .gossip(_, to: let recipients) = directive else { continue }
            guard case .peers(let peers) = recipients else {
                Issue.record("5 peers, 2 a round: not everyone")
                return
            }
            rounds.append(peers)
        }
        #expect(rounds.count == 6)
        #expect(rounds.allSatisfy { $0.count == 2 && Set($0).count == 2 })
        // Taken in turn: any 3 rounds running cover all 5 peers.
        for start in 0...3 {
            #expect(Set(rounds[start..<start + 3].joined()) == Set(names), "rounds \(start)…\(start + 2): \(rounds)")
        }
    }

    @Test func aNodeWithNoMorePeersThanARoundTakesGossipsToAll() {
        var settings = Self.settings
        settings.gossipPeersPerRound = 2
        let time = ManualTime()
        var machine = Self.upMachine("a", peers: [Self.member("b"), Self.member("c")], time: time, settings: settings)
        let directives = machine.tick(now: time.now)
        #expect(directives.contains(.gossip(machine.gossip, to: .everyone)))
    }
}

@Suite struct MergeWatchTests {
    static func member(_ name: String, _ status: MemberStatus = .up, roles: NodeRoles = .worker) -> Member {
        MembershipStateMachineTests.member(name, 1, status, roles: roles)
    }

    /// The members of `gossip` that `watch` takes for met in a merge.
    static func met(_ watch: inout MergeWatch, _ gossip: [Member]) -> [String] {
        defer { watch.settle() }
        return gossip.filter { watch.joined($0) }.map(\.name)
    }

    /// A seed that formed its cluster alone meets the cluster that was there: every member one
    /// gossip brings up is met; what comes after is not.
    @Test func aNodeAloneMeetsEveryMemberUpInTheGossipThatEndsIt() {
        var watch = MergeWatch()
        let me = Self.member("w1")
        watch.selfUp(formed: true, me: me, view: [me])
        let first = Self.met(&watch, [Self.member("w2"), Self.member("g1", roles: .gateway), Self.member("w4", .joining)])
        #expect(first == ["w2", "g1"])
        let later = Self.met(&watch, [Self.member("w3")])
        #expect(later.isEmpty, "no longer alone")
    }

    /// Every worker restarted while the gateways lived on: the first back formed a cluster, the
    /// next joined it, and both meet the gateways later, up all along.
    @Test func aWorkerUpWithoutGatewaysMeetsTheGatewaysUp() {
        var watch = MergeWatch()
        let me = Self.member("w2")
        watch.selfUp(formed: false, me: me, view: [Self.member("w1"), me])
        let worker = Self.met(&watch, [Self.member("w3")])
        #expect(worker.isEmpty, "a worker met is no gateway")
        let gateways = Self.met(&watch, [Self.member("g1", roles: .gateway), Self.member("g2", roles: .gateway)])
        #expect(gateways == ["g1", "g2"])
        let later = Self.met(&watch, [Self.member("g3", roles: .gateway)])
        #expect(later.isEmpty, "a gateway is known now")
    }

    /// New processes joining are met while joining, or once up after a gateway was known.
    @Test func newProcessesJoiningAreNoMerge() {
        var watch = MergeWatch()
        let me = Self.member("w2")
        watch.selfUp(formed: false, me: me, view: [Self.member("w1"), me])
        let joining = Self.met(&watch, [Self.member("g1", .joining, roles: .gateway)])
        #expect(joining.isEmpty)
        watch.up(Self.member("g1", roles: .gateway))
        watch.settle()
        let afterUp = Self.met(&watch, [Self.member("g2", roles: .gateway)])
        #expect(afterUp.isEmpty, "g1 is up")

        var withGateway = MergeWatch()
        withGateway.selfUp(formed: false, me: me, view: [Self.member("w1"), Self.member("g1", roles: .gateway), me])
        let another = Self.met(&withGateway, [Self.member("g2", roles: .gateway)])
        #expect(another.isEmpty)

        var gateway = MergeWatch()
        let g2 = Self.member("g2", roles: .gateway)
        gateway.selfUp(formed: false, me: g2, view: [Self.member("w1"), g2])
        let peer = Self.met(&gateway, [Self.member("g1", roles: .gateway)])
        #expect(peer.isEmpty, "a gateway delivers to no gateway")

        var rejoining = MergeWatch()
        rejoining.selfUp(formed: true, me: me, view: [me])
        rejoining.selfDowned()
        let whileJoining = Self.met(&rejoining, [Self.member("w1")])
        #expect(whileJoining.isEmpty, "met while joining again")
    }
}
