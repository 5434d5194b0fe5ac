import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import ParleyHTTP2Client
import Synchronization
import Testing

/// The frame-level client against NIOHTTP2's server over loopback: many requests on one
/// connection within the server's limit of concurrent streams, deadlines, GOAWAY, a response too
/// large, a streamed response, and the pool replacing a connection its server ended.
@Suite struct HTTP2ClientConnectionTests {
    /// What the server saw.
    final class Observed: Sendable {
        let open = Mutex((now: 0, most: 0))
        let connections = Atomic(0)
        /// The most bytes of one stream's body that came beyond the window the server had given.
        let overrun = Mutex(0)
    }

    /// NIOHTTP2's server, by path: `/echo` answers 201 with the request's body; `/silent` never
    /// answers; `/big` answers 200 with 200 KiB; `/stream` answers 200 with three parts; `/goaway`
    /// sends GOAWAY naming its own stream as the last, then answers it 200.
    final class Server: ChannelInboundHandler {
        typealias InboundIn = HTTP2Frame
        typealias OutboundOut = HTTP2Frame
        private var requests: [HTTP2StreamID: (path: String, body: ByteBuffer)] = [:]
        /// Each stream's body bytes read, and the window given for them (64 KiB, then what was credited).
        private var received: [HTTP2StreamID: (read: Int, granted: Int)] = [:]
        private let observed: Observed

