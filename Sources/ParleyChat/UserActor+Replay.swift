import Distributed
import Foundation
import ParleyCluster
import ParleyModel
import ParleyStore

/// Where a resume's replay stands: what is still to be sent. The gateway holds it between pages
/// and hands it back, so the user's actor keeps nothing per resume.
public struct ReplayPosition: Codable, Sendable, Hashable {
    /// Messages of one conversation still to replay: seqs `after+1 ... through`.
    public struct Range: Codable, Sendable, Hashable {
        public var conversationId: ConversationID
        public var after: Int64
        public var through: Int64
    }

    /// The instant the replay starts from (the resume's cursor minus the replay window).
    public var since: Date
    /// In the order they go out; the first is under way.
    public var ranges: [Range]
    /// Once the messages are out, the changes to messages go, page by page: where they got to,
    /// and whether they are all out.
    public var changesAfter: ChangePosition?
    public var changesDone = false

    public init(since: Date, ranges: [Range]) {
        self.since = since
        self.ranges = ranges
    }
}

/// One page of a replay: events in the order they go out, and where the next page starts (nil:
/// this was the last).
public struct ReplayPage: Codable, Sendable {
    public var events: [ChatEvent]
    public var next: ReplayPosition?

    public init(events: [ChatEvent], next: ReplayPosition?) {
        self.events = events
        self.next = next
    }
}

extension UserActor {
    /// The most messages in one page, and about the most bytes of text: a page is one reply frame
    /// between nodes, which has a size limit (texts are up to 4,000 scalars each).
    static let replayPageMessagesMax = 1_000
    static let replayPageTextBytesMax = 512 * 1024

    /// The first page of the durable events committed after `since` that concern this user, for
    /// resuming its event stream: the conversation changes. The pages after it
    /// (``replay(continuing:)``) carry each conversation's messages in seq order, and the last one
    /// the receipts and removals.
    ///
    /// Throws `cursor_expired` when more than `messagesMax` messages were committed after
    /// `cursor` in the user's conversations, or as many changes to messages: the client should
    /// reload rather than replay. What the
    /// replay window adds before the cursor (``since``) is not counted: it is at most a window's
    /// worth of traffic, and a client that reconnects at once must be able to resume however busy
    /// its conversations are.
    ///
    /// Messages are found without an extra index: a conversation's `sentAt` never goes backwards
    /// along its seqs, so the first seq after an instant is found by bisection.
    public distributed func replay(since: Date, cursor: Date, messagesMax: Int) async throws -> ReplayPage {
        let me = UserID(rawValue: id.key)
        let changed = try await services.withStore { try await $0.messageChanges(for: me, since: cursor, after: nil, limit: messagesMax + 1) }
        guard changed.count <= messagesMax else {
            throw ChatError(.cursorExpired, "the cursor is older than what can be replayed (over \(messagesMax) changes to messages); reload conversations and page messages with after=")
        }
        let changes = try await services.withStore { try await $0.durableChanges(for: me, since: since) }
        let events = changes.conversations.map { ChatEvent.conversation(ConversationChange(conversation: $0.conversation, change: $0.change, at: $0.at)) }
        var ranges: [ReplayPosition.Range] = []
        var afterCursor: Int64 = 0
        var page: ConversationPageCursor?
        pages: repeat {
            let records = try await services.withStore { try await $0.conversations(of: me, after: page, limit: 100) }
            for record in records {
                guard record.lastActivityAt > since else { break pages }
                let first = try await firstSeq(in: record, after: since)
                guard first <= record.lastSeq else { continue }
                ranges.append(.init(conversationId: record.id, after: first - 1, through: record.lastSeq))
                if record.lastActivityAt > cursor {
                    afterCursor += record.lastSeq - (try await firstSeq(in: record, after: cursor, from: first)) + 1
                    guard afterCursor <= messagesMax else {
                        throw ChatError(.cursorExpired, "the cursor is older than what can be replayed (over \(messagesMax) messages); reload conversations and page messages with after=")
                    }
                }
            }
            page = records.count == 100 ? records.last.map { ConversationPageCursor(lastActivityAt: $0.lastActivityAt, id: $0.id) } : nil
        } while page != nil
        return ReplayPage(events: events, next: ReplayPosition(since: since, ranges: ranges))
    }

