import Foundation
import NIOCore
import ParleyChat
@testable import ParleyGateway
import ParleyModel
import Testing

/// The `message` event's data as the gateway frames it, read back by a client from a ByteBuffer —
/// what parley-load and an app's stream read — without the decoder.
@Suite struct MessageJSONTests {
    @Test func theEventDataReadsBackFromAByteBufferDirectly() throws {
        let message = Message(conversationId: "c_1", seq: 12, senderId: "u_a", clientMessageId: "k", text: "hi", sentAt: Date(millisecondsSince1970: 1_800_000_000_123))
        let data = try #require(ServerSentEvent.sharedData(for: .message(message)))
        #expect(data == Array(try API.makeEncoder().encode(API.MessageEvent(message: message))))
        let buffer = ByteBuffer(bytes: data)
        #expect(buffer.readableBytesView.withContiguousStorageIfAvailable { _ in true } == true, "a ByteBuffer's bytes are contiguous")
        #expect(Message.fromWrappedJSON(buffer.readableBytesView) == message)
    }

    @Test func aSendsBodyReadsFromTheRequestsByteBufferDirectly() {
        let body = ByteBuffer(bytes: API.NewMessage(clientMessageId: "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d", text: "hi ✓").json)
        let read = API.NewMessage.fromCanonicalJSON(body.readableBytesView)
        #expect(read?.clientMessageId == "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d")
        #expect(read?.text == "hi ✓")
    }
}