        init(observed: Observed) {
            self.observed = observed
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let frame = unwrapInboundIn(data)
            switch frame.payload {
            case .headers(let headers):
                requests[frame.streamID] = (headers.headers.first(name: ":path") ?? "", ByteBuffer())
                observed.open.withLock { $0.now += 1; $0.most = max($0.most, $0.now) }
                if headers.endStream { answer(frame.streamID, context: context) }
            case .data(let payload):
                if case .byteBuffer(var bytes) = payload.data {
                    let read = bytes.readableBytes
                    let stream = frame.streamID
                    requests[stream]?.body.writeBuffer(&bytes)
                    var counts = received[stream] ?? (0, 65_535)
                    counts.read += read
                    received[stream] = counts
                    observed.overrun.withLock { $0 = max($0, counts.read - counts.granted) }
                    // Framed without a stream channel, NIOHTTP2 leaves the windows to the handler:
                    // what was read may be sent again, a little later (so that a client that
                    // did not wait for the window would be seen overrunning it).
                    if read > 0 && !payload.endStream {
                        context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(20)) { [self] in
                            received[stream]?.granted += read
                            context.write(wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .windowUpdate(windowSizeIncrement: read))), promise: nil)
                            context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: read))), promise: nil)
                        }
                    }
                }
                if payload.endStream { answer(frame.streamID, context: context) }
            default:
                break
            }
        }

        private func answer(_ stream: HTTP2StreamID, context: ChannelHandlerContext) {
            guard let (path, body) = requests.removeValue(forKey: stream) else { return }
            switch path {
            case "/silent":
                return
            case "/echo":
                respond(stream, status: "201", parts: [body], context: context)
            case "/big":
                respond(stream, status: "200", parts: [ByteBuffer(repeating: 0x61, count: 200 * 1024)], context: context)
            case "/stream":
                respond(stream, status: "200", parts: ["one ", "two ", "three"].map { ByteBuffer(string: $0) }, context: context)
            case "/goaway":
                context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: stream, errorCode: .noError, opaqueData: nil))), promise: nil)
                respond(stream, status: "200", parts: [], context: context)
            default:
                respond(stream, status: "404", parts: [], context: context)
            }
        }

        private func respond(_ stream: HTTP2StreamID, status: String, parts: [ByteBuffer], context: ChannelHandlerContext) {
            observed.open.withLock { $0.now -= 1 }
            let headers = HPACKHeaders([(":status", status)])
            context.write(wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .headers(.init(headers: headers, endStream: parts.isEmpty)))), promise: nil)
            for (index, part) in parts.enumerated() {
                context.write(wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .data(.init(data: .byteBuffer(part), endStream: index == parts.count - 1)))), promise: nil)
            }
            context.flush()
        }
    }

    static func withServer(maxStreams: UInt32 = 100, _ body: (Int, Observed) async throws -> Void) async throws {
        let observed = Observed()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                observed.connections.add(1, ordering: .relaxed)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .server, initialSettings: [HTTP2Setting(parameter: .maxConcurrentStreams, value: Int(maxStreams))]))
                    try channel.pipeline.syncOperations.addHandler(Server(observed: observed))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        do {
            try await body(channel.localAddress?.port ?? 0, observed)
        } catch {
            try? await channel.close()
            throw error
        }
        try await channel.close()
    }

    static func connect(_ port: Int, configure: (inout HTTP2ClientConnection.Configuration) -> Void = { _ in }) async throws -> HTTP2ClientConnection {
        var configuration = HTTP2ClientConnection.Configuration(host: "127.0.0.1", port: port, tls: nil)
        configure(&configuration)
        return try await HTTP2ClientConnection.connect(configuration, on: MultiThreadedEventLoopGroup.singleton.next()).get()
    }

    @Test func requestsBeyondTheServersStreamLimitWaitAndAllAreAnswered() async throws {
        try await Self.withServer(maxStreams: 5) { port, observed in
            let connection = try await Self.connect(port)
            // Past the server's first SETTINGS, so the client knows the limit.
            _ = try await connection.execute(HTTP2ClientRequest(method: "POST", path: "/echo", body: ByteBuffer(string: "first"))).get()
            let responses = try await withThrowingTaskGroup(of: (Int, HTTP2ClientResponse).self) { group in
                for index in 0..<200 {
                    group.addTask {
                        (index, try await connection.execute(HTTP2ClientRequest(method: "POST", path: "/echo", body: ByteBuffer(string: "request \(index)"))).get())
                    }
                }
                return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
            }
            #expect(responses.count == 200)
            for (index, response) in responses {
                #expect(response.status == 201)
                #expect(String(buffer: response.body) == "request \(index)")
            }
            #expect(observed.open.withLock { $0.most } <= 5, "the client kept within the server's limit")
            #expect(observed.connections.load(ordering: .relaxed) == 1)
            _ = try await connection.close(reason: "done").get()
        }
    }

    @Test func aRequestPastItsDeadlineFailsAndTheConnectionGoesOn() async throws {
        try await Self.withServer { port, _ in
            let connection = try await Self.connect(port)
            await #expect {
                try await connection.execute(HTTP2ClientRequest(method: "GET", path: "/silent", timeout: .milliseconds(200))).get()
            } throws: { ($0 as? HTTP2ClientError)?.kind == .timedOut }
            let response = try await connection.execute(HTTP2ClientRequest(method: "POST", path: "/echo", body: ByteBuffer(string: "after"))).get()
            #expect(String(buffer: response.body) == "after")
            #expect(connection.isUsable)
            _ = try await connection.close(reason: "done").get()
        }
    }

    @Test func aResponseOverTheLimitFailsAndALargeOneWithinItArrivesWhole() async throws {
        try await Self.withServer { port, _ in
            let small = try await Self.connect(port) { $0.maxResponseBody = 64 * 1024 }
            await #expect {
                try await small.execute(HTTP2ClientRequest(method: "GET", path: "/big")).get()
            } throws: { ($0 as? HTTP2ClientError)?.kind == .responseTooLarge }
            _ = try await small.close(reason: "done").get()
            // 200 KiB is more than the protocol's initial windows: it arrives only if the client
            // gives credit back as it reads.
            let large = try await Self.connect(port)
            let response = try await large.execute(HTTP2ClientRequest(method: "GET", path: "/big")).get()
            #expect(response.body.readableBytes == 200 * 1024)
            _ = try await large.close(reason: "done").get()
        }
    }

    @Test func aStreamedResponseArrivesInPartsOnTheLoop() async throws {
        try await Self.withServer { port, _ in
            let connection = try await Self.connect(port)
            let parts = Mutex<[String]>([])
            let status = Mutex(0)
            let promise = connection.eventLoop.makePromise(of: HTTP2ClientResponse.self)
            try await connection.eventLoop.submit {
                connection.executeOnLoop(
                    HTTP2ClientRequest(method: "GET", path: "/stream", timeout: nil),
                    streaming: HTTP2ClientStreaming(
                        head: { code, _ in status.withLock { $0 = code } },
                        data: { bytes in parts.withLock { $0.append(String(buffer: bytes)) } }),
                    promise: promise)
            }.get()
            let end = try await promise.futureResult.get()
            #expect(end.status == 200)
            #expect(end.body.readableBytes == 0)
            #expect(status.withLock { $0 } == 200)
            #expect(parts.withLock { $0.joined() } == "one two three")
            _ = try await connection.close(reason: "done").get()
        }
    }

    /// A body written piece by piece after the headers (a send stream's) arrives whole and in
    /// order, though it is more than the server's windows (64 KiB) let go before they are topped up.
    @Test func aBodyWrittenInPiecesGoesAsTheWindowsAllowAndArrivesWhole() async throws {
        try await Self.withServer { port, observed in
            let connection = try await Self.connect(port)
            let pieces = (0..<8).map { index in ByteBuffer(repeating: UInt8(ascii: "a") + UInt8(index), count: 25_000) }
            let echoed = Mutex(ByteBuffer())
            let promise = connection.eventLoop.makePromise(of: HTTP2ClientResponse.self)
            try await connection.eventLoop.submit {
                connection.executeOnLoop(
                    HTTP2ClientRequest(method: "POST", path: "/echo", timeout: .seconds(10), bodyStreams: true),
                    streaming: HTTP2ClientStreaming(
                        head: { _, _ in }, data: { bytes in echoed.withLock { var bytes = bytes; $0.writeBuffer(&bytes) } },
                        started: { stream in
                            for (index, piece) in pieces.enumerated() { connection.writeBodyOnLoop(stream: stream, piece, end: index == pieces.count - 1) }
                        }),
                    promise: promise)
            }.get()
            let response = try await promise.futureResult.get()
            #expect(response.status == 201)
            var expected = ByteBuffer()
            for var piece in pieces { expected.writeBuffer(&piece) }
            #expect(echoed.withLock { $0 } == expected, "the server read the body whole, in order")
            #expect(observed.overrun.withLock { $0 } == 0, "the client sent beyond the window")
            let after = try await connection.execute(HTTP2ClientRequest(method: "POST", path: "/echo", body: ByteBuffer(string: "after"))).get()
            #expect(after.status == 201 && String(buffer: after.body) == "after", "the connection goes on")
            _ = try await connection.close(reason: "done").get()
        }
    }

    @Test func afterAGoAwayTheStreamsTheServerTookFinishAndThePoolConnectsAgain() async throws {
        try await Self.withServer { port, observed in
            let connection = try await Self.connect(port)
            let answered = try await connection.execute(HTTP2ClientRequest(method: "GET", path: "/goaway")).get()
            #expect(answered.status == 200, "the stream the GOAWAY named as the last was answered")
            #expect(!connection.isUsable)
            await #expect {
                try await connection.execute(HTTP2ClientRequest(method: "POST", path: "/echo", body: ByteBuffer(string: "late"))).get()
            } throws: { ($0 as? HTTP2ClientError)?.notProcessed == true }

            let pool = HTTP2ClientPool(tls: nil, connectionsPerServer: 1)
            let first = try await pool.execute(HTTP2ClientRequest(method: "GET", path: "/goaway"), host: "127.0.0.1", port: port).get()
            #expect(first.status == 200)
            let before = observed.connections.load(ordering: .relaxed)
            let second = try await pool.execute(HTTP2ClientRequest(method: "POST", path: "/echo", body: ByteBuffer(string: "again")), host: "127.0.0.1", port: port).get()
            #expect(String(buffer: second.body) == "again")
            #expect(observed.connections.load(ordering: .relaxed) == before + 1, "a new connection replaced the one the server ended")
            await pool.shutdown()
        }
    }

    @Test func aPoolWithNoServerFailsItsRequestsAsNotSent() async throws {
        // A port nothing listens on: bound, then closed.
        let probe = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
        let port = probe.localAddress?.port ?? 0
        try await probe.close()
        let pool = HTTP2ClientPool(tls: nil)
        await #expect {
            try await pool.execute(HTTP2ClientRequest(method: "GET", path: "/echo"), host: "127.0.0.1", port: port).get()
        } throws: { error in
            guard let error = error as? HTTP2ClientError else { return false }
            return error.kind == .connectionFailed && error.notProcessed
        }
        await pool.shutdown()
    }
}
