import Foundation
import ParleyChat
import ParleyGateway
import ParleyModel
import Testing

@Suite struct StreamCursorTests {
    static let conversation: ConversationID = "c_1"

    static func message(_ seq: Int64, at millis: Int64 = 1_800_000_000_000) -> Message {
        Message(conversationId: conversation, seq: seq, senderId: "u_a", clientMessageId: "m\(seq)", text: "t", sentAt: Date(millisecondsSince1970: millis))
    }

    @Test func aCursorRoundTripsAndRefusesWhatItDidNotMake() {
        let cursor = StreamCursor(millis: 1_800_000_000_123)
        #expect(StreamCursor(token: cursor.token) == cursor)
        for bad in ["", "pc1.", "pc1.-5", "pc2.100", "pc1.12x", "pc1." + String(repeating: "9", count: 40)] {
            #expect(StreamCursor(token: bad) == nil, "\(bad)")
        }
    }

    @Test func theCursorNeverMovesBackAndIgnoresLiveOnlyEvents() {
        var cursor = StreamCursor(millis: 1_000)
        cursor = cursor.advanced(by: .message(Self.message(1, at: 5_000)))
        #expect(cursor.millis == 5_000)
        // An event committed earlier that arrives later (another conversation's fan-out).
        cursor = cursor.advanced(by: .message(Self.message(2, at: 3_000)))
        #expect(cursor.millis == 5_000)
        cursor = cursor.advanced(by: .typing(TypingEvent(conversationId: Self.conversation, userId: "u_a", typing: true)))
        #expect(cursor.millis == 5_000)
    }

    @Test func aResumeReplaysAWindowBeforeTheCursorSoALateCommitIsNotSkipped() {
        // Event A committed at 10.000 s arrives after event B committed at 10.500 s; the client's
        // cursor is B's. A resume must include A.
        let b = StreamCursor(millis: 10_500)
        let aCommittedAt = Date(millisecondsSince1970: 10_000)
        #expect(b.replayFrom < aCommittedAt)
        #expect(b.date.timeIntervalSince(b.replayFrom) == StreamCursor.replayWindow)
    }

    @Test func oldCursorsExpire() {
        let now = Date(millisecondsSince1970: 1_800_000_000_000)
        #expect(!StreamCursor(now.addingTimeInterval(-3600)).isExpired(now: now))
        #expect(StreamCursor(now.addingTimeInterval(-8 * 24 * 3600)).isExpired(now: now))
    }
}

@Suite struct TokenAuthorityTests {
    @Test func tokensVerifyOnlyUnchangedUnexpiredAndUnderTheSameSecret() throws {
        let authority = try TokenAuthority(secret: String(repeating: "s", count: 32), lifetime: .seconds(60))
        let now = Date(millisecondsSince1970: 1_800_000_000_000)
        let (token, claims) = authority.issue(for: "u_alice", now: now)
        #expect(authority.verify(token, now: now) == claims)
        #expect(authority.verify(token, now: now.addingTimeInterval(61)) == nil, "expired")
        let other = try TokenAuthority(secret: String(repeating: "t", count: 32))
        #expect(other.verify(token, now: now) == nil, "another cluster's secret")
        var tampered = Array(token)
        tampered[8] = tampered[8] == "A" ? "B" : "A"
        #expect(authority.verify(String(tampered), now: now) == nil, "a changed payload")
        #expect(authority.verify("pt1.x.y", now: now) == nil)
        #expect(authority.verify("", now: now) == nil)
        #expect(throws: TokenAuthorityError.self) { try TokenAuthority(secret: "short") }
    }
}
