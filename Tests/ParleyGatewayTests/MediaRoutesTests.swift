import NIOCore
import Synchronization
import Testing
@testable import ParleyGateway

/// The pieces of the media routes that stand alone: the `Range` header a download answers, and
/// an upload's body as the connection hands it over.
@Suite struct MediaRoutesTests {
    @Test func rangesADownloadAnswers() {
        let size: Int64 = 10_000
        #expect(ByteRange.parse(nil, size: size) == .whole)
        #expect(ByteRange.parse("bytes=0-99", size: size) == .part(0..<100))
        #expect(ByteRange.parse("bytes=9000-", size: size) == .part(9000..<10_000))
        #expect(ByteRange.parse("bytes=-100", size: size) == .part(9900..<10_000))
        #expect(ByteRange.parse("bytes=-20000", size: size) == .part(0..<10_000), "a suffix longer than the file is the file")
        #expect(ByteRange.parse("bytes=9990-20000", size: size) == .part(9990..<10_000), "an end past the last byte stops there")
        #expect(ByteRange.parse("bytes=10000-", size: size) == .unsatisfiable)
        #expect(ByteRange.parse("bytes=10000-10005", size: size) == .unsatisfiable)
        #expect(ByteRange.parse("bytes=-0", size: size) == .unsatisfiable)
        #expect(ByteRange.parse("bytes=0-0", size: 0) == .unsatisfiable, "nothing to range over")
        // Answered whole, as RFC 9110 allows: several ranges, another unit, nonsense.
        for header in ["bytes=0-1,5-9", "items=0-1", "bytes=5-1", "bytes=a-b", "bytes=-", "bytes=--5", "bytes= ", "bytes=+1-2",
                       "bytes=99999999999999999999-", "bytes=٣-٤", "bytes=0x10-"] {
            #expect(ByteRange.parse(header, size: size) == .whole, "\(header)")
        }
    }

    final class Credits: Sendable {
        private let total = Mutex(0)
        func add(_ bytes: Int) { total.withLock { $0 += bytes } }
        var value: Int { total.withLock { $0 } }
    }

    @Test func anUploadsBodyIsCreditedAsItIsReadNotAsItComes() async throws {
        let credits = Credits()
        let body = StreamedRequestBody { credits.add($0) }
        body.append(ByteBuffer(repeating: 1, count: 1000))
        body.append(ByteBuffer(repeating: 2, count: 500))
        #expect(credits.value == 0, "nothing read yet: the client may not send more")
        var iterator = body.makeAsyncIterator()
        #expect(try await iterator.next()?.readableBytes == 1000)
        #expect(credits.value == 1000)
        #expect(try await iterator.next()?.readableBytes == 500)
        let waiting = Task {
            var reader = body.makeAsyncIterator()
            return try await reader.next()
        }
        try await Task.sleep(for: .milliseconds(20))
        body.append(ByteBuffer(repeating: 3, count: 300))
        #expect(try await waiting.value?.readableBytes == 300, "a reader waiting gets the next piece")
        #expect(credits.value == 1800)
        body.finish()
        #expect(try await iterator.next() == nil)
        #expect(try await iterator.next() == nil, "and stays ended")
    }

    @Test func aBodyCutOffFailsItsReaderAndDropsWhatWaited() async throws {
        let credits = Credits()
        let body = StreamedRequestBody { credits.add($0) }
        body.append(ByteBuffer(repeating: 1, count: 1000))
        body.finish(StreamedRequestBody.Ended())
        body.append(ByteBuffer(repeating: 2, count: 10))
        var iterator = body.makeAsyncIterator()
        await #expect(throws: StreamedRequestBody.Ended.self) { try await iterator.next() }
        #expect(credits.value == 0)

        let waited = StreamedRequestBody { _ in }
        let reader = Task {
            var iterator = waited.makeAsyncIterator()
            return try await iterator.next()
        }
        try await Task.sleep(for: .milliseconds(20))
        waited.finish(StreamedRequestBody.Ended())
        await #expect(throws: StreamedRequestBody.Ended.self) { try await reader.value }

        let cancelled = StreamedRequestBody { _ in }
        let cancelledReader = Task {
            var iterator = cancelled.makeAsyncIterator()
            return try await iterator.next()
        }
        cancelledReader.cancel()
        await #expect(throws: CancellationError.self) { try await cancelledReader.value }
    }
}
