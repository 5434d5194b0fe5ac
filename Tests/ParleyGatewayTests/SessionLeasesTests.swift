import ParleySimulation
import Testing

@testable import ParleyGateway

@Suite struct SessionLeasesTests {
    /// A session whose renewals fail for a lease may have lapsed at its shard — which may have
    /// died since, so no renewal will ever be told it lapsed: its stream ends here.
    @Test func aSessionNotRenewedWithinALeaseIsOverdue() {
        var time = ManualTime()
        var leases = SessionLeases(lease: .seconds(6))
        leases.registered("s1", now: time.now)
        leases.registered("s2", now: time.now)
        let sentAt = time.advance(by: .seconds(2))
        time.advance(by: .milliseconds(300))
        #expect(leases.renewed(["s1"], sentAt: sentAt).isEmpty)
        #expect(leases.overdue(now: time.advance(by: .milliseconds(3_699))).isEmpty)
        #expect(leases.overdue(now: time.advance(by: .milliseconds(1))) == ["s2"], "6 s after it registered")
        #expect(leases.overdue(now: time.at(.seconds(8))) == ["s1", "s2"], "6 s after its renewal was sent, not answered")
        #expect(leases.renewed(["s1", "s2"], sentAt: time.at(.seconds(7))) == ["s2"], "a renewal a lease late may have reached a new shard")
    }

    /// A late answer to an older renewal does not move a session's lease back; a session gone
    /// is not watched.
    @Test func anOlderRenewalOrARemovedSessionChangesNothing() {
        var time = ManualTime()
        var leases = SessionLeases(lease: .seconds(6))
        leases.registered("s1", now: time.now)
        let older = time.advance(by: .seconds(1))
        let newer = time.advance(by: .seconds(2))
        _ = leases.renewed(["s1"], sentAt: newer)
        #expect(leases.renewed(["s1", "gone"], sentAt: older).isEmpty)
        #expect(leases.overdue(now: time.at(.milliseconds(8_999))).isEmpty)
        #expect(leases.overdue(now: time.at(.seconds(9))) == ["s1"])
        leases.removed("s1")
        #expect(leases.overdue(now: time.at(.seconds(9))).isEmpty)
    }
}
