import Foundation
import Logging
import Metrics
import HTTPTypes
import Hummingbird
import NIOCore
import ParleyChat
import ParleyCluster
import ParleyModel

extension Gateway {
    /// `GET /v1/events`: the caller's server-sent events. With a cursor (`?cursor=` or
    /// `Last-Event-ID`): the durable events since it (``StreamCursor``), then `ready`, then live
    /// events; without one, `ready` first. Per conversation, messages go out in seq order without
    /// duplicates; a gap the conversation's owner does not fill in time ends the stream
    /// (``LiveEventStream``).
    func events(_ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        let caller = context.caller
        let cursorText = request.uri.queryParameters["cursor"].map(String.init) ?? request.headers[HTTPField.Name("Last-Event-ID")!]
        var cursor: StreamCursor?
        if let cursorText, !cursorText.isEmpty {
            guard let parsed = StreamCursor(token: cursorText) else { throw APIError.invalid("cursor is not one this server gave") }
            guard !parsed.isExpired(now: system.clock.wallNow) else {
                throw APIError(.gone, "cursor_expired", "the cursor is too old to replay; reload conversations and page messages with after=")
            }
            cursor = parsed
        }
        // Over HTTP/2 the server gives the stream its own sink; over HTTP/1.1 it is the connection.
        let sink = context.eventSink ?? ChannelEventSink(context.channel)
        let http2 = context.eventSink != nil
        let pingTicks = ServerSentEvent.pingTicks(http2: http2)
        let stream = LiveEventStream(
            user: caller.id, tokenId: caller.claims.tokenId, sink: sink, cursor: cursor ?? StreamCursor(system.clock.wallNow),
            // A phase of its own, so that streams opened together do not all ping in one second.
            pingTicks: pingTicks, pingOffset: system.random.int(in: 0..<pingTicks), clock: system.clock, logger: logger)
        let firstPage: ReplayPage?
        do {
            firstPage = try await hub.open(
                stream, resumingFrom: cursor, streamsPerUserMax: configuration.streamsPerUserMax, replayMessagesMax: configuration.replayMessagesMax)
        } catch StreamHub.Refusal.shuttingDown {
            throw APIError.unavailable("this gateway is shutting down; connect to another")
        } catch StreamHub.Refusal.revoked {
            throw APIError.unauthorized("unknown, expired or revoked token")
        } catch StreamHub.Refusal.tooManyStreams {
            throw APIError(.tooManyRequests, "too_many_streams", "at most \(configuration.streamsPerUserMax) event streams per user are open at once on this gateway; close one first", retryable: true, retryAfterSeconds: 5)
        }
        let body = ResponseBody { [hub] bodyWriter in
            await hub.serve(stream, replayFrom: firstPage)
            try? await bodyWriter.finish(nil)
        }
        return Response(
            status: .ok,
            headers: [.contentType: "text/event-stream", .cacheControl: "no-cache", HTTPField.Name("X-Accel-Buffering")!: "no"],
            body: body)
    }
}

/// The bytes of server-sent events.
enum ServerSentEvent {
    /// Ping every this many ticks (seconds): API.md's 15 s on HTTP/2, where a stream the client
    /// resets or a connection that drops is seen at once (the stream channel closes). Over
    /// HTTP/1.1 a client that went away is noticed only when a write fails, so pings go every 3 s
    /// there, and presence goes offline within seconds on both.
    static func pingTicks(http2: Bool) -> Int { http2 ? 15 : 3 }

    /// The SSE frame of `event` for this stream: the event name, its cursor (durable events), and
    /// the `data:` JSON — `sharedData` when the hub encoded it once for every stream.
    static func frame(for event: ChatEvent, user: UserID, cursor: StreamCursor, sharedData: [UInt8]? = nil) -> ByteBuffer {
        switch event {
        case .conversation(let change):
            // The recipient's own unread count: encoded per stream.
            let data = API.ConversationEvent(conversation: API.Conversation(change.conversation, for: user), change: change.change)
            return frame(event: "conversation", id: cursor.token, json: encoded(data))
        case .message:
            return frame(event: "message", id: cursor.token, json: sharedData ?? Self.sharedData(for: event) ?? [])
        case .receipt:
            return frame(event: "receipt", id: cursor.token, json: sharedData ?? Self.sharedData(for: event) ?? [])
        case .typing:
            return frame(event: "typing", id: nil, json: sharedData ?? Self.sharedData(for: event) ?? [])
        case .presence:
            return frame(event: "presence", id: nil, json: sharedData ?? Self.sharedData(for: event) ?? [])
        case .user:
            return frame(event: "user", id: nil, json: sharedData ?? Self.sharedData(for: event) ?? [])
        case .annotation:
            return frame(event: "message_annotated", id: cursor.token, json: sharedData ?? Self.sharedData(for: event) ?? [])
        case .erasure:
            return frame(event: "message_erased", id: cursor.token, json: sharedData ?? Self.sharedData(for: event) ?? [])
        case .change(let change):
            return frame(event: change.kind.eventName, id: cursor.token, json: sharedData ?? Self.sharedData(for: event) ?? [])
        }
    }

    /// The `data:` JSON of an event that is the same for every recipient: all but conversation
    /// events (nil), which carry the recipient's own unread count.
    static func sharedData(for event: ChatEvent) -> [UInt8]? {
        switch event {
        case .message(let message):
            message.wrappedJSON  // `API.MessageEvent`, written directly
        case .receipt(let receipt):
            encoded(API.ReceiptEvent(conversationId: receipt.conversationId, userId: receipt.userId, deliveredSeq: receipt.deliveredSeq, readSeq: receipt.readSeq))
        case .typing(let typing):
            encoded(typing)
        case .presence(let presence):
            encoded(API.PresenceEvent(presence: presence))
        case .user(let user):
            encoded(API.UserEvent(user: user))
        case .annotation(let annotation):
            encoded(API.AnnotationEvent(annotation: annotation))
        case .erasure(let erasure):
            erasure.message.wrappedJSON  // `API.MessageEvent`: the tombstone
        case .change(let change):
            encoded(API.ChangeEvent(change))
        case .conversation:
            nil
        }
    }

    private static func encoded(_ data: any Encodable) -> [UInt8] {
        (try? Array(Gateway.encoder.encode(data))) ?? Array("{}".utf8)
    }

    static func frame(event: String, id: String?, data: some Encodable) -> ByteBuffer {
        frame(event: event, id: id, json: encoded(data))
    }

    /// JSON has no raw newlines (they are escaped in strings), so the data is one line.
    static func frame(event: String, id: String?, json: [UInt8]) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(json.count + event.utf8.count + (id?.utf8.count ?? 0) + 24)
        buffer.writeString("event: ")
        buffer.writeString(event)
        if let id {
            buffer.writeString("\nid: ")
            buffer.writeString(id)
        }
        buffer.writeString("\ndata: ")
        buffer.writeBytes(json)
        buffer.writeString("\n\n")
        return buffer
    }
}
