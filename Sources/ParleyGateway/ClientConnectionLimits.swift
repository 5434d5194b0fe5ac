import Logging
import Metrics
import NIOCore
import NIOHTTPTypes
import Synchronization

/// The client connections a gateway has open, against `--client-connections-max`: each costs
/// memory (TLS state, buffers; one holding an idle event stream 62 KiB resident), so their number
/// is what bounds a gateway's memory against clients that open connections and keep them.
///
/// Each client address has a share of them (`--client-connections-per-address`): one host, with
/// no account, cannot hold every slot.
final class ConnectionCount: Sendable {
    let max: Int
    /// The most one client address may hold; nil: no share.
    let perAddressMax: Int?
    private let count = Atomic(0)
    private let byAddress = Mutex<[String: Int]>([:])
    /// Connections closed since ``MemoryTrim`` last gave memory back.
    private let closedSinceTrim = Atomic(0)

    static let refused = Counter(label: "parley.gateway.connections_refused")
    static let handshakesTimedOut = Counter(label: "parley.gateway.handshakes_timed_out")

    struct AtLimit: Error, CustomStringConvertible {
        var description: String { "the gateway is at its client connection limit" }
    }

    init(max: Int, perAddressMax: Int? = nil) {
        self.max = max
        self.perAddressMax = perAddressMax
    }

    /// Counts a new connection from `address` in; false (and not counted) at the limit, or at
    /// the address's share.
    func open(from address: String? = nil) -> Bool {
        if let perAddressMax, let address {
            let taken = byAddress.withLock { byAddress in
                let held = byAddress[address, default: 0]
                guard held < perAddressMax else { return false }
                byAddress[address] = held + 1
                return true
            }
            guard taken else { return false }
        }
        var current = count.load(ordering: .relaxed)
        while current < max {
            let (exchanged, original) = count.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        release(address)
        return false
    }

    func closed(from address: String? = nil) {
        release(address)
        count.subtract(1, ordering: .relaxed)
        closedSinceTrim.add(1, ordering: .relaxed)
    }

    var current: Int { count.load(ordering: .relaxed) }

    /// The connections `address` holds.
    func held(by address: String) -> Int {
        byAddress.withLock { $0[address, default: 0] }
    }

    private func release(_ address: String?) {
        guard perAddressMax != nil, let address else { return }
        byAddress.withLock { byAddress in
            let left = byAddress[address, default: 0] - 1
            byAddress[address] = left > 0 ? left : nil
        }
    }

    /// The connections closed since the last call that returned a number, if there are at least
    /// `minimum` (and then counting starts over); nil otherwise, and they go on counting.
    func takeClosedSinceTrim(atLeast minimum: Int) -> Int? {
        let closed = closedSinceTrim.load(ordering: .relaxed)
        guard closed >= minimum else { return nil }
        closedSinceTrim.subtract(closed, ordering: .relaxed)
        return closed
    }
}

/// The time an HTTP/1.1 request may take to arrive, from its first byte to the end of its body
/// (a client that sends headers or a body a byte at a time holds a connection and the memory of a
/// request for as long as it likes otherwise). Past it the client gets `408` and the connection
/// is closed. An upload (``Gateway/streamsBody(_:)``) instead may take as long as it needs while
/// its bytes keep coming: its time counts from the last of them, as on HTTP/2. Two handlers share
/// the clock: ``bytes`` before the HTTP decoder sees a request begin, ``parts`` after it sees the
/// request's head and end and its response end.
final class HTTP1RequestDeadline {
    let bytes: Bytes
    let parts: Parts

    init(timeout: TimeAmount, logger: Logger) {
        let clock = Clock(timeout: timeout, logger: logger)
        self.bytes = Bytes(clock)
        self.parts = Parts(clock)
    }

    final class Clock {
        enum State {
            /// Between requests: the next bytes start one.
            case waiting
            /// A request is arriving; the timer ends the connection unless it has all come.
            /// `answered`: its response was written already (a body over the limit is answered
            /// before it has all come); the rest must still come in time.
            case receiving(Scheduled<Void>, answered: Bool)
            /// The request has come; its response is being written.
            case answering
        }

        let timeout: TimeAmount
        let logger: Logger
        var state = State.waiting
        /// Whether the request arriving is an upload, whose time counts from its last bytes.
        var streamsBody = false
        /// The handler before the decoder: the 408 is written from there, under the decoder and
        /// whatever the application was doing.
        var context: ChannelHandlerContext?

        init(timeout: TimeAmount, logger: Logger) {
            self.timeout = timeout
            self.logger = logger
        }

        func bytesArrived(on loop: any EventLoop) {
            switch state {
            case .waiting:
                state = .receiving(loop.assumeIsolated().scheduleTask(in: timeout) { [self] in expired() }, answered: false)
            case .receiving(let timer, let answered) where streamsBody:
                timer.cancel()
                state = .receiving(loop.assumeIsolated().scheduleTask(in: timeout) { [self] in expired() }, answered: answered)
            case .receiving, .answering:
                break
            }
        }

