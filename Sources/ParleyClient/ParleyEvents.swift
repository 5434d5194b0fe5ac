import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import ParleyModel

/// One event of a user's stream.
public enum ParleyEvent: Sendable, Hashable {
    case message(Message)
    case receipt(API.ReceiptEvent)
    case conversation(API.ConversationEvent)
    case typing(API.TypingEvent)
    case presence(Presence)
    /// A user whose name or photo changed: this one, or one who shares a conversation with them
    /// (live only: after a reconnect, read again the users shown).
    case user(User)
    /// A bot annotated a message (`message_annotated`).
    case annotation(Annotation)
    /// A message was erased (`message_erased`): its tombstone, which replaces it.
    case erased(Message)
    /// A message was edited, deleted for everyone, reacted to or pinned (`message_edited`,
    /// `message_deleted`, `reaction_added`, `reaction_removed`, `message_pinned`,
    /// `message_unpinned`): apply it to the messages of its conversation
    /// (``MessageChange/applied(to:as:)``: its message, and the quotes of replies to it) and to
    /// the conversation's pinned seqs (``MessageChange/applied(toPinned:)``), once per `changeSeq`.
    case changed(MessageChange)
    /// The stream (re)connected and replayed what was missed: live events follow.
    case ready(cursor: String)
    /// The cursor was too old to replay: reload conversations and page messages with `after=`;
    /// the stream continues from now.
    case cursorExpired
}

/// Pure: turns server-sent event lines into events, and remembers what a resume needs.
public struct ServerSentEventParser: Sendable {
    public struct Frame: Equatable, Sendable {
        public var event: String?
        public var id: String?
        public var data: String = ""
    }

    private var current = Frame()
    private var pending: [UInt8] = []

    public init() {}

    /// Feeds bytes; returns the complete frames.
    public mutating func feed(_ bytes: some Sequence<UInt8>) -> [Frame] {
        var frames: [Frame] = []
        // Contiguous bytes (a ByteBuffer's, an array's) are searched for line ends and copied a
        // line at a time; any other sequence a byte at a time. Both end lines alike.
        let searched: Void? = bytes.withContiguousStorageIfAvailable { buffer in
            var start = buffer.startIndex
            while let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) {
                pending.append(contentsOf: buffer[start..<newline])
                endLine(into: &frames)
                start = newline + 1
            }
            pending.append(contentsOf: buffer[start...])
        }
        if searched == nil {
            for byte in bytes {
                if byte == UInt8(ascii: "\n") { endLine(into: &frames) } else { pending.append(byte) }
            }
        }
        return frames
    }

    /// A line ended (`pending` holds it, without its `\n`).
    private mutating func endLine(into frames: inout [Frame]) {
        if pending.last == UInt8(ascii: "\r") { pending.removeLast() }
        let line = String(decoding: pending, as: UTF8.self)
        pending.removeAll(keepingCapacity: true)
        if line.isEmpty {
            if current.event != nil || !current.data.isEmpty { frames.append(current) }
            current = Frame()
        } else if line.hasPrefix(":") {
            return  // a comment: `: ping`
        } else {
            let (field, value) = Self.split(line)
            switch field {
            case "event": current.event = value
            case "id": current.id = value
            case "data": current.data += current.data.isEmpty ? value : "\n" + value
            default: break
            }
        }
    }

    private static func split(_ line: String) -> (String, String) {
        guard let colon = line.firstIndex(of: ":") else { return (line, "") }
        var value = line[line.index(after: colon)...]
        if value.first == " " { value = value.dropFirst() }
        return (String(line[..<colon]), String(value))
    }
}

/// Pure: which messages the app has already seen, per conversation (streams deliver each
/// conversation in seq order; a resume may repeat messages, which are dropped here).
struct MessageDeduplicator {
    private var lastSeq: [ConversationID: Int64] = [:]

    /// True the first time a `(conversationId, seq)` comes; false for a repeat.
    mutating func isNew(_ message: Message) -> Bool {
        if let last = lastSeq[message.conversationId], message.seq <= last { return false }
        lastSeq[message.conversationId] = message.seq
        return true
    }
}

