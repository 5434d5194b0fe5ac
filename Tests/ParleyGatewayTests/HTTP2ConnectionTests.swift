import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import Synchronization
import Testing
@testable import ParleyGateway

/// The gateway's HTTP/2 connection handler, frame by frame: what it answers, and when it resets
/// streams and closes the connection.
@Suite struct HTTP2ConnectionTests {
    static let bodyLimit = 64 * 1024

    /// An echo of the request (method, path, body) with 201, 413 past the body limit; `/stream`
    /// answers with a streamed body written through the stream's event sink until the client
    /// resets it.
    static func responder(sinks: SinkBox, idleTimeout: TimeAmount? = nil, requestTimeout: TimeAmount = .seconds(30)) -> HTTP2Responder {
        HTTP2Responder(
            respond: { request, context in
                if request.uri.path == "/stream" {
                    guard let sink = context.eventSink else { return Response(status: .internalServerError) }
                    sinks.set(sink)
                    return Response(status: .ok, headers: [.contentType: "text/event-stream"], body: ResponseBody { writer in
                        sink.loop.execute {
                            sink.write(ByteBuffer(string: "data: hello\n\n"))
                            sink.flush()
                        }
                        try? await sink.closed.get()
                        try await writer.finish(nil)
                    })
                }
                if request.uri.path == "/slow" {
                    do {
                        try await Task.sleep(for: .seconds(3600))
                    } catch {
                        sinks.cancelled()
                    }
                    return Response(status: .ok)
                }
                if request.uri.path == "/slow-stream" {
                    return Response(status: .ok, headers: [.contentType: "text/event-stream"], body: ResponseBody { writer in
                        do {
                            try await Task.sleep(for: .seconds(3600))
                        } catch {
                            sinks.cancelled()
                        }
                        try await writer.finish(nil)
                    })
                }
                if request.uri.path == "/download" {
                    // Eight pieces of 64 KiB (more than a body collected whole), each written once
                    // the client has room.
                    return Response(status: .ok, body: ResponseBody(contentLength: 8 * 65_536) { writer in
                        do {
                            for _ in 0..<8 { try await writer.write(ByteBuffer(repeating: 0x61, count: 65_536)) }
                            try await writer.finish(nil)
                        } catch {
                            sinks.cancelled()
                            throw error
                        }
                    })
                }
                if request.uri.path == "/lines" {
                    // A body that lasts (``HTTP2Responder/StreamedBody/open``): each piece read is
                    // answered at once, and the response ends when the body does.
                    return Response(status: .ok, body: ResponseBody { writer in
                        for try await piece in request.body { try await writer.write(ByteBuffer(string: "read \(String(buffer: piece))")) }
                        try await writer.finish(nil)
                    })
                }
                if request.uri.path == "/fails" {
                    return Response(status: .ok, body: ResponseBody { _ in throw CancellationError() })
                }
                let body = try await request.body.collect(upTo: .max)
                guard body.readableBytes <= bodyLimit else { return Response(status: .contentTooLarge) }
                let text = "\(request.method) \(request.uri.path) \(String(buffer: body))"
                return Response(status: .created, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
            },
            bodyLimit: bodyLimit, serverName: "test", idleTimeout: idleTimeout, requestTimeout: requestTimeout,
            streamsBody: { $0.path == "/lines" ? .open : nil }, logger: Logger(label: "test"))
    }

    final class SinkBox: Sendable {
        private let value = Mutex<(any EventStreamSink)?>(nil)
        private let cancellations = Mutex(0)
        func set(_ sink: any EventStreamSink) { value.withLock { $0 = sink } }
        var sink: (any EventStreamSink)? { value.withLock { $0 } }
        func cancelled() { cancellations.withLock { $0 += 1 } }
        var cancelledCount: Int { cancellations.withLock { $0 } }
    }

    final class Harness {
        // A testing channel whose loop may be handed work from other threads (the responses).
        let channel = NIOAsyncTestingChannel()
        let sinks = SinkBox()

        init(idleTimeout: TimeAmount? = nil, requestTimeout: TimeAmount = .seconds(30)) async throws {
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).get()
            let responder = HTTP2ConnectionTests.responder(sinks: sinks, idleTimeout: idleTimeout, requestTimeout: requestTimeout)
            let channel = self.channel
            try await channel.testingEventLoop.executeInContext {
                try channel.pipeline.syncOperations.addHandler(HTTP2Connection(responder: responder))
            }
        }

        func headers(_ stream: Int, method: String = "POST", path: String, end: Bool) async throws {
            let headers: HPACKHeaders = [":method": method, ":scheme": "https", ":authority": "localhost", ":path": path, "content-type": "text/plain"]
            try await channel.writeInbound(HTTP2Frame(streamID: HTTP2StreamID(stream), payload: .headers(.init(headers: headers, endStream: end))))
        }

        func data(_ stream: Int, _ text: String, end: Bool) async throws {
            try await channel.writeInbound(HTTP2Frame(streamID: HTTP2StreamID(stream), payload: .data(.init(data: .byteBuffer(ByteBuffer(string: text)), endStream: end))))
        }

        /// Runs the loop until `count` pieces of work were cancelled, or 2,000 tries.
        func runUntilCancelled(_ count: Int) async throws {
            for _ in 0..<2_000 where sinks.cancelledCount < count {
                await channel.testingEventLoop.run()
                try await Task.sleep(for: .milliseconds(1))
            }
        }

        /// Runs the loop until `count` frames were written (responses come from tasks).
        func frames(count: Int, triesMax: Int = 2_000) async throws -> [HTTP2Frame] {
            var frames: [HTTP2Frame] = []
            for _ in 0..<triesMax where frames.count < count {
                await channel.testingEventLoop.run()
                while let frame = try await channel.readOutbound(as: HTTP2Frame.self) { frames.append(frame) }
                if frames.count < count { try await Task.sleep(for: .milliseconds(1)) }
            }
            return frames
        }
    }

