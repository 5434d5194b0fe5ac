import Foundation
import ParleyChat
import ParleyModel
import Testing

@Suite struct ConversationStateTests {
    static let alice: UserID = "u_alice", bob: UserID = "u_bob", carol: UserID = "u_carol", mallory: UserID = "u_mallory"

    static func state(kind: ConversationKind = .group, lastSeq: Int64 = 10) -> ConversationState {
        ConversationState(record: ConversationRecord(
            id: "c_1", kind: kind, name: kind == .group ? "g" : nil, ownerId: alice, lastSeq: lastSeq, createdAt: Date(),
            members: [
                ConversationMember(userId: alice, role: .owner), ConversationMember(userId: bob, role: .member, deliveredSeq: 5, readSeq: 2),
                ConversationMember(userId: carol, role: .member),
            ]))
    }

    @Test func receiptsNeverPassLastSeqAndNeverMoveBack() throws {
        var state = Self.state()
        #expect(throws: ChatError(.invalidRequest, "readSeq 11 is past lastSeq 10")) { try state.validateReceipt(from: Self.bob, deliveredSeq: nil, readSeq: 11) }
        #expect(throws: ChatError(.invalidRequest, "deliveredSeq must not be negative")) { try state.validateReceipt(from: Self.bob, deliveredSeq: -1, readSeq: nil) }
        #expect(throws: ChatError(.invalidRequest, "deliveredSeq or readSeq is required")) { try state.validateReceipt(from: Self.bob, deliveredSeq: nil, readSeq: nil) }
        let lower = try state.validateReceipt(from: Self.bob, deliveredSeq: 3, readSeq: 1)
        #expect(lower == (5, 2), "a lower value is ignored, not refused")
        let read = try state.validateReceipt(from: Self.bob, deliveredSeq: nil, readSeq: 8)
        #expect(read == (8, 8), "read implies delivered")
        let advanced = state.receiptsAdvanced(ConversationMember(userId: Self.bob, role: .member, deliveredSeq: 8, readSeq: 8))
        let movedBack = state.receiptsAdvanced(ConversationMember(userId: Self.bob, role: .member, deliveredSeq: 1, readSeq: 1))
        #expect(advanced && !movedBack)
        #expect(state.record.member(Self.bob)?.readSeq == 8)
    }

    /// Commits happen in seq order, but their senders may be answered out of it: applied in
    /// either order, two messages leave the same state.
    @Test func committedMessagesLeaveTheSameStateInEitherOrder() {
        let eleven = Message(conversationId: "c_1", seq: 11, senderId: Self.bob, clientMessageId: "b", text: "b", sentAt: Date(millisecondsSince1970: 1_000))
        let twelve = Message(conversationId: "c_1", seq: 12, senderId: Self.carol, clientMessageId: "c", text: "c", sentAt: Date(millisecondsSince1970: 2_000))
        var inOrder = Self.state()
        var reversed = inOrder
        inOrder.committed(eleven)
        inOrder.committed(twelve)
        reversed.committed(twelve)
        reversed.committed(eleven)
        #expect(inOrder.record == reversed.record)
        #expect(reversed.record.lastSeq == 12 && reversed.record.lastActivityAt == twelve.sentAt)
        #expect(reversed.record.member(Self.bob)?.readSeq == 11 && reversed.record.member(Self.carol)?.readSeq == 12)
    }

    @Test func nonMembersGetNotFoundForEverything() {
        var state = Self.state()
        defer { _ = state }
        let notFound = ChatError(.notFound, "conversation not found")
        #expect(throws: notFound) { try state.requireMember(Self.mallory) }
        #expect(throws: notFound) { try state.validateReceipt(from: Self.mallory, deliveredSeq: 1, readSeq: nil) }
        #expect(throws: notFound) { try state.setTyping(Self.mallory, true, now: .now) }
        #expect(throws: notFound) { try state.validateAdd([Self.mallory], by: Self.mallory, groupSizeMax: 10) }
    }

    @Test func typingExpiresUnlessRepeated() throws {
        var state = Self.state()
        let t0 = ContinuousClock.now
        let started = try state.setTyping(Self.bob, true, now: t0)
        let repeated = try state.setTyping(Self.bob, true, now: t0.advanced(by: .seconds(4)))
        #expect(started && !repeated, "repeating is no change")
        let early = state.expireTyping(now: t0.advanced(by: .seconds(9)))
        let due = state.expireTyping(now: t0.advanced(by: .seconds(10)))
        #expect(early.isEmpty, "renewed at 4 s: lasts until 10 s")
        #expect(due == [Self.bob])
        #expect(!state.isTypingNow(Self.bob, now: t0.advanced(by: .seconds(10))))
        let carolStarts = try state.setTyping(Self.carol, true, now: t0)
        let carolStops = try state.setTyping(Self.carol, false, now: t0.advanced(by: .seconds(1)))
        #expect(carolStarts && carolStops)
    }

    @Test func sendingMovesTheSendersWatermarksAndStopsItsTyping() throws {
        var state = Self.state()
        _ = try state.setTyping(Self.carol, true, now: .now)
        state.committed(Message(conversationId: "c_1", seq: 11, senderId: Self.carol, clientMessageId: "x", text: "hi", sentAt: Date()))
        #expect(state.lastSeq == 11)
        #expect(state.record.member(Self.carol)?.readSeq == 11 && state.record.member(Self.carol)?.deliveredSeq == 11)
        #expect(state.typing[Self.carol] == nil)
    }

    @Test func whoMayAddAndRemoveMembers() throws {
        let group = Self.state()
        #expect(try group.validateAdd([Self.mallory, Self.bob, Self.mallory], by: Self.alice, groupSizeMax: 10).map(\.userId) == [Self.mallory], "the owner adds; existing and repeated ids are skipped")
        #expect(throws: ChatError(.forbidden, "only the owner may add members")) { try group.validateAdd([Self.mallory], by: Self.carol, groupSizeMax: 10) }
        #expect(throws: ChatError(.invalidRequest, "a group has at most 3 members")) { try group.validateAdd([Self.mallory], by: Self.alice, groupSizeMax: 3) }
        try group.validateRemove(Self.bob, by: Self.bob)
        try group.validateRemove(Self.bob, by: Self.alice)
        #expect(throws: ChatError(.forbidden, "only the owner may remove other members")) { try group.validateRemove(Self.carol, by: Self.bob) }
        let direct = Self.state(kind: .direct)
        #expect(throws: ChatError(.forbidden, "members cannot be added to a direct conversation")) { try direct.validateAdd([Self.mallory], by: Self.alice, groupSizeMax: 10) }
    }

    @Test func anOwnerWhoLeavesHandsTheGroupToTheLongestStandingMember() throws {
        var group = Self.state()
        group.memberRemoved(Self.carol)
        #expect(group.record.ownerId == Self.alice, "a member leaving changes no owner")
        group.memberRemoved(Self.alice)
        let record = group.record
        #expect(record.ownerId == Self.bob && record.members.map(\.role) == [.owner])
        try group.validateAdd([Self.mallory], by: Self.bob, groupSizeMax: 10)  // the new owner may add
        #expect(throws: ChatError(.notFound, "conversation not found")) { try group.validateAdd([Self.carol], by: Self.alice, groupSizeMax: 10) }
    }
}
