import Foundation
import ParleyChat
import ParleyModel
import Testing

@Suite struct PushPlannerTests {
    let start = ContinuousClock.Instant.now
    let bob: UserID = "u_bob", carol: UserID = "u_carol"

    func message(_ seq: Int64, from sender: UserID = "u_alice") -> Message {
        Message(conversationId: "c_1", seq: seq, senderId: sender, clientMessageId: "m\(seq)", text: "text \(seq)", sentAt: Date(millisecondsSince1970: 1_800_000_000_000 + seq))
    }

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start.advanced(by: .milliseconds(milliseconds)) }

    var policy: PushPlanner.Policy {
        var policy = PushPlanner.Policy()
        policy.window = .seconds(3)
        policy.retry = Backoff(first: .seconds(1), max: .seconds(8))
        policy.giveUpAfter = .seconds(30)
        return policy
    }

    @Test func theFirstMessageGoesAtOnceAndABurstWaitsForTheWindowAsOneNotice() {
        var planner = PushPlanner(policy: policy)
        #expect(planner.committed(message(1), offline: [bob, carol], online: [], now: at(0))
            == [.notify(bob, latest: message(1), count: 1), .notify(carol, latest: message(1), count: 1)])
        planner.notified(bob, through: 1, now: at(100))
        planner.notified(carol, through: 1, now: at(100))
        for seq in 2...4 { #expect(planner.committed(message(Int64(seq)), offline: [bob, carol], online: [], now: at(200 * seq)).isEmpty) }
        #expect(planner.tick(now: at(3_099)).isEmpty, "a notice before the window is over")
        #expect(planner.tick(now: at(3_100)) == [.notify(bob, latest: message(4), count: 3), .notify(carol, latest: message(4), count: 3)])
        // A message while the notice is on its way waits for the next window.
        #expect(planner.committed(message(5), offline: [bob], online: [], now: at(3_200)).isEmpty)
        planner.notified(bob, through: 4, now: at(3_300))
        #expect(planner.tick(now: at(6_299)).isEmpty)
        #expect(planner.tick(now: at(6_300)) == [.notify(bob, latest: message(5), count: 1)])
        planner.notified(bob, through: 5, now: at(6_400))
        planner.notified(carol, through: 4, now: at(6_400))
        #expect(planner.owedCount == 0 && planner.nextDue == nil)
    }

    /// A message erased while its notice waits for the window is told of as its tombstone.
    @Test func aMessageErasedWhileItsNoticeWaitsIsToldOfAsItsTombstone() {
        var planner = PushPlanner(policy: policy)
        #expect(planner.committed(message(1), offline: [bob], online: [], now: at(0)) == [.notify(bob, latest: message(1), count: 1)])
        planner.notified(bob, through: 1, now: at(10))
        #expect(planner.committed(message(2), offline: [bob], online: [], now: at(100)).isEmpty)
        planner.erased(message(2).tombstone)
        #expect(planner.tick(now: at(3_100)) == [.notify(bob, latest: message(2).tombstone, count: 1)])
        let content = PushContent(latest: message(2).tombstone, count: 1, kind: .direct, conversationName: nil, senderName: "Alice", badge: 1, preview: .full)
        #expect(content.body == "Message erased", "nothing of what it said: \(content.body)")
    }

    /// A message deleted for everyone: a notice that showed it, not read since, is replaced at
    /// once (same collapse ID) by one that says it was deleted; a read member's is left alone.
    @Test func aDeletedMessagesNoticeIsReplacedWhereItStillShows() {
        var planner = PushPlanner(policy: policy)
        #expect(planner.committed(message(1), offline: [bob, carol], online: [], now: at(0)).count == 2)
        planner.notified(bob, through: 1, now: at(10))
        planner.notified(carol, through: 1, now: at(10))
        planner.read(carol, through: 1)
        let tombstone = message(1).deletedTombstone(by: "u_alice")
        #expect(planner.deleted(tombstone, now: at(500)) == [.notify(bob, latest: tombstone, count: 1)], "within the window too; not for carol, who read it")
        planner.notified(bob, through: 1, now: at(600))
        let content = PushContent(latest: tombstone, count: 1, kind: .direct, conversationName: nil, senderName: "Alice", badge: 0, preview: .full)
        #expect(content.body == "Message deleted", "nothing of what it said: \(content.body)")
        // A later notice shows a later message: deleting the earlier one replaces nothing.
        _ = planner.tick(now: at(4_000))
        #expect(planner.committed(message(2), offline: [bob], online: [], now: at(4_000)) == [.notify(bob, latest: message(2), count: 1)])
        planner.notified(bob, through: 2, now: at(4_010))
        #expect(planner.deleted(message(1).deletedTombstone(by: "u_alice"), now: at(4_100)).isEmpty)
        // One still owed goes out as its tombstone.
        #expect(planner.committed(message(3), offline: [bob], online: [], now: at(4_200)).isEmpty)
        let third = message(3).deletedTombstone(by: "u_alice")
        #expect(planner.deleted(third, now: at(4_300)).isEmpty, "it waits for the window")
        #expect(planner.tick(now: at(7_010)) == [.notify(bob, latest: third, count: 1)])
    }

    @Test func whatAMemberReadOrSawOnAStreamIsNotOwed() {
        var planner = PushPlanner(policy: policy, read: [carol: 2])
        #expect(planner.committed(message(1), offline: [bob], online: [], now: at(0)) == [.notify(bob, latest: message(1), count: 1)])
        planner.notified(bob, through: 1, now: at(10))
        #expect(planner.committed(message(2), offline: [bob, carol], online: [], now: at(100)).isEmpty,
                "carol read up to 2 before this owner started; bob waits for his window")
        #expect(planner.committed(message(3), offline: [carol], online: [bob], now: at(200)) == [.notify(carol, latest: message(3), count: 1)])
        #expect(planner.tick(now: at(5_000)).isEmpty, "bob's stream opened: what waited for him is dropped")
        planner.notified(carol, through: 3, now: at(5_000))
        #expect(planner.committed(message(4), offline: [carol], online: [], now: at(5_100)).isEmpty, "carol's window")
        planner.read(carol, through: 4)
        #expect(planner.tick(now: at(9_000)).isEmpty, "carol read it meanwhile")
        #expect(planner.owedCount == 0)
        // A message found again (a send's retry) is not owed twice.
        #expect(planner.committed(message(6), offline: [bob], online: [], now: at(11_000)) == [.notify(bob, latest: message(6), count: 1)])
        planner.notified(bob, through: 6, now: at(11_100))
        #expect(planner.committed(message(6), offline: [bob], online: [], now: at(20_000)).isEmpty)
        #expect(planner.owedCount == 0)
    }

    @Test func aFailedNoticeGoesAgainAfterABackoffThatHonoursTheProviderAndEnds() {
        var planner = PushPlanner(policy: policy)
        #expect(planner.committed(message(1), offline: [bob], online: [], now: at(0)).count == 1)
        #expect(planner.failed(bob, now: at(100)) == nil)
        #expect(planner.tick(now: at(1_099)).isEmpty)
        #expect(planner.tick(now: at(1_100)) == [.notify(bob, latest: message(1), count: 1)])
        // The provider asked for 5 s: more than the backoff's 2 s.
        #expect(planner.failed(bob, retryAfter: .seconds(5), now: at(1_200)) == nil)
        #expect(planner.tick(now: at(6_199)).isEmpty)
        _ = planner.committed(message(2), offline: [bob], online: [], now: at(6_000))
        #expect(planner.tick(now: at(6_200)) == [.notify(bob, latest: message(2), count: 2)], "the retry covers what came meanwhile")
        // Backoff doubles to its maximum (8 s) and stops after giveUpAfter (30 s) of failures.
        var now = 6_300
        var attempts = 0
        while true {
            let directive = planner.failed(bob, now: at(now))
            if directive == .gaveUp(bob, through: 2) { break }
            #expect(directive == nil)
            guard let due = planner.nextDue else { Issue.record("nothing due after a failure"); return }
            now = Int((due - start).components.seconds * 1_000 + (due - start).components.attoseconds / 1_000_000_000_000_000)
            #expect(planner.tick(now: due).count == 1)
            attempts += 1
        }
        #expect(now >= 30_000 + 1_000 && attempts >= 4, "gave up at \(now) ms after \(attempts) retries")
        #expect(planner.owedCount == 0 && planner.nextDue == nil)
    }
}