    static func status(_ frame: HTTP2Frame) -> String? {
        guard case .headers(let headers) = frame.payload else { return nil }
        return headers.headers.first(name: ":status")
    }

    static func text(_ frame: HTTP2Frame) -> String? {
        guard case .data(let data) = frame.payload, case .byteBuffer(let buffer) = data.data else { return nil }
        return String(buffer: buffer)
    }

    /// The error code of a RST_STREAM frame; nil for any other frame or none.
    static func resetCode(_ frame: HTTP2Frame?) -> NIOHTTP2.HTTP2ErrorCode? {
        guard case .rstStream(let code) = frame?.payload else { return nil }
        return code
    }

    static func endsStream(_ frame: HTTP2Frame) -> Bool {
        switch frame.payload {
        case .headers(let headers): headers.endStream
        case .data(let data): data.endStream
        default: false
        }
    }

    @Test func aRequestInSeveralFramesGetsItsWholeBodyAndOneResponse() async throws {
        let harness = try await Harness()
        try await harness.headers(1, path: "/v1/echo", end: false)
        try await harness.data(1, "hello ", end: false)
        try await harness.data(1, "world", end: true)
        try await harness.headers(3, method: "GET", path: "/v1/other", end: true)
        let frames = try await harness.frames(count: 4)
        let first = frames.filter { $0.streamID == 1 }
        #expect(first.count == 2)
        #expect(first.first.flatMap(Self.status) == "201")
        #expect(first.last.flatMap(Self.text) == "POST /v1/echo hello world")
        #expect(first.last.map(Self.endsStream) == true)
        let headers = first.first.flatMap { frame -> HPACKHeaders? in if case .headers(let h) = frame.payload { h.headers } else { nil } }
        #expect(headers?.first(name: "server") == "test")
        #expect(headers?.first(name: "date")?.hasSuffix(" GMT") == true)
        #expect(frames.filter { $0.streamID == 3 }.last.flatMap(Self.text) == "GET /v1/other ")
    }

    @Test func aBodyPastTheLimitIsAnsweredAtOnceAndTheRestRefused() async throws {
        let harness = try await Harness()
        try await harness.headers(1, path: "/v1/echo", end: false)
        try await harness.data(1, String(repeating: "x", count: Self.bodyLimit), end: false)
        try await harness.data(1, "y", end: false)
        // (The connection's flow-control window is credited for the bytes read, on stream 0.)
        let frames = try await harness.frames(count: 3).filter { $0.streamID == 1 }
        #expect(frames.first.flatMap(Self.status) == "413")
        #expect(Self.resetCode(frames.last) == .noError, "no RST_STREAM after the early answer: \(frames)")
        // What the client still sends on it is dropped.
        try await harness.data(1, "z", end: true)
        #expect(try await harness.frames(count: 1, triesMax: 100).filter { $0.streamID == 1 }.isEmpty)
    }

