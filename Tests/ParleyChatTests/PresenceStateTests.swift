import ParleySimulation
import Foundation
import ParleyChat
import ParleyModel
import ParleyTestKit
import Testing

@Suite struct PresenceStateTests {
    static let ann: UserID = "u_ann", ben: UserID = "u_ben"

    @Test func anUnrenewedLeaseMakesTheUserOfflineWithLastSeen() {
        var time = ManualTime()
        var state = PresenceState(lease: .seconds(6))
        #expect(state.sessionOpened(Self.ann, gateway: "gateway-1", sessionID: "s1", now: time.now)?.status == .online)
        #expect(state.gateways(of: [Self.ann, Self.ben]) == ["gateway-1": [Self.ann]])
        time.advance(by: .seconds(5))
        #expect(state.expireLeases(now: time.now, wallClock: Date()).isEmpty, "the lease still runs")
        let deathNoticed = Date(timeIntervalSince1970: 1_800_000_000)
        time.advance(by: .seconds(1))
        let offline = state.expireLeases(now: time.now, wallClock: deathNoticed)
        #expect(offline == [Presence(userId: Self.ann, status: .offline, lastSeenAt: deathNoticed)])
        #expect(state.presence(of: Self.ann) == Presence(userId: Self.ann, status: .offline, lastSeenAt: deathNoticed))
        #expect(state.gateways(of: [Self.ann]).isEmpty)
    }

    @Test func renewalKeepsASessionAlive() {
        var time = ManualTime()
        var state = PresenceState(lease: .seconds(6))
        _ = state.sessionOpened(Self.ann, gateway: "gateway-1", sessionID: "s1", now: time.now)
        for _ in 0..<10 {
            time.advance(by: .seconds(3))
            #expect(state.renew(gateway: "gateway-1", sessions: [(Self.ann, "s1")], now: time.now).changes.isEmpty)
            #expect(state.expireLeases(now: time.now, wallClock: Date()).isEmpty)
        }
        #expect(state.presence(of: Self.ann).status == .online)
    }

    @Test func aSecondSessionKeepsTheUserOnline() {
        var time = ManualTime()
        var state = PresenceState(lease: .seconds(6))
        _ = state.sessionOpened(Self.ann, gateway: "gateway-1", sessionID: "phone", now: time.now)
        #expect(state.sessionOpened(Self.ann, gateway: "gateway-2", sessionID: "laptop", now: time.now) == nil, "already online: no change")
        #expect(state.gateways(of: [Self.ann]) == ["gateway-1": [Self.ann], "gateway-2": [Self.ann]])
        #expect(state.sessionClosed(Self.ann, sessionID: "phone", now: time.now, wallClock: Date()) == nil, "the laptop stream is still open")
        // gateway-2 keeps renewing; gateway-1 is gone.
        time.advance(by: .seconds(4))
        _ = state.renew(gateway: "gateway-2", sessions: [(Self.ann, "laptop")], now: time.now)
        time.advance(by: .seconds(4))
        #expect(state.expireLeases(now: time.now, wallClock: Date()).isEmpty)
        #expect(state.presence(of: Self.ann).status == .online)
        let closedAt = Date(timeIntervalSince1970: 1_800_000_100)
        #expect(state.sessionClosed(Self.ann, sessionID: "laptop", now: time.now, wallClock: closedAt) == Presence(userId: Self.ann, status: .offline, lastSeenAt: closedAt))
    }

    @Test func aRenewalInFlightWhenTheStreamClosedDoesNotReopenIt() {
        var time = ManualTime()
        var state = PresenceState(lease: .seconds(6))
        _ = state.sessionOpened(Self.ann, gateway: "gateway-1", sessionID: "s1", now: time.now)
        time.advance(by: .seconds(1))
        #expect(state.sessionClosed(Self.ann, sessionID: "s1", now: time.now, wallClock: Date())?.status == .offline)
        // The gateway's renewal round listed s1 before the stream closed, and arrives after.
        #expect(state.renew(gateway: "gateway-1", sessions: [(Self.ann, "s1")], now: time.now).changes.isEmpty)
        #expect(state.presence(of: Self.ann).status == .offline)
        // A renewal of a session never closed here (the shard moved) still opens it.
        #expect(state.renew(gateway: "gateway-1", sessions: [(Self.ann, "s2")], now: time.now).changes.map(\.status) == [.online])
    }

