import Foundation
import ParleyModel
import Testing

/// What a change does to the replies quoting its message and to the conversation's pins: the fold
/// every client applies to the stream, which must end where history is.
@Suite struct MessageThreadTests {
    let at = Date(millisecondsSince1970: 1_800_000_000_000)

    func message(_ seq: Int64, _ text: String, replyTo: Message? = nil) -> Message {
        var message = Message(conversationId: "c_1", seq: seq, senderId: "u_ann", clientMessageId: "k\(seq)", text: text, sentAt: at)
        message.replyTo = replyTo.map(MessageQuote.init(of:))
        return message
    }

    func change(_ kind: MessageChange.Kind, of seq: Int64, text: String? = nil, number: Int64 = 1) -> MessageChange {
        MessageChange(conversationId: "c_1", changeSeq: number, afterSeq: 5, seq: seq, kind: kind, userId: "u_bob", at: at, text: text)
    }

    @Test func aQuoteKeepsTheFirst100CharactersAndWhetherThereAreFiles() {
        var original = message(1, String(repeating: "👩‍👩‍👧", count: 120))
        original.attachments = [Attachment(media: Media(id: "m_1", contentType: "image/png", size: 1, sha256: String(repeating: "0", count: 64), createdAt: at))]
        let quote = MessageQuote(of: original)
        #expect(quote.text == String(repeating: "👩‍👩‍👧", count: 100) && quote.attachments && quote.deleted == nil, "graphemes are counted, none cut")
        #expect(MessageQuote(of: original.tombstone) == MessageQuote(seq: 1, senderId: "u_ann", text: "", attachments: false, deleted: true))
    }

    @Test func aChangeToAMessageRequotesItsRepliesAndLeavesOthersAlone() {
        let original = message(1, "the plan")
        let reply = message(2, "ok", replyTo: original)
        let other = message(3, "unrelated", replyTo: message(2, "ok"))
        let edit = change(.edited, of: 1, text: "the new plan")
        #expect(edit.applied(to: reply).replyTo?.text == "the new plan")
        #expect(edit.applied(to: reply).text == "ok" && edit.applied(to: reply).editedAt == nil, "the reply itself is not edited")
        #expect(edit.applied(to: other) == other)
        let deleted = change(.deleted, of: 1).applied(to: reply)
        #expect(deleted.replyTo == MessageQuote(seq: 1, senderId: "u_ann", text: "", attachments: false, deleted: true))
        #expect(change(.edited, of: 1, text: "after the deletion").applied(to: deleted) == deleted, "a tombstone's quote stays empty")
        #expect(change(.pinned, of: 1).applied(to: reply) == reply && change(.reactionAdded, of: 1).applied(to: reply) == reply)
        #expect(change(.deleted, of: 2).applied(to: reply).replyTo == nil, "a reply deleted quotes nothing")
    }

    @Test func pinsMoveToTheFrontAndDeletionsUnpin() {
        #expect(change(.pinned, of: 4).applied(toPinned: [2, 1]) == [4, 2, 1])
        #expect(change(.pinned, of: 1).applied(toPinned: [2, 1]) == [2, 1], "pinned again: no change")
        #expect(change(.unpinned, of: 2).applied(toPinned: [2, 1]) == [1])
        #expect(change(.deleted, of: 1).applied(toPinned: [2, 1]) == [2])
        #expect(change(.edited, of: 1, text: "x").applied(toPinned: [2, 1]) == [2, 1])
        #expect(MessageChange.Kind(eventName: "message_pinned") == .pinned && MessageChange.Kind(eventName: "message") == nil)
    }
}