    /// The next page of a replay ``replay(since:cursor:messagesMax:)`` began.
    public distributed func replay(continuing position: ReplayPosition) async throws -> ReplayPage {
        var position = position
        var events: [ChatEvent] = []
        var textBytes = 0
        while let range = position.ranges.first, events.count < Self.replayPageMessagesMax, textBytes < Self.replayPageTextBytesMax {
            let wanted = Int(min(200, range.through - range.after, Int64(Self.replayPageMessagesMax - events.count)))
            let chunk = wanted > 0
                ? try await services.withStore { try await $0.messages(in: range.conversationId, after: range.after, limit: wanted) }
                : []
            for message in chunk where message.seq <= range.through {
                events.append(.message(message))
                textBytes += message.text.utf8.count
            }
            if let last = chunk.last, last.seq < range.through {
                position.ranges[0].after = last.seq
            } else {
                position.ranges.removeFirst()
            }
        }
        let me = UserID(rawValue: id.key)
        let since = position.since
        // Then the changes to messages, each conversation's in order, after all its messages.
        while position.ranges.isEmpty, !position.changesDone, events.count < Self.replayPageMessagesMax, textBytes < Self.replayPageTextBytesMax {
            let wanted = min(200, Self.replayPageMessagesMax - events.count)
            let after = position.changesAfter
            let page = try await services.withStore { try await $0.messageChanges(for: me, since: since, after: after, limit: wanted) }
            events += page.map { .change($0) }
            textBytes += page.reduce(0) { $0 + ($1.text?.utf8.count ?? 0) }
            if page.count < wanted { position.changesDone = true } else { position.changesAfter = page.last.map(ChangePosition.init) }
        }
        guard position.ranges.isEmpty, position.changesDone else { return ReplayPage(events: events, next: position) }
        // The last page: receipts, annotations, erasures and removals, as they are now.
        let changes = try await services.withStore { try await $0.durableChanges(for: me, since: since) }
        events += changes.receipts.map {
            .receipt(ReceiptEvent(conversationId: $0.conversationId, userId: $0.member.userId, deliveredSeq: $0.member.deliveredSeq, readSeq: $0.member.readSeq, at: $0.at))
        }
        events += changes.annotations.map { .annotation($0) }
        events += changes.erasures.map { .erasure($0) }
        events += changes.removals.map { .conversation(ConversationChange(conversation: $0.conversation, change: .memberRemoved, at: $0.at)) }
        return ReplayPage(events: events, next: nil)
    }

    /// The first seq of `record`'s conversation committed after `instant` (`lastSeq + 1` if none),
    /// and at least `from`: the last messages are read first (where a resume's usually all are),
    /// and only if all of them are after `instant`, the seqs before are bisected, one message read
    /// per step.
    private func firstSeq(in record: ConversationRecord, after instant: Date, from: Int64 = 1) async throws -> Int64 {
        let conversation = record.id
        let tail = try await services.withStore { try await $0.messages(in: conversation, before: record.lastSeq + 1, limit: 64) }
        guard let oldestRead = tail.first else { return record.lastSeq + 1 }
        if oldestRead.sentAt <= instant || oldestRead.seq <= from {
            return max(tail.first { $0.sentAt > instant }?.seq ?? record.lastSeq + 1, from)
        }
        // The answer is in low...high: oldestRead is after `instant`.
        var low = from, high = oldestRead.seq
        while low < high {
            let middle = low + (high - low) / 2
            let probe = try await services.withStore { try await $0.messages(in: conversation, after: middle - 1, limit: 1) }
            if let message = probe.first, message.seq == middle, message.sentAt <= instant {
                low = middle + 1
            } else {
                high = middle  // after `instant` (or unreadable: replaying more is safe)
            }
        }
        return low
    }
}
