import Foundation
import ParleyModel
import Testing

/// The send stream's lines (`POST /v1/sends`): what a client writes and the gateway reads, what
/// the gateway answers and a client reads, and how a body in pieces is cut into lines.
@Suite struct SendStreamTests {
    let encoder = API.makeEncoder()
    let decoder = API.makeDecoder()

    @Test func aPlainMessageLineIsTheEncodersBytesAndReadsBackFast() throws {
        for text in ["hello", "", "quote \" backslash \\ newline \n é 😀"] {
            let command = API.StreamedCommand(conversationId: "c_1", .message(API.NewMessage(clientMessageId: "k-1", text: text)))
            var expected = try Array(encoder.encode(command))
            expected.append(UInt8(ascii: "\n"))
            #expect(String(decoding: command.jsonLine, as: UTF8.self) == String(decoding: expected, as: UTF8.self))
            let line = command.jsonLine.dropLast()
            let decoded = try decoder.decode(API.StreamedCommand.self, from: Data(line))
            guard case .message(let message) = decoded.action else {
                Issue.record("decoded as \(decoded.action.kind)")
                continue
            }
            #expect(decoded.conversationId == "c_1" && message.clientMessageId == "k-1" && message.text == text)
            if text.utf8.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 < 0x20 }) {
                #expect(API.StreamedCommand.fromCanonicalJSON(line) == nil, "escapes are left to the decoder")
            } else {
                let fast = try #require(API.StreamedCommand.fromCanonicalJSON(line))
                guard case .message(let read) = fast.action else { throw Failure("read as \(fast.action.kind)") }
                #expect(fast.conversationId == "c_1" && read.clientMessageId == "k-1" && read.text == text && fast.id == nil)
            }
        }
    }

    @Test func receiptsTypingAndMessagesWithFieldsRoundTripThroughTheEncoder() throws {
        let lines = [
            API.StreamedCommand(id: "r1", conversationId: "c_2", .receipts(API.Receipts(deliveredSeq: 4, readSeq: 3))),
            API.StreamedCommand(id: "t1", conversationId: "c_2", .typing(API.Typing(typing: true))),
            API.StreamedCommand(id: "m1", conversationId: "c_2", .message(API.NewMessage(clientMessageId: "k-2", text: "re", replyTo: 7, mentions: ["u_b"]))),
        ]
        for command in lines {
            let line = command.jsonLine
            #expect(line.last == UInt8(ascii: "\n") && !line.dropLast().contains(UInt8(ascii: "\n")), "one line each")
            #expect(API.StreamedCommand.fromCanonicalJSON(line.dropLast()) == nil)
            let decoded = try decoder.decode(API.StreamedCommand.self, from: Data(line.dropLast()))
            #expect(decoded.id == command.id && decoded.conversationId == command.conversationId && decoded.action.kind == command.action.kind)
            switch (decoded.action, command.action) {
            case (.receipts(let read), .receipts(let written)): #expect(read.deliveredSeq == written.deliveredSeq && read.readSeq == written.readSeq)
            case (.typing(let read), .typing(let written)): #expect(read.typing == written.typing)
            case (.message(let read), .message(let written)): #expect(read.replyTo == written.replyTo && read.mentions == written.mentions && read.text == written.text)
            default: Issue.record("\(decoded.action.kind) for \(command.action.kind)")
            }
        }
    }

    @Test func aLineWithoutATypeOrConversationIsRefusedByTheDecoder() {
        for bad in [#"{"conversationId":"c","clientMessageId":"k","text":"t"}"#, #"{"type":"message","clientMessageId":"k"}"#, #"{"type":"poke","conversationId":"c"}"#] {
            #expect(throws: DecodingError.self) { try decoder.decode(API.StreamedCommand.self, from: Data(bad.utf8)) }
        }
    }

    @Test func aMessagesAnswerIsTheEncodersBytesAndReadsBackFast() throws {
        let message = Message(conversationId: "c_3", seq: 12, senderId: "u_a", clientMessageId: "k-3", text: "hi", sentAt: Date(millisecondsSince1970: 1_795_000_000_123))
        for (id, status) in [(String?.none, 201), ("line-9", 200)] {
            let line = API.StreamedAnswer.jsonLine(id: id, status: status, wrappedMessage: message.wrappedJSON)
            var expected = try Array(encoder.encode(API.StreamedAnswer(id: id, status: status, message: message)))
            expected.append(UInt8(ascii: "\n"))
            #expect(String(decoding: line, as: UTF8.self) == String(decoding: expected, as: UTF8.self))
            let fast = API.StreamedAnswer.messageFromCanonicalJSON(line.dropLast())
            if id == nil {
                #expect(fast?.message == message && fast?.status == status)
            } else {
                #expect(fast == nil, "an answer with an id is left to the decoder")
            }
            let decoded = try decoder.decode(API.StreamedAnswer.self, from: Data(line.dropLast()))
            #expect(decoded.message == message && decoded.status == status && decoded.id == id)
        }
        #expect(API.StreamedAnswer.messageFromCanonicalJSON(Array(#"{"status":204}"#.utf8)) == nil)
    }

    @Test func linesAreCutWhereverThePiecesEnd() {
        let body = Array("{\"a\":1}\n\r\n{\"b\":2}\r\n\n{\"c\":3}\n{\"partial\"".utf8)
        // Every way of cutting the body in two pieces gives the same lines.
        for cut in 0...body.count {
            var lines = JSONLines(limit: 64)
            var read: [String] = []
            lines.append(body[..<cut])
            while case .line(let line)? = lines.next() { read.append(String(decoding: line, as: UTF8.self)) }
            lines.append(body[cut...])
            while case .line(let line)? = lines.next() { read.append(String(decoding: line, as: UTF8.self)) }
            #expect(read == [#"{"a":1}"#, #"{"b":2}"#, #"{"c":3}"#], "cut at \(cut)")
        }
    }

    @Test func aLineOverTheLimitIsReportedOnceAndEndsTheReading() {
        var lines = JSONLines(limit: 8)
        lines.append(Array("{\"a\":1}\n".utf8))
        #expect(lines.next() == .line(ArraySlice(Array("{\"a\":1}".utf8))))
        // Past the limit without a newline yet: known before the line ends.
        lines.append(Array("0123456789".utf8))
        #expect(lines.next() == .tooLong)
        lines.append(Array("\n{\"b\":2}\n".utf8))
        #expect(lines.next() == nil, "nothing more is read")
        var complete = JSONLines(limit: 4)
        complete.append(Array("123456\n".utf8))
        #expect(complete.next() == .tooLong)
    }
}

private struct Failure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