    /// A shard that moved starts with no sessions: until the gateways' renewals have all had their
    /// chance (one lease), it cannot say a stream is not there, and names every live gateway.
    @Test func aShardThatJustStartedNamesEveryLiveGatewayForOneLease() {
        var time = ManualTime()
        let live = ["gateway-1", "gateway-2"]
        var state = PresenceState(lease: .seconds(6), startedAt: time.now)
        // Listed as presumed too: whether they are online at all is not known yet.
        let presumed = PresenceState.presumedKey
        #expect(state.gateways(of: [Self.ann], heldBy: "worker-1", now: time.now, liveGateways: live)
            == ["gateway-1": [Self.ann], "gateway-2": [Self.ann], presumed: [Self.ann]])
        // gateway-1 renewed ann's stream here; ben's gateway-2 stream may not have been renewed yet.
        time.advance(by: .seconds(2))
        _ = state.renew(gateway: "gateway-1", sessions: [(Self.ann, "s1")], now: time.now)
        #expect(state.gateways(of: [Self.ann, Self.ben], now: time.now, liveGateways: live)
            == ["gateway-1": [Self.ann, Self.ben], "gateway-2": [Self.ann, Self.ben], presumed: [Self.ben]])
        // One lease after the start every live stream has been renewed: only the known ones count.
        time.advance(by: .seconds(4))
        _ = state.renew(gateway: "gateway-1", sessions: [(Self.ann, "s1")], now: time.now)
        #expect(state.gateways(of: [Self.ann, Self.ben], now: time.now, liveGateways: live) == ["gateway-1": [Self.ann]])
        // A shard nobody used before (no earlier owner) knows every stream from the start.
        let fresh = PresenceState(lease: .seconds(6))
        #expect(fresh.gateways(of: [Self.ann], now: time.now, liveGateways: live).isEmpty)
    }

    /// A session renewed after its lease ran out here was left out of the directory's answers
    /// meanwhile: the renewal names it lapsed, so its gateway ends the stream and its client
    /// resumes by cursor. A shard that moved learns sessions from renewals within its first
    /// lease without naming them (it named every gateway then); after that, one it learns of
    /// only now is lapsed too.
    @Test func aRenewalAfterTheLeaseRanOutNamesTheSessionLapsed() {
        var time = ManualTime()
        var state = PresenceState(lease: .seconds(6))
        _ = state.sessionOpened(Self.ann, gateway: "gateway-1", sessionID: "s1", now: time.now)
        time.advance(by: .seconds(3))
        #expect(state.renew(gateway: "gateway-1", sessions: [(Self.ann, "s1")], now: time.now).lapsed.isEmpty, "renewed in time")
        time.advance(by: .seconds(7))
        #expect(state.expireLeases(now: time.now, wallClock: Date()).map(\.status) == [.offline])
        let late = state.renew(gateway: "gateway-1", sessions: [(Self.ann, "s1")], now: time.now)
        #expect(late.lapsed == ["s1"])
        #expect(late.changes.map(\.status) == [.online], "open again, as its gateway still holds it")
        #expect(state.renew(gateway: "gateway-1", sessions: [(Self.ann, "s1")], now: time.now).lapsed.isEmpty)

        var moved = PresenceState(lease: .seconds(6), startedAt: time.now)
        time.advance(by: .seconds(2))
        #expect(moved.renew(gateway: "gateway-1", sessions: [(Self.ann, "s1")], now: time.now).lapsed.isEmpty, "learnt within the first lease")
        time.advance(by: .seconds(5))
        #expect(moved.renew(gateway: "gateway-2", sessions: [(Self.ben, "s9")], now: time.now).lapsed == ["s9"], "first heard of after it")
    }

    @Test func awayShowsOnlyWhileConnected() throws {
        var state = PresenceState()
        #expect(try state.setPreference(Self.ben, .away) == nil, "offline whatever it says")
        #expect(state.presence(of: Self.ben).status == .offline)
        #expect(state.sessionOpened(Self.ben, gateway: "g", sessionID: "s", now: .now)?.status == .away)
        #expect(try state.setPreference(Self.ben, .online)?.status == .online)
        #expect(throws: ChatError(.invalidRequest, "status must be online or away")) { try state.setPreference(Self.ben, .offline) }
    }
}
