import Foundation
@testable import ParleyChat
import ParleyModel
import Testing

@Suite struct WebhookLaneTests {
    let start = ContinuousClock.Instant.now
    let wall = Date(millisecondsSince1970: 1_800_000_000_000)
    let alice: UserID = "u_alice", bob: UserID = "u_bob", carol: UserID = "u_carol"

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start.advanced(by: .milliseconds(milliseconds)) }

    func message(_ seq: Int64, from sender: UserID = "u_alice") -> Message {
        Message(conversationId: "c_1", seq: seq, senderId: sender, clientMessageId: "m\(seq)", text: "text \(seq)", sentAt: wall.addingTimeInterval(Double(seq)))
    }

    func record(lastSeq: Int64 = 0, name: String? = "team", members: [ConversationMember]? = nil) -> ConversationRecord {
        ConversationRecord(
            id: "c_1", kind: .group, name: name, ownerId: alice, lastSeq: lastSeq, createdAt: wall,
            members: members ?? [ConversationMember(userId: alice, role: .owner), ConversationMember(userId: bob, role: .member)])
    }

    var policy: WebhookPolicy {
        var policy = WebhookPolicy()
        policy.retry = Backoff(first: .seconds(1), max: .seconds(8))
        policy.giveUpAfter = .seconds(60)
        policy.queueMax = 4
        return policy
    }

    /// Delivers every step, answering reads from `stored`, until the lane is idle; returns what
    /// went out.
    func drain(
        _ lane: inout WebhookLane, _ current: ConversationRecord, stored: [Message] = [], storedChanges: [MessageChange] = [], now: ContinuousClock.Instant? = nil
    ) -> [WebhookEvent] {
        var sent: [WebhookEvent] = []
        for _ in 0..<1000 {
            switch lane.next(record: current, now: now ?? at(0), wallNow: wall) {
            case .idle:
                return sent
            case .wait:
                Issue.record("waiting while draining")
                return sent
            case .read(let after, let through):
                lane.messagesRead(Array(stored.filter { $0.seq > after && $0.seq <= through }.prefix(2)), after: after)
            case .readChanges(let after, let through):
                lane.changesRead(Array(storedChanges.filter { $0.changeSeq > after && $0.changeSeq <= through }.prefix(2)), after: after)
            case .deliver(let event):
                sent.append(event)
                lane.delivered()
            }
        }
        Issue.record("never idle")
        return sent
    }

    @Test func liveEventsGoInTheOrderCommittedOneAtATime() {
        var lane = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: WebhookTold(record()), owed: false)
        #expect(lane.next(record: record(), now: at(0), wallNow: wall) == .idle)
        let joined = record(members: record().members + [ConversationMember(userId: carol, role: .member)])
        let events: [WebhookEvent] = [.message(message(1)), .membersAdded([carol], joined, at: wall), .message(message(2, from: carol))]
        for event in events { lane.record(event) }
        #expect(lane.isPending)
        #expect(lane.next(record: joined, now: at(0), wallNow: wall) == .deliver(events[0]))
        #expect(lane.next(record: joined, now: at(0), wallNow: wall) == .idle, "one at a time")
        lane.delivered()
        #expect(drain(&lane, joined) == Array(events.dropFirst()))
        // The senders have read their own messages.
        var after = joined.withLastSeq(2)
        after.members[0].deliveredSeq = 1
        after.members[0].readSeq = 1
        after.members[2].deliveredSeq = 2
        after.members[2].readSeq = 2
        var expected = WebhookTold(after)
        expected.changes = 1  // carol joined
        #expect(lane.told == expected)
        #expect(!lane.isPending)
    }

    @Test func aConversationNeverToldIsToldFromItsCreationMessagesOneByOneThenWatermarks() {
        let members = [ConversationMember(userId: alice, role: .owner, deliveredSeq: 3, readSeq: 3), ConversationMember(userId: bob, role: .member, deliveredSeq: 2, readSeq: 1)]
        let current = record(lastSeq: 3, members: members)
        let stored = (1...3).map { message($0) }
        var lane = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: nil, owed: true)
        let sent = drain(&lane, current, stored: stored)
        // Alice's watermarks moved with her own messages: not a receipt.
        #expect(sent.map(\.type) == [.conversationCreated, .messageCreated, .messageCreated, .messageCreated, .receiptRead])
        #expect(sent.last == .receipt(ReceiptEvent(conversationId: "c_1", userId: bob, deliveredSeq: 2, readSeq: 1, at: wall), read: true))
        #expect(sent.dropFirst().prefix(3) == stored.map { WebhookEvent.message($0) }[...])
        #expect(lane.told == WebhookTold(current))
    }

    /// Messages committed while a new conversation's creation is being told wait behind the
    /// catch-up's watermarks: their senders' own reads are not told as receipts before them.
    @Test func messagesCommittedDuringTheFirstCatchUpAreNotToldAsReceipts() {
        var lane = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: nil, owed: true)
        guard case .deliver(.created) = lane.next(record: record(), now: at(0), wallNow: wall) else {
            Issue.record("the creation goes first")
            return
        }
        var members = record().members
        for (index, sender) in [alice, bob].enumerated() {
            lane.record(.message(message(Int64(index + 1), from: sender)))
            let position = members.firstIndex { $0.userId == sender } ?? 0
            (members[position].deliveredSeq, members[position].readSeq) = (Int64(index + 1), Int64(index + 1))
        }
        lane.delivered()
        let now = record(lastSeq: 2, members: members)
        #expect(drain(&lane, now).map(\.type) == [.messageCreated, .messageCreated], "no receipt: each sender read only their own message")
    }

    @Test func aCatchUpTellsWhatChangedAsTheStateItLeft() {
        let told = WebhookTold(record(lastSeq: 1, members: [ConversationMember(userId: alice, role: .owner), ConversationMember(userId: bob, role: .member, deliveredSeq: 1)]))
        let current = record(
            lastSeq: 3, name: "renamed",
            members: [ConversationMember(userId: alice, role: .owner, deliveredSeq: 3, readSeq: 3), ConversationMember(userId: carol, role: .member, deliveredSeq: 3, readSeq: 3)])
        var lane = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: told, owed: true)
        let sent = drain(&lane, current, stored: (1...3).map { message($0, from: carol) })
        #expect(sent.map(\.type) == [.conversationUpdated, .memberAdded, .messageCreated, .messageCreated, .memberRemoved, .receiptRead])
        #expect(sent[1] == .membersAdded([carol], current, at: wall))
        #expect(sent[4] == .memberRemoved(bob, current, at: wall))
        var expected = WebhookTold(current)
        expected.changes = 3  // the new name, carol in, bob out
        #expect(lane.told == expected)
        // Nothing changed since: nothing owed.
        var settled = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: WebhookTold(current), owed: true)
        #expect(drain(&settled, current).isEmpty)
    }

    @Test func anEndpointIsToldOnlyWhatItSubscribedToAndTheRestStillMovesItsCursor() {
        var lane = WebhookLane(types: [.memberAdded], policy: policy, told: WebhookTold(record()), owed: false)
        let joined = record(lastSeq: 2, members: record().members + [ConversationMember(userId: carol, role: .member)])
        lane.record(.message(message(1)))
        lane.record(.membersAdded([carol], joined, at: wall))
        lane.record(.message(message(2)))
        #expect(drain(&lane, joined).map(\.type) == [.memberAdded])
        #expect(lane.told?.seq == 2)
        // A catch-up without message.created reads no messages.
        var catchingUp = WebhookLane(types: [.receiptRead], policy: policy, told: WebhookTold(record()), owed: true)
        #expect(catchingUp.next(record: record(lastSeq: 500), now: at(0), wallNow: wall) == .idle)
        #expect(catchingUp.told?.seq == 500)
    }

    @Test func aFailedDeliveryGoesAgainFirstAfterABackoffThatHonoursRetryAfter() {
        var lane = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: WebhookTold(record()), owed: false)
        lane.record(.message(message(1)))
        lane.record(.message(message(2)))
        let current = record(lastSeq: 2)
        #expect(lane.next(record: current, now: at(0), wallNow: wall) == .deliver(.message(message(1))))
        #expect(lane.failed(retryAfter: nil, now: at(0)) == nil)
        #expect(lane.next(record: current, now: at(999), wallNow: wall) == .wait(until: at(1_000)))
        #expect(lane.next(record: current, now: at(1_000), wallNow: wall) == .deliver(.message(message(1))), "the same event, before the next")
        #expect(lane.failed(retryAfter: nil, now: at(1_000)) == nil)
        #expect(lane.next(record: current, now: at(1_000), wallNow: wall) == .wait(until: at(3_000)), "twice as long")
        #expect(lane.next(record: current, now: at(3_000), wallNow: wall) == .deliver(.message(message(1))))
        #expect(lane.failed(retryAfter: .seconds(30), now: at(3_000)) == nil)
        #expect(lane.next(record: current, now: at(3_000), wallNow: wall) == .wait(until: at(33_000)), "at least what Retry-After said")
        #expect(drain(&lane, current, now: at(33_000)) == [.message(message(1)), .message(message(2))])
        #expect(lane.told?.seq == 2)
    }

    @Test func anEventThatKeepsFailingIsDroppedAfterTheGiveUpTimeAndTheRestGoOn() {
        var lane = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: WebhookTold(record()), owed: false)
        lane.record(.message(message(1)))
        lane.record(.message(message(2)))
        var now = 0
        var dropped = false
        for _ in 0..<1000 where !dropped {
            guard case .deliver(let event) = lane.next(record: record(lastSeq: 2), now: at(now), wallNow: wall) else {
                if case .wait(let until) = lane.next(record: record(lastSeq: 2), now: at(now), wallNow: wall) { now = Int((until - start) / .milliseconds(1)) }
                continue
            }
            #expect(event == .message(message(1)))
            if let event = lane.failed(retryAfter: nil, now: at(now)) {
                #expect(event == .message(message(1)))
                #expect(now >= 60_000)
                dropped = true
            }
            #expect(now < 60_000 + 8_000)
        }
        #expect(dropped)
        #expect(drain(&lane, record(lastSeq: 2), now: at(now)) == [.message(message(2))])
    }

    @Test func anEndpointTooFarBehindIsCaughtUpFromTheStore() {
        var lane = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: WebhookTold(record()), owed: false)
        let stored = (1...10).map { message($0) }
        for message in stored { lane.record(.message(message)) }
        let sent = drain(&lane, record(lastSeq: 10), stored: stored)
        #expect(sent == stored.map { .message($0) }, "each once, in order")
    }

    @Test func messagesRecordedOutOfSeqOrderAreToldInOrderEachOnce() {
        // One commit's sends resume in any order: 3 is recorded before 2, 6 before 4 and 5.
        var lane = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: WebhookTold(record()), owed: false)
        let stored = (1...6).map { message($0) }
        lane.record(.message(stored[0]))
        #expect(lane.next(record: record(lastSeq: 1), now: at(0), wallNow: wall) == .deliver(.message(stored[0])))
        for seq in [3, 2, 6, 4, 5] { lane.record(.message(stored[seq - 1])) }
        lane.delivered()
        #expect(drain(&lane, record(lastSeq: 6), stored: stored) == stored[1...].map { .message($0) })
        #expect(lane.told?.seq == 6)
        lane.record(.message(stored[4]))
        #expect(!lane.isPending, "a message already told is not told again")
    }

    @Test func aReplayTellsTheMessagesAgainFromTheSeqAskedAndAnAnswerFromBeforeItMovesNothing() {
        var lane = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: WebhookTold(record(lastSeq: 5)), owed: false)
        let stored = (1...6).map { message($0) }
        lane.record(.message(stored[5]))
        #expect(lane.next(record: record(lastSeq: 6), now: at(0), wallNow: wall) == .deliver(.message(stored[5])))
        lane.replay(from: 3)
        lane.delivered()
        #expect(lane.told?.seq == 2)
        #expect(drain(&lane, record(lastSeq: 6), stored: stored) == stored[2...].map { .message($0) })
    }

    @Test func deliveryIDsAreTheSameForTheSameFactAndDifferForDifferentOnes() {
        let first = WebhookEvent.message(message(1))
        #expect(first.deliveryID(in: "c_1", change: 1) == WebhookEvent.message(message(1)).deliveryID(in: "c_1", change: 1))
        #expect(first.deliveryID(in: "c_1", change: 1) != WebhookEvent.message(message(2)).deliveryID(in: "c_1", change: 1))
        #expect(first.deliveryID(in: "c_1", change: 1) != first.deliveryID(in: "c_2", change: 1))
        #expect(first.deliveryID(in: "c_1", change: 1).hasPrefix("evt_") && first.deliveryID(in: "c_1", change: 1).count == 26)
        let joined = record(members: record().members + [ConversationMember(userId: carol, role: .member)])
        // A catch-up finding the same change (another time, the record's watermarks moved) says it with the same ID.
        var later = joined
        later.members[0].readSeq = 4
        #expect(WebhookEvent.membersAdded([carol], joined, at: wall).deliveryID(in: "c_1", change: 1) == WebhookEvent.membersAdded([carol], later, at: wall.addingTimeInterval(9)).deliveryID(in: "c_1", change: 1))
    }

    @Test func theBodyIsTheTypeTheTimeAndTheData() throws {
        let body = WebhookEvent.message(message(7)).body(in: "c_1", now: wall)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        #expect(json["type"] as? String == "message.created")
        #expect(json["timestamp"] as? String == API.timestamp(message(7).sentAt))
        let data = try #require(json["data"] as? [String: Any])
        #expect(data["conversationId"] as? String == "c_1")
        #expect((data["message"] as? [String: Any])?["seq"] as? Int == 7)
    }

    @Test func theSignatureIsStandardWebhooks() throws {
        // The Standard Webhooks specification's own example.
        let secret = try #require(WebhookEndpoint.secretKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
        let signature = WebhookDelivery.signature(
            id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: Array(#"{"test": 2432232314}"#.utf8), secret: secret)
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        #expect(WebhookEndpoint.secretKey("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == nil, "without whsec_")
        #expect(WebhookEndpoint.secretKey("whsec_c2hvcnQ=") == nil, "too short")
    }

    func change(_ number: Int64, of seq: Int64, after afterSeq: Int64, _ kind: MessageChange.Kind = .edited) -> MessageChange {
        MessageChange(
            conversationId: "c_1", changeSeq: number, afterSeq: afterSeq, seq: seq, kind: kind, userId: alice, at: wall.addingTimeInterval(Double(10 + number)),
            text: kind == .edited ? "edit \(number)" : nil)
    }

    @Test func changesToMessagesAreToldOneByOneInTheirOrderAndACatchUpReadsThemAfterTheMessages() {
        let types: Set<WebhookEventType> = [.messageCreated, .messageEdited, .messageDeleted]
        var lane = WebhookLane(types: types, policy: policy, told: WebhookTold(record(lastSeq: 1)), owed: false)
        var current = record(lastSeq: 2)
        current.lastChangeSeq = 2
        lane.record(.message(message(2)))
        lane.record(.changed(change(1, of: 2, after: 2)))
        lane.record(.changed(change(2, of: 1, after: 2, .deleted)))
        #expect(drain(&lane, current) == [.message(message(2)), .changed(change(1, of: 2, after: 2)), .changed(change(2, of: 1, after: 2, .deleted))])
        #expect(lane.told?.changeSeq == 2)
        lane.record(.changed(change(2, of: 1, after: 2, .deleted)))
        #expect(drain(&lane, current).isEmpty, "told already")

        // A node that takes over works out what is owed: messages first, then the changes, each read from the store.
        var told = WebhookTold(record(lastSeq: 1))
        told.changeSeq = 1
        var later = record(lastSeq: 3)
        later.lastChangeSeq = 4
        let stored = (1...4).map { change($0, of: 1, after: $0 < 4 ? 2 : 3, $0 == 3 ? .reactionAdded : .edited) }
        var taken = WebhookLane(types: types, policy: policy, told: told, owed: true)
        let sent = drain(&taken, later, stored: (1...3).map { message($0) }, storedChanges: stored)
        #expect(sent.filter { if case .receipt = $0 { false } else { true } } == [.message(message(2)), .message(message(3)), .changed(stored[1]), .changed(stored[3])],
                "a reaction is not subscribed to, and moves the cursor all the same")
        #expect(taken.told?.changeSeq == 4)
        #expect(WebhookTold(later).changeSeq == 4, "a cursor from a conversation as it is owes nothing")
    }

    @Test func subscriptionsNameTypesFamiliesOrEverything() {
        #expect(WebhookEventType.matching("receipt.*") == [.receiptRead, .receiptDelivered])
        #expect(WebhookEventType.matching("conversation.*")?.count == 4)
        #expect(WebhookEventType.matching("*") == Set(WebhookEventType.allCases))
        #expect(WebhookEventType.matching("message.created") == [.messageCreated])
        #expect(WebhookEventType.matching("message.deleted") == [.messageDeleted])
        #expect(WebhookEventType.matching("reaction.*") == [.reactionAdded, .reactionRemoved])
        #expect(WebhookEventType.matching("message.removed") == nil)
        #expect(WebhookEventType.matching("nothing.*") == nil)
    }

    @Test func retriesWaitLongerEachTimeUpToTheirMost() {
        let policy = WebhookPolicy()
        #expect(policy.retry.delay(afterFailures: 1, atLeast: nil) == .seconds(1))
        #expect(policy.retry.delay(afterFailures: 4, atLeast: nil) == .seconds(8))
        #expect(policy.retry.delay(afterFailures: 40, atLeast: nil) == .seconds(600))
        #expect(policy.retry.delay(afterFailures: 1, atLeast: .seconds(120)) == .seconds(120))
        // At most 10 minutes apart, so 72 hours make hundreds of attempts: at least 24 hours of retries.
        #expect(policy.giveUpAfter >= .seconds(24 * 3600))
    }

    /// Standard Webhooks receivers drop a delivery whose ID they saw: "remove carol, add carol,
    /// remove carol" are three deliveries with three IDs, each the same on every attempt, and the
    /// same again from an owner that takes over with the cursor stored.
    @Test func aChangeThatComesBackGetsANewIDAndARetryTheSameOne() throws {
        let withCarol = record(members: record().members + [ConversationMember(userId: carol, role: .member)])
        var lane = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: WebhookTold(withCarol), owed: false)
        let events: [WebhookEvent] = [.memberRemoved(carol, record(), at: wall), .membersAdded([carol], withCarol, at: wall), .memberRemoved(carol, record(), at: wall)]
        for event in events { lane.record(event) }
        var ids: [String] = []
        for (index, event) in events.enumerated() {
            #expect(lane.next(record: record(), now: at(0), wallNow: wall) == .deliver(event))
            let id = lane.deliveryID(of: event, in: "c_1")
            if index == 1 {
                // A failed attempt goes again with the same ID.
                #expect(lane.failed(retryAfter: nil, now: at(0)) == nil)
                #expect(lane.next(record: record(), now: at(5_000), wallNow: wall) == .deliver(event))
                #expect(lane.deliveryID(of: event, in: "c_1") == id)
            }
            ids.append(id)
            lane.delivered()
        }
        #expect(Set(ids).count == 3, "\(ids)")
        #expect(events[0].deliveryID(in: "c_1", change: 1) != events[2].deliveryID(in: "c_1", change: 3))

        // The cursor as stored after the first removal: an owner taking over tells the rest again
        // with the IDs the first owner gave them.
        var stored = WebhookTold(withCarol)
        stored.apply(events[0])
        let decoded = try JSONDecoder().decode(WebhookTold.self, from: JSONEncoder().encode(stored))
        var takeover = WebhookLane(types: Set(WebhookEventType.allCases), policy: policy, told: decoded, owed: false)
        for event in events.dropFirst() { takeover.record(event) }
        for (index, event) in events.enumerated().dropFirst() {
            #expect(takeover.next(record: record(), now: at(0), wallNow: wall) == .deliver(event))
            #expect(takeover.deliveryID(of: event, in: "c_1") == ids[index])
            takeover.delivered()
        }
        // A cursor stored before changes were counted reads as none counted.
        let old = try JSONDecoder().decode(WebhookTold.self, from: Data(#"{"seq":3,"name":"team","members":[]}"#.utf8))
        #expect(old.changes == 0 && old.seq == 3)
    }
}

extension ConversationRecord {
    func withLastSeq(_ seq: Int64) -> ConversationRecord {
        var record = self
        record.lastSeq = seq
        return record
    }
}
