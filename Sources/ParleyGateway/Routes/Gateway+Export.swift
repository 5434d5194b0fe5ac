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
        let profile = try await user.user()
        let devices = try await user.devices()
        let blocks = try await user.blocked()
        let system = self.system
        let encoder = Self.encoder
        let exportedAt = system.clock.wallNow
        logger.info("export started", metadata: ["user.id": "\(caller)"])
        let body = ResponseBody { writer in
            defer { withExtendedLifetime(slot) {} }
            func write(_ text: String) async throws { try await writer.write(ByteBuffer(string: text)) }
            func write(_ value: some Encodable) async throws { try await writer.write(ByteBuffer(bytes: try encoder.encode(value))) }
            try await write("{\"exportedAt\":")
            try await write(exportedAt)
            try await write(",\"user\":")
            try await write(profile)
            try await write(",\"devices\":")
            try await write(devices)
            try await write(",\"blocks\":")
            try await write(blocks)
            try await write(",\"conversations\":[")
            var conversations: [ConversationID] = []
            var cursor: ConversationPageCursor?
            repeat {
                let page = try await user.conversations(after: cursor, limit: 100)
                for summary in page.conversations {
                    try await write(conversations.isEmpty ? "" : ",")
                    try await write(API.Conversation(summary.conversation, for: caller))
                    conversations.append(summary.conversation.id)
                }
                cursor = page.next
            } while cursor != nil
            try await write("],\"messages\":[")
            var first = true
            for conversation in conversations {
                let actor = try ConversationActor.resolve(conversation, using: system)
                var after: Int64 = 0
                while true {
                    let page = try await actor.history(for: caller, after: after, before: nil, limit: Self.exportPage)
                    for message in page where message.senderId == caller {
                        try await write(first ? "" : ",")
                        first = false
                        try await write(ExportedMessage(message))
                    }
                    guard page.count == Self.exportPage, let last = page.last?.seq else { break }
                    after = last
                }
            }
            try await write("]}")
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