extension ParleyClient {
    /// The signed-in user's events, forever: it connects to a gateway, and whenever the stream
    /// ends or fails it reconnects (with backoff, moving on to the next gateway) and resumes from
    /// the cursor of the last event it delivered, so nothing durable is missed; messages already
    /// delivered are dropped by `(conversationId, seq)`. Ends on `401` (signed out) or when the
    /// consuming task is cancelled.
    public func events(cursor: String? = nil) -> AsyncThrowingStream<ParleyEvent, any Error> {
        let events = cursoredEvents(cursor: cursor)
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    for try await (event, _) in events { continuation.yield(event) }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// ``events(cursor:)`` with each event's cursor (its `id`: resuming from it replays what came
    /// after the event), for a store that keeps the cursor with what it applied.
    func cursoredEvents(cursor: String?) -> AsyncThrowingStream<(event: ParleyEvent, cursor: String?), any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                var cursor = cursor
                var deduplicator = MessageDeduplicator()
                var gateway = 0
                let backoff = Backoff(first: .milliseconds(200), max: .seconds(5))
                var pause = backoff.first
                while !Task.isCancelled {
                    let url = configuration.gateways[gateway % configuration.gateways.count]
                    do {
                        var delivered = false
                        try await stream(from: url, cursor: cursor) { event, id in
                            if let id { cursor = id }
                            if case .message(let message) = event, !deduplicator.isNew(message) { return }
                            delivered = true
                            continuation.yield((event, id))
                        }
                        if delivered { pause = backoff.first }
                    } catch let error as ParleyError where error.code == "cursor_expired" {
                        cursor = nil
                        continuation.yield((.cursorExpired, nil))
                        continue
                    } catch let error as ParleyError where error.status == 401 {
                        continuation.finish(throwing: error)
                        return
                    } catch {
                        logger.debug("event stream failed; reconnecting", metadata: ["gateway": "\(url)", "error": "\(error)"])
                    }
                    guard !Task.isCancelled else { break }
                    gateway += 1
                    try? await Task.sleep(for: pause + .milliseconds(Int.random(in: 0...100)))
                    pause = backoff.next(after: pause)
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// One connection: events are handed to `deliver` with their `id` (the cursor after them).
    private func stream(from gateway: URL, cursor: String?, deliver: (ParleyEvent, String?) -> Void) async throws {
        guard let token else { throw ParleyError(status: 401, code: "unauthorized", message: "not signed in", retryable: false) }
        var request = HTTPClientRequest(url: gateway.absoluteString + "/v1/events" + (cursor.map { "?cursor=\(Self.query($0))" } ?? ""))
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "Accept", value: "text/event-stream")
        let response = try await http.execute(request, timeout: .hours(24 * 365))
        guard response.status == .ok else {
            let body = try await response.body.collect(upTo: 1024 * 1024)
            throw Self.error(status: Int(response.status.code), headers: response.headers, body: Data(buffer: body))
        }
        var parser = ServerSentEventParser()
        let decoder = API.makeDecoder()
        for try await chunk in response.body {
            for frame in parser.feed(chunk.readableBytesView) {
                guard let event = Self.decode(frame, decoder: decoder) else {
                    logger.debug("ignored an event this client does not know", metadata: ["event": "\(frame.event ?? "?")"])
                    continue
                }
                deliver(event, frame.id)
            }
        }
    }

    /// The event a frame of the stream carries (nil: a kind this client does not know, or data it
    /// cannot read).
    public static func decode(_ frame: ServerSentEventParser.Frame, decoder: JSONDecoder) -> ParleyEvent? {
        // A message in the server's own form is read directly; anything else through the decoder.
        if frame.event == "message", let message = Message.fromWrappedJSON(frame.data.utf8) { return .message(message) }
        let data = Data(frame.data.utf8)
        switch frame.event {
        case "message": return (try? decoder.decode(API.MessageEvent.self, from: data)).map { .message($0.message) }
        case "receipt": return (try? decoder.decode(API.ReceiptEvent.self, from: data)).map { .receipt($0) }
        case "conversation": return (try? decoder.decode(API.ConversationEvent.self, from: data)).map { .conversation($0) }
        case "typing": return (try? decoder.decode(API.TypingEvent.self, from: data)).map { .typing($0) }
        case "presence": return (try? decoder.decode(API.PresenceEvent.self, from: data)).map { .presence($0.presence) }
        case "user": return (try? decoder.decode(API.UserEvent.self, from: data)).map { .user($0.user) }
        case "message_annotated": return (try? decoder.decode(API.AnnotationEvent.self, from: data)).map { .annotation($0.annotation) }
        case "message_erased": return (try? decoder.decode(API.MessageEvent.self, from: data)).map { .erased($0.message) }
        case let name? where MessageChange.Kind(eventName: name) != nil:
            return (try? decoder.decode(API.ChangeEvent.self, from: data)).map { .changed($0.change) }
        case "ready": return (try? decoder.decode(API.ReadyEvent.self, from: data)).map { .ready(cursor: $0.cursor) }
        default: return nil
        }
    }
}
