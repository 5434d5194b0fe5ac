import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ParleyChat
import ParleyCluster
import ParleyModel

extension Gateway {
    /// How many exports one user may ask for: 3 at once, then one every 8 hours, on each gateway.
    static let exportRule = RateLimiter.Rule(perSecond: 1.0 / (8 * 3600), burst: 3)
    /// Messages read per page while an export is written: what it holds at once.
    static let exportPage = 200
    /// The bytes an export gathers before it writes them.
    static let exportChunk = 64 * 1024

    /// `GET /v1/users/me/export`: everything the caller gave the service, as one JSON document
    /// written as it is read — the profile, devices, blocks, the conversations with their members,
    /// then every message the caller sent (with its attachments' descriptions and where to download
    /// them), a page at a time, so that no export is held whole. One at a time per user.
    func export(_ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        let caller = context.caller.id
        guard exportsUnderWay.reserve(1, for: caller, within: 1) else {
            throw APIError(.tooManyRequests, "rate_limited", "an export of yours is being written; wait for it to finish", retryable: true, retryAfterSeconds: 10)
        }
        let slot = UserTally.Reservation(exportsUnderWay, 1, for: caller)
        if let wait = exportLimiter.acquire(caller.rawValue, now: system.clock.now) {
            throw APIError.rateLimited(retryAfter: wait, "too many exports; the next one can be asked for later")
        }
        let user = try UserActor.resolve(caller, using: system)
        // What fits in memory is asked before the answer starts: a failure is then a clean error.
        let profile = try await user.me()  // with the private fields: the export is the user's own
        let devices = try await user.devices()
        let blocks = try await user.blocked()
        let system = self.system
        let encoder = Self.encoder
        let exportedAt = system.clock.wallNow
        logger.info("export started", metadata: ["user.id": "\(caller)"])
        let body = ResponseBody { writer in
            defer { withExtendedLifetime(slot) {} }
            // Written in pieces of about 64 KiB: one DATA frame per JSON token would be hundreds
            // of thousands of frames for a long history.
            var pending = ByteBuffer()
            func append(_ text: String) { pending.writeString(text) }
            func append(_ value: some Encodable) throws { pending.writeBytes(try encoder.encode(value)) }
            func flush(whenOver size: Int = Self.exportChunk) async throws {
                guard pending.readableBytes > 0, pending.readableBytes >= size else { return }
                try await writer.write(pending)
                pending = ByteBuffer()
            }
            append("{\"exportedAt\":")
            try append(exportedAt)
            append(",\"user\":")
            try append(profile)
            append(",\"devices\":")
            try append(devices)
            append(",\"blocks\":")
            try append(blocks)
            append(",\"conversations\":[")
            var conversations: [ConversationID] = []
            var cursor: ConversationPageCursor?
            repeat {
                let page = try await user.conversations(after: cursor, limit: 100)
                for summary in page.conversations {
                    if !conversations.isEmpty { append(",") }
                    try append(API.Conversation(summary.conversation, for: caller))
                    conversations.append(summary.conversation.id)
                }
                try await flush()
                cursor = page.next
            } while cursor != nil
            append("],\"messages\":[")
            var first = true
            for conversation in conversations {
                let actor = try ConversationActor.resolve(conversation, using: system)
                var after: Int64 = 0
                while true {
                    let page = try await actor.history(for: caller, after: after, before: nil, limit: Self.exportPage)
                    for message in page where message.senderId == caller {
                        if !first { append(",") }
                        first = false
                        try append(ExportedMessage(message))
                    }
                    try await flush()
                    guard page.count == Self.exportPage, let last = page.last?.seq else { break }
                    after = last
                }
            }
            append("]}")
            try await flush(whenOver: 0)
            try await writer.finish(nil)
        }
        var headers: HTTPFields = [.contentType: "application/json"]
        headers[.contentDisposition] = "attachment; filename=\"parley-export.json\""
        return Response(status: .ok, headers: headers, body: body)
    }
}

/// A message as the export writes it: the message, and where each attachment downloads from.
struct ExportedMessage: Encodable {
    var message: Message
    var downloads: [String]

    init(_ message: Message) {
        self.message = message
        self.downloads = (message.attachments ?? []).map { "/v1/media/\($0.media.id.rawValue)" }
    }
}
