import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// The operations port: plain HTTP/1.1, bound to loopback unless configured otherwise.
/// Routes are answered synchronously from in-memory state.
final class OpsServer: Sendable {
    struct Response: Sendable {
        var status: HTTPResponseStatus
        var contentType: String
        var body: [UInt8]

        static func text(_ status: HTTPResponseStatus, _ text: String) -> Response {
            Response(status: status, contentType: "text/plain; charset=utf-8", body: Array((text + "\n").utf8))
        }

        static func json(_ status: HTTPResponseStatus, _ value: some Encodable) -> Response {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            let body = (try? encoder.encode(value)).map(Array.init) ?? Array(#"{"error":{"code":"internal","message":"encoding failed","retryable":true}}"#.utf8)
            return Response(status: status, contentType: "application/json", body: body)
        }

        /// API.md's error body.
        static func error(_ status: HTTPResponseStatus, code: String, message: String, retryable: Bool = false) -> Response {
            struct Body: Encodable {
                struct Detail: Encodable { var code: String; var message: String; var retryable: Bool }
                var error: Detail
            }
            return json(status, Body(error: .init(code: code, message: message, retryable: retryable)))
        }
    }

    typealias Router = @Sendable (_ method: HTTPMethod, _ path: String, _ headers: HTTPHeaders) -> Response

    private let host: String
    private let port: Int
    private let router: Router
    private let logger: Logger
    private let channel = Mutex<(any Channel)?>(nil)

    init(host: String, port: Int, logger: Logger, router: @escaping Router) {
        self.host = host
        self.port = port
        self.logger = logger
        self.router = router
    }

    /// Binds and starts serving; returns the bound port.
    @discardableResult
    func start() async throws -> Int {
        let router = self.router
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMapThrowing {
                    try channel.pipeline.syncOperations.addHandler(OpsHandler(router: router))
                }
            }
            .bind(host: host, port: port).get()
        self.channel.withLock { $0 = channel }
        let bound = channel.localAddress?.port ?? port
        logger.info("operations port listening", metadata: ["ops.address": "\(host):\(bound)"])
        return bound
    }

    func stop() async {
        let channel = self.channel.withLock { $0 }
        try? await channel?.close()
    }
}

private final class OpsHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let router: OpsServer.Router
    private var head: HTTPRequestHead?

    init(router: @escaping OpsServer.Router) {
        self.router = router
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body:
            break  // no route takes a body
        case .end:
            guard let head else { return }
            self.head = nil
            let path = String(head.uri.split(separator: "?", maxSplits: 1).first ?? "")
            let response = router(head.method, path, head.headers)
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: response.contentType)
            headers.add(name: "Content-Length", value: "\(response.body.count)")
            let keepAlive = head.isKeepAlive
            if !keepAlive { headers.add(name: "Connection", value: "close") }
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: response.status, headers: headers))), promise: nil)
            if head.method != .HEAD {
                context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: response.body)))), promise: nil)
            }
            let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
            if !keepAlive {
                let context = NIOLoopBound(context, eventLoop: context.eventLoop)
                done.whenComplete { _ in context.value.close(promise: nil) }
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