    @Test func aBodyThatFailsHalfWayResetsItsStream() async throws {
        let harness = try await Harness()
        try await harness.headers(1, method: "GET", path: "/fails", end: true)
        let frames = try await harness.frames(count: 2)
        #expect(frames.first.flatMap(Self.status) == "200")
        #expect(Self.resetCode(frames.last) == .cancel, "the stream was left open: \(frames)")
    }

    @Test func headersWithoutAMethodResetTheStream() async throws {
        let harness = try await Harness()
        try await harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .headers(.init(headers: [":path": "/v1/x", ":scheme": "https"], endStream: true))))
        let frames = try await harness.frames(count: 1)
        #expect(Self.resetCode(frames.first) == .protocolError, "no RST_STREAM: \(frames)")
    }

    @Test func anHTTP2ErrorLeavesTheConnectionToNIOHTTP2AndOtherErrorsEndIt() async throws {
        let harness = try await Harness()
        // NIOHTTP2Handler has answered a protocol error already (RST_STREAM or GOAWAY).
        harness.channel.pipeline.fireErrorCaught(NIOHTTP2Errors.invalidALPNToken())
        await harness.channel.testingEventLoop.run()
        #expect(harness.channel.isActive)
        harness.channel.pipeline.fireErrorCaught(IOError(errnoCode: ECONNRESET, reason: "read"))
        await harness.channel.testingEventLoop.run()
        #expect(!harness.channel.isActive)
    }

    /// A connection whose last stream has ended gets a GOAWAY (NO_ERROR) and is closed once it
    /// has been idle for the timeout, counted from that stream's end.
    @Test func aConnectionWithoutOpenStreamsIsClosedAfterTheIdleTimeout() async throws {
        let harness = try await Harness(idleTimeout: .seconds(30))
        let loop = harness.channel.testingEventLoop
        await loop.advanceTime(by: .seconds(20))
        try await harness.headers(1, method: "GET", path: "/v1/echo", end: true)
        #expect(try await harness.frames(count: 2).first.flatMap(Self.status) == "201")
        harness.channel.pipeline.fireUserInboundEventTriggered(StreamClosedEvent(streamID: 1, reason: nil))
        await loop.advanceTime(by: .seconds(29))
        #expect(harness.channel.isActive, "closed before the timeout, counted from the stream's end")
        await loop.advanceTime(by: .seconds(1))
        let frames = try await harness.frames(count: 1)
        guard case .goAway(let last, let code, _) = frames.first?.payload else {
            Issue.record("no GOAWAY: \(frames)")
            return
        }
        #expect(last == 1 && code == .noError)
        #expect(!harness.channel.isActive)
    }

    /// An open event stream keeps its connection however long nothing else happens; once it ends
    /// the idle timeout runs.
    @Test func anOpenEventStreamIsNeverIdle() async throws {
        let harness = try await Harness(idleTimeout: .seconds(30))
        let loop = harness.channel.testingEventLoop
        try await harness.headers(1, method: "GET", path: "/stream", end: true)
        #expect(try await harness.frames(count: 2).last.flatMap(Self.text) == "data: hello\n\n")
        await loop.advanceTime(by: .seconds(600))
        #expect(harness.channel.isActive)
        #expect(try await harness.frames(count: 1, triesMax: 20).isEmpty, "something was written to an idle-looking connection")
        try await harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .rstStream(.cancel)))
        await loop.advanceTime(by: .seconds(30))
        for _ in 0..<2_000 where harness.channel.isActive {
            await loop.run()
            try await Task.sleep(for: .milliseconds(1))
        }
        #expect(!harness.channel.isActive, "the connection outlived the idle timeout after its stream ended")
    }

    /// A client that sends headers and then withholds the body (or trickles it) gets `408` when
    /// the request timeout has passed since the headers, and its stream is reset; a request that
    /// came whole in time is not touched.
    @Test func aBodyThatDoesNotComeInTimeIsAnswered408() async throws {
        let harness = try await Harness(requestTimeout: .seconds(30))
        let loop = harness.channel.testingEventLoop
        try await harness.headers(1, path: "/v1/slow", end: false)
        try await harness.data(1, "a", end: false)
        try await harness.headers(3, path: "/v1/quick", end: false)
        await loop.advanceTime(by: .seconds(20))
        try await harness.data(3, "b", end: true)
        let quick = try await harness.frames(count: 2)
        #expect(quick.first.flatMap(Self.status) == "201" && quick.first?.streamID == 3)
        await loop.advanceTime(by: .seconds(9))
        #expect(try await harness.frames(count: 1, triesMax: 20).isEmpty, "answered before the timeout")
        await loop.advanceTime(by: .seconds(1))
        let frames = try await harness.frames(count: 3)
        #expect(frames.map(\.streamID) == [1, 1, 1])
        #expect(frames.first.flatMap(Self.status) == "408")
        #expect(frames.dropFirst().first.flatMap(Self.text)?.contains("request_timeout") == true)
        #expect(Self.resetCode(frames.last) == .noError)
        #expect(harness.channel.isActive, "the connection goes on")
    }

    /// A body that lasts as long as its client likes (the send stream) is answered piece by piece
    /// with no request timeout, and ends when the server shuts down: the route answers what it
    /// read, ends its response, the rest of the body is refused, and the connection closes.
    @Test func aBodyThatLastsHasNoRequestTimeoutAndEndsAtShutdown() async throws {
        let harness = try await Harness(requestTimeout: .seconds(30))
        let loop = harness.channel.testingEventLoop
        try await harness.headers(1, path: "/lines", end: false)
        try await harness.data(1, "one\n", end: false)
        let first = try await harness.frames(count: 2)
        #expect(first.first.flatMap(Self.status) == "200" && first.last.flatMap(Self.text) == "read one\n", "\(first)")
        await loop.advanceTime(by: .seconds(61))
        #expect(try await harness.frames(count: 1, triesMax: 50).isEmpty, "no 408 for a body that lasts")
        try await harness.data(1, "two\n", end: false)
        #expect(try await harness.frames(count: 1).first.flatMap(Self.text) == "read two\n")
        harness.channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        let ending = try await harness.frames(count: 3)
        guard case .goAway? = ending.first?.payload else {
            Issue.record("no GOAWAY first: \(ending)")
            return
        }
        #expect(ending.dropFirst().first.map(Self.endsStream) == true, "the response ends: \(ending)")
        #expect(Self.resetCode(ending.last) == .noError, "the rest of the body is refused: \(ending)")
        for _ in 0..<2_000 where harness.channel.isActive {
            await loop.run()
            try await Task.sleep(for: .milliseconds(1))
        }
        #expect(!harness.channel.isActive, "the connection closes once the response has ended")
    }

    /// An event stream whose client keeps its HTTP/2 window at 0 is not writable, though the
    /// connection is: the stream's writer then bounds what it buffers (``LiveEventStream``).
    @Test func anEventStreamWithAClosedWindowIsNotWritable() async throws {
        let harness = try await Harness()
        let loop = harness.channel.testingEventLoop
        try await harness.headers(1, method: "GET", path: "/stream", end: true)
        #expect(try await harness.frames(count: 2).last.flatMap(Self.text) == "data: hello\n\n")
        let sink = try #require(harness.sinks.sink)
        #expect(try await loop.submit { sink.isWritable }.get())
        harness.channel.pipeline.fireUserInboundEventTriggered(NIOHTTP2WindowUpdatedEvent(streamID: 1, inboundWindowSize: 65_535, outboundWindowSize: 0))
        #expect(try await loop.submit { sink.isWritable }.get() == false)
        #expect(harness.channel.isWritable)
        harness.channel.pipeline.fireUserInboundEventTriggered(NIOHTTP2WindowUpdatedEvent(streamID: 1, inboundWindowSize: 65_535, outboundWindowSize: 4_096))
        #expect(try await loop.submit { sink.isWritable }.get())
    }

    /// A download whose client takes nothing (its window at 0) has its stream reset after the
    /// write deadline, and the body's writer stops: no file, task or buffer held for good.
    @Test func aDownloadNobodyTakesIsResetAfterTheWriteDeadline() async throws {
        let harness = try await Harness()
        let loop = harness.channel.testingEventLoop
        // The client's SETTINGS gave streams no room to send in.
        harness.channel.pipeline.fireUserInboundEventTriggered(NIOHTTP2StreamCreatedEvent(streamID: 1, localInitialWindowSize: 0, remoteInitialWindowSize: 65_535))
        try await harness.headers(1, method: "GET", path: "/download", end: true)
        let first = try await harness.frames(count: 2)
        #expect(first.first.flatMap(Self.status) == "200" && first.count == 2, "the head and the first piece, then it waits for room")
        await loop.advanceTime(by: .seconds(30))
        #expect(try await harness.frames(count: 1, triesMax: 50).isEmpty, "still waiting within the deadline")
        await loop.advanceTime(by: .seconds(31))
        let after = try await harness.frames(count: 1)
        #expect(Self.resetCode(after.last) == .cancel, "\(after)")
        try await harness.runUntilCancelled(1)
        #expect(harness.sinks.cancelledCount == 1, "the body's writer went on")
    }

    /// A client that resets its stream (or whose connection goes) stops the request's work.
    @Test func aResetStreamCancelsItsRequestsWork() async throws {
        try await Self.resetThenClose(path: "/slow", work: "request")
    }

    /// A streamed body is written by a task of its own once the head is out: the reset of its
    /// stream, or the end of its connection, stops that task.
    @Test func aResetStreamCancelsTheTaskWritingItsStreamedBody() async throws {
        try await Self.resetThenClose(path: "/slow-stream", work: "streamed body")
    }

    /// Two requests to `path` whose work waits until cancelled: the client resets the first
    /// stream, then closes the connection; each time one more piece of work must stop.
    static func resetThenClose(path: String, work: String) async throws {
        let harness = try await Harness()
        try await harness.headers(1, method: "GET", path: path, end: true)
        try await harness.headers(3, method: "GET", path: path, end: true)
        for _ in 0..<200 { await harness.channel.testingEventLoop.run() }
        #expect(harness.sinks.cancelledCount == 0)
        try await harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .rstStream(.cancel)))
        try await harness.runUntilCancelled(1)
        #expect(harness.sinks.cancelledCount == 1, "the reset stream's \(work) went on")
        try await harness.channel.close()
        try await harness.runUntilCancelled(2)
        #expect(harness.sinks.cancelledCount == 2, "the closed connection's \(work) went on")
    }

    @Test func withoutAnIdleTimeoutAnIdleConnectionStays() async throws {
        let harness = try await Harness()
        await harness.channel.testingEventLoop.advanceTime(by: .hours(24))
        #expect(harness.channel.isActive)
    }

    @Test func theClientClosingItsSideClosesTheConnection() async throws {
        let harness = try await Harness()
        harness.channel.pipeline.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        await harness.channel.testingEventLoop.run()
        #expect(!harness.channel.isActive)
    }

    @Test func shutdownSendsGoAwayAndClosesWhenTheLastResponseHasEnded() async throws {
        let harness = try await Harness()
        try await harness.headers(1, method: "GET", path: "/stream", end: true)
        let opened = try await harness.frames(count: 2)
        #expect(opened.first.flatMap(Self.status) == "200")
        #expect(opened.last.flatMap(Self.text) == "data: hello\n\n")
        harness.channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        let goAway = try await harness.frames(count: 1)
        guard case .goAway(let last, let code, _) = goAway.first?.payload else {
            Issue.record("no GOAWAY: \(goAway)")
            return
        }
        #expect(last == 1 && code == .noError)
        #expect(harness.channel.isActive, "the open response keeps the connection")
        // A stream opened after the GOAWAY is refused.
        try await harness.headers(3, method: "GET", path: "/v1/late", end: true)
        let refused = try await harness.frames(count: 1)
        #expect(Self.resetCode(refused.first) == .refusedStream, "a late stream was not refused: \(refused)")
        // The stream's response ends: the client resets it, its sink learns, the body finishes.
        try await harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .rstStream(.cancel)))
        for _ in 0..<2_000 where harness.channel.isActive {
            await harness.channel.testingEventLoop.run()
            try await Task.sleep(for: .milliseconds(1))
        }
        #expect(!harness.channel.isActive)
    }
}