        func requestEnded() {
            streamsBody = false
            switch state {
            case .receiving(let timer, let answered):
                timer.cancel()
                state = answered ? .waiting : .answering
            case .waiting, .answering:
                state = .answering
            }
        }

        func responseEnded() {
            switch state {
            case .receiving(let timer, _): state = .receiving(timer, answered: true)
            case .waiting, .answering: state = .waiting
            }
        }

        func stop() {
            streamsBody = false
            if case .receiving(let timer, _) = state { timer.cancel() }
            state = .answering
        }

        private func expired() {
            guard case .receiving(_, let answered) = state, let context else { return }
            state = .answering
            logger.info("HTTP/1.1 request timed out before it all came", metadata: ["timeout": "\(timeout)"])
            guard !answered else {
                context.close(promise: nil)
                return
            }
            let body = #"{"error":{"code":"request_timeout","message":"the request did not all arrive in time","retryable":true}}"#
            let response = "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: \(body.utf8.count)\r\nconnection: close\r\n\r\n\(body)"
            context.writeAndFlush(NIOAny(ByteBuffer(string: response))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
    }

    /// Between TLS and the HTTP decoder.
    final class Bytes: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        let clock: Clock

        init(_ clock: Clock) { self.clock = clock }

        func handlerAdded(context: ChannelHandlerContext) { clock.context = context }

        func handlerRemoved(context: ChannelHandlerContext) {
            clock.stop()
            clock.context = nil
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            clock.bytesArrived(on: context.eventLoop)
            context.fireChannelRead(data)
        }

        func channelInactive(context: ChannelHandlerContext) {
            clock.stop()
            context.fireChannelInactive()
        }
    }

    /// After the HTTP codec, before the application.
    final class Parts: ChannelDuplexHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPRequestPart
        typealias OutboundIn = HTTPResponsePart
        let clock: Clock

        init(_ clock: Clock) { self.clock = clock }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let request): if Gateway.streamsBody(request) != nil { clock.streamsBody = true }
            case .end: clock.requestEnded()
            case .body: break
            }
            context.fireChannelRead(data)
        }

        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            if case .end = unwrapOutboundIn(data) { clock.responseEnded() }
            context.write(data, promise: promise)
        }
    }
}

/// Closes an HTTP/1.1 client connection once the client closed its side. Hummingbird lets a
/// connection half-close, and HTTP/1.1 would keep it open until its response ends, which an event
/// stream never does: its user kept counting as online, and their messages went to a stream
/// nobody read instead of being owed as push notifications, until a ping's write failed — never,
/// while the client's socket stayed half-open. A client that has gone (a ragged end of TLS, or
/// close_notify) waits for no answer. (HTTP/2 connections close on it in ``HTTP2Connection``.)
final class HTTP1InputCloser: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// Closes a client connection whose client has taken none of what the gateway wrote for
/// `deadline` (the socket's send buffer full, and the channel's past its high-water mark, the
/// whole time). Such a client is gone or hostile: it holds a file descriptor, TLS state and every
/// byte queued for it, for any protocol and any response, until it is closed. A download's own
/// write deadline resets its stream, but an HTTP/2 reset cannot reach a client that reads
/// nothing, and an HTTP/1.1 response has no stream to reset.
///
/// Being the handler that sees the socket's writability change, it also wakes what waits for
/// room on the connection (``whenWritable(_:_:)``).
final class StalledConnectionCloser: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    /// As long as a download waits for its client (``HTTP2BodyWriter/writeDeadline``) and an event
    /// stream for its reader.
    static let deadline: TimeAmount = .seconds(60)
    static let closed = Counter(label: "parley.gateway.connections_stalled_closed")

    private let deadline: TimeAmount
    private let logger: Logger
    private var timer: Scheduled<Void>?
    /// What waits for the connection to take more (or to close).
    private var writableWaiters: [() -> Void] = []

    init(deadline: TimeAmount = StalledConnectionCloser.deadline, logger: Logger) {
        self.deadline = deadline
        self.logger = logger
    }

    /// On `channel`'s loop: runs `action` once `channel` takes more without buffering, or is
    /// closed (at once if it is either now).
    func whenWritable(_ channel: any Channel, _ action: @escaping () -> Void) {
        if channel.isWritable || !channel.isActive {
            action()
        } else {
            writableWaiters.append(action)
        }
    }

    private func wakeWriters() {
        let waiters = writableWaiters
        writableWaiters = []
        for waiter in waiters { waiter() }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            timer?.cancel()
            timer = nil
            wakeWriters()
        } else if timer == nil {
            let deadline = self.deadline
            let logger = self.logger
            let channel = context.channel
            timer = context.eventLoop.assumeIsolated().scheduleTask(in: deadline) {
                guard !channel.isWritable else { return }
                logger.info("client connection closed: its client took nothing written to it within the deadline", metadata: [
                    "deadline": "\(deadline)", "client.address": "\(channel.remoteAddress?.ipAddress ?? "unknown")",
                ])
                Self.closed.increment()
                channel.close(promise: nil)
            }
        }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        wakeWriters()
        context.fireChannelInactive()
    }
}
