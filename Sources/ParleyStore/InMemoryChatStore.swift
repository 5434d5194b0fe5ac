import Foundation
import ParleyModel
import Synchronization

/// The store in memory, with exactly the semantics of the durable ones: for simulations and tests.
public final class InMemoryChatStore: ChatStore {
    private struct Stored {
        var record: ConversationRecord
        var epoch: Int64 = 0
        var messages: [Message] = []
        var byClientMessageID: [String: Int] = [:]
        var lastChange = ConversationChangeKind.created
        var changedAt: Date
        var receiptAt: [UserID: Date] = [:]
        /// Removed members and when.
        var removals: [(user: UserID, at: Date)] = []
        var pushesOwedFrom: Int64?
        var webhookCursors: [String: WebhookCursorRecord] = [:]
        /// By seq, then key.
        var annotations: [Int64: [String: Annotation]] = [:]
        var erasures: [Erasure] = []
        /// Changes to messages, in order: `changes[i].changeSeq == i + 1`.
        var changes: [MessageChange] = []
        /// Who holds which emoji, by seq.
        var reactions: [Int64: [String: Set<UserID>]] = [:]
        /// The texts edits replaced, by seq, oldest first.
        var versions: [Int64: [MessageVersion]] = [:]
        /// The seqs of each message's replies, ascending.
        var replies: [Int64: [Int64]] = [:]

        /// Every reply to message `seq` quotes it as it is now.
        mutating func requote(_ seq: Int64) {
            let quote = MessageQuote(of: messages[Int(seq - 1)])
            for reply in replies[seq] ?? [] where messages[Int(reply - 1)].replyTo != nil {
                messages[Int(reply - 1)].replyTo = quote
            }
        }

        /// Message `seq` is a tombstone now: nothing it carried stays, and nothing quotes or pins it.
        mutating func emptied(_ seq: Int64) {
            annotations[seq] = nil
            reactions[seq] = nil
            versions[seq] = nil
            requote(seq)
            record.pinned.removeAll { $0 == seq }
        }

        init(record: ConversationRecord) {
            self.record = record
            self.changedAt = record.createdAt
        }

        mutating func changed(_ change: ConversationChangeKind, at: Date) {
            lastChange = change
            changedAt = at.millisecondPrecision
        }
    }

    private let state = Mutex<[ConversationID: Stored]>([:])

    private struct Users {
        var byID: [UserID: StoredUser] = [:]
        var idByHandle: [String: UserID] = [:]
        var revoked: [String: Date] = [:]
        var sessions: [String: StoredSession] = [:]
        var blocks: [Block: Date] = [:]
        /// Reports in the order they were filed, with whether their webhooks are owed.
        var reports: [(report: Report, owed: Bool)] = []
        /// Every user's devices, in the order they were registered.
        var devices: [StoredDevice] = []
        var media: [MediaID: StoredMedia] = [:]
        var mediaReferences: [MediaID: Set<ConversationID>] = [:]
        var deletionWebhooksOwed: Set<UserID> = []
        /// Uploads that are profile photos (of their uploader) or groups' photos.
        var avatars: Set<MediaID> = []
        var groupPhotos: [MediaID: Set<ConversationID>] = [:]
        /// Each user's profile changes counted, and through which webhooks were told.
        var profiles: [UserID: (version: Int64, told: Int64, changedAt: Date)] = [:]
        /// Kept apart from the users, as the SQL stores read them apart.
        var privateMetadata: [UserID: Metadata] = [:]

        /// Whether anything keeps the upload from the sweeper.
        func isReferenced(_ id: MediaID) -> Bool {
            mediaReferences[id] != nil || avatars.contains(id) || groupPhotos[id] != nil
        }

        /// Hands the upload back to the sweeper (its next pass removes it), unless anything uses it.
        mutating func releaseUnused(_ id: MediaID?) {
            guard let id, !isReferenced(id) else { return }
            media[id]?.media.createdAt = Date(timeIntervalSince1970: 0)
        }

        mutating func profileChanged(_ user: UserID, at: Date) {
            let before = profiles[user] ?? (0, 0, at)
            profiles[user] = (before.version + 1, before.told, at.millisecondPrecision)
        }

        /// The user's avatar becomes the upload `id` (nil: none), the one before released.
        mutating func setAvatar(of user: UserID, to id: MediaID?) throws(ChatStoreError) {
            let before = byID[user]?.user.avatar?.id
            if let id {
                guard let stored = media[id] else { throw ChatStoreError(.notFound, "no upload \(id)") }
                byID[user]?.user.avatar = stored.media
                avatars.insert(id)
            } else {
                byID[user]?.user.avatar = nil
            }
            if let before, before != id {
                avatars.remove(before)
                releaseUnused(before)
            }
        }
    }

    private let users = Mutex(Users())
    private let webhookEndpoints = Mutex<[String: Date]>([:])
    /// Whether a commit's answer is lost after it committed (a simulation's fault).
    private let losesAnswer: @Sendable ([AppendRequest]) -> Bool

    public init() {
        self.losesAnswer = { _ in false }
    }

    /// A store whose commits' answers may be lost (simulations' fault).
    /// - Parameter losesAnswer: asked after each commit; true makes the commit throw although
    ///   it committed, as a PostgreSQL connection that broke after `COMMIT` does.
    @_spi(Testing) public init(losesAnswer: @escaping @Sendable ([AppendRequest]) -> Bool) {
        self.losesAnswer = losesAnswer
    }

    public func migrate() async throws {}

    public func createConversation(_ record: ConversationRecord) async throws {
        try state.withLock { state in
            guard state[record.id] == nil else { throw ChatStoreError(.conflict, "conversation \(record.id) exists") }
            var record = record
            record.createdAt = record.createdAt.millisecondPrecision
            record.lastActivityAt = record.lastActivityAt.millisecondPrecision
            state[record.id] = Stored(record: record)
        }
    }

    public func conversation(_ id: ConversationID) async throws -> ConversationRecord? {
        state.withLock { $0[id]?.record }
    }

    public func acquireOwnership(of id: ConversationID) async throws -> Int64 {
        try state.withLock { state in
            guard state[id] != nil else { throw ChatStoreError(.notFound, "no conversation \(id)") }
            state[id]!.epoch += 1
            return state[id]!.epoch
        }
    }

    public func commit(_ appends: [AppendRequest]) async throws -> [AppendOutcome] {
        try commitNow(appends)
    }

    /// Commits under the store's lock on the caller's thread, as SQLite does: the group commit
    /// runs its commit thread over this store, and a simulation runs that path.
    public var blockingCommit: BlockingCommit? { { try self.commitNow($0) } }

    private func commitNow(_ appends: [AppendRequest]) throws -> [AppendOutcome] {
        let outcomes = state.withLock { state in
            appends.map { append in
                // Mutated in place: a copy of `Stored` would copy its whole message array.
                guard state[append.conversationId] != nil else { return AppendOutcome.unknownConversation }
                return Self.commit(append, into: &state[append.conversationId]!)
            }
        }
        if losesAnswer(appends) { throw ChatStoreError(.unavailable, "the connection broke after the commit") }
        return outcomes
    }

    private static func commit(_ append: AppendRequest, into stored: inout Stored) -> AppendOutcome {
        guard stored.epoch == append.epoch else { return .staleEpoch(current: stored.epoch) }
        if let index = stored.byClientMessageID[append.clientMessageId] {
            return .duplicate(stored.messages[index])
        }
        let message = append.message(seq: stored.record.lastSeq + 1, sentAt: append.sentAt.millisecondsSince1970)
        stored.messages.append(message)
        stored.byClientMessageID[append.clientMessageId] = stored.messages.count - 1
        if let quoted = message.replyTo?.seq { stored.replies[quoted, default: []].append(message.seq) }
        stored.record.lastSeq = message.seq
        stored.record.lastActivityAt = message.sentAt
        if let index = stored.record.members.firstIndex(where: { $0.userId == append.senderId }) {
            stored.record.members[index].deliveredSeq = max(stored.record.members[index].deliveredSeq, message.seq)
            stored.record.members[index].readSeq = max(stored.record.members[index].readSeq, message.seq)
        }
        return .appended(message)
    }

    public func messages(in id: ConversationID, after seq: Int64, limit: Int) async throws -> [Message] {
        state.withLock { state in
            guard let messages = state[id]?.messages else { return [] }
            // messages[i].seq == i + 1: slice directly.
            let start = Int(max(0, min(seq, Int64(messages.count))))
            return Array(messages[start..<min(messages.count, start + max(0, limit))])
        }
    }

    public func messages(in id: ConversationID, before seq: Int64, limit: Int) async throws -> [Message] {
        state.withLock { state in
            guard let messages = state[id]?.messages else { return [] }
            let end = Int(max(0, min(seq - 1, Int64(messages.count))))
            return Array(messages[max(0, end - max(0, limit))..<end])
        }
    }

    public func lastMessages(in ids: [ConversationID]) async throws -> [ConversationID: Message] {
        state.withLock { state in
            var last: [ConversationID: Message] = [:]
            for id in ids { last[id] = state[id]?.messages.last }
            return last
        }
    }

    public func message(in id: ConversationID, clientMessageId: String) async throws -> Message? {
        state.withLock { state in
            guard let stored = state[id], let index = stored.byClientMessageID[clientMessageId] else { return nil }
            return stored.messages[index]
        }
    }

    public func replies(in id: ConversationID, to seq: Int64, after: Int64, limit: Int) async throws -> [Message] {
        state.withLock { state in
            guard let stored = state[id] else { return [] }
            return (stored.replies[seq] ?? []).lazy.filter { $0 > after }.map { stored.messages[Int($0 - 1)] }
                .filter { $0.replyTo != nil }.prefix(max(0, limit)).map { $0 }
        }
    }

    public func mentions(of user: UserID, before position: MentionPosition?, limit: Int) async throws -> [Message] {
        state.withLock { state in
            var found: [Message] = []
            for stored in state.values where stored.record.member(user) != nil {
                found += stored.messages.filter { $0.mentions?.contains(user) == true && !$0.isTombstone }
            }
            func key(_ message: Message) -> (Int64, Int64, String) { (message.sentAt.millisecondsSince1970, message.seq, message.conversationId.rawValue) }
            return found
                .filter { message in position.map { key(message) < ($0.sentAt, $0.seq, $0.conversationId.rawValue) } ?? true }
                .sorted { key($0) > key($1) }.prefix(max(0, limit)).map { $0 }
        }
    }

    public func addMembers(_ members: [ConversationMember], to id: ConversationID, epoch: Int64, at: Date) async throws {
        try fencedChange(of: id, epoch: epoch) { stored in
            for member in members where stored.record.member(member.userId) == nil {
                stored.record.members.append(member)
            }
            stored.changed(.memberAdded, at: at)
        }
    }

    public func removeMember(_ user: UserID, from id: ConversationID, epoch: Int64, at: Date) async throws {
        try fencedChange(of: id, epoch: epoch) { stored in
            guard let removed = stored.record.member(user) else { return }
            stored.record.members.removeAll { $0.userId == user }
            stored.record.setMuted(false, by: user)
            if removed.role == .owner, !stored.record.members.isEmpty {
                // The longest-standing member left is the owner now (ConversationState.memberRemoved).
                stored.record.members[0].role = .owner
                stored.record.ownerId = stored.record.members[0].userId
            }
            stored.receiptAt[user] = nil
            stored.removals.append((user, at.millisecondPrecision))
            stored.changed(.memberRemoved, at: at)
        }
    }

    public func updateConversation(_ id: ConversationID, name: String?, metadata: Metadata?, epoch: Int64, at: Date) async throws {
        try fencedChange(of: id, epoch: epoch) { stored in
            if let name { stored.record.name = name }
            if let metadata { stored.record.metadata = metadata.orNilWhenEmpty }
            stored.changed(.updated, at: at)
        }
    }

    public func setMemberMetadata(_ metadata: Metadata?, for user: UserID, in id: ConversationID, epoch: Int64) async throws -> Bool {
        try fencedChange(of: id, epoch: epoch) { stored in
            guard let index = stored.record.members.firstIndex(where: { $0.userId == user }) else { return false }
            stored.record.members[index].metadata = metadata?.orNilWhenEmpty
            return true
        }
    }

    public func setConversationPhoto(_ id: ConversationID, to media: MediaID?, epoch: Int64, at: Date) async throws -> Media? {
        // The one place both locks are held: conversations, then users.
        try fencedChange(of: id, epoch: epoch) { stored throws(ChatStoreError) in
            try users.withLock { users throws(ChatStoreError) in
                let before = stored.record.photo?.id
                if let media {
                    guard let upload = users.media[media] else { throw ChatStoreError(.notFound, "no upload \(media)") }
                    stored.record.photo = upload.media
                    users.groupPhotos[media, default: []].insert(id)
                } else {
                    stored.record.photo = nil
                }
                if let before, before != media {
                    users.groupPhotos[before]?.remove(id)
                    if users.groupPhotos[before]?.isEmpty == true { users.groupPhotos[before] = nil }
                    users.releaseUnused(before)
                }
                stored.changed(.updated, at: at)
                return stored.record.photo
            }
        }
    }

    public func setPushesOwed(from seq: Int64?, in id: ConversationID, epoch: Int64) async throws {
        try fencedChange(of: id, epoch: epoch) { $0.pushesOwedFrom = seq }
    }

    public func conversationsOwingPushes(limit: Int) async throws -> [(conversation: ConversationID, from: Int64)] {
        state.withLock { state in
            Array(state.compactMap { id, stored in stored.pushesOwedFrom.map { (id, $0) } }.sorted { $0.0 < $1.0 }.prefix(max(0, limit)))
        }
    }

    public func annotate(_ annotation: Annotation, epoch: Int64) async throws {
        try fencedChange(of: annotation.conversationId, epoch: epoch) { $0.annotations[annotation.seq, default: [:]][annotation.key] = annotation }
    }

    public func eraseMessages(in id: ConversationID, seqs: [Int64], epoch: Int64, at: Date) async throws -> [Message] {
        var erased: [Message] = []
        try fencedChange(of: id, epoch: epoch) { stored in
            for seq in Set(seqs).sorted() where seq >= 1 && seq <= Int64(stored.messages.count) {
                let index = Int(seq - 1)
                let original = stored.messages[index]
                guard !original.isTombstone else { continue }
                stored.messages[index] = original.tombstone
                stored.emptied(seq)
                stored.erasures.append(Erasure(message: original, at: at))
                erased.append(original)
            }
        }
        return erased
    }

    public func commitChange(_ change: MessageChange, epoch: Int64) async throws -> (change: MessageChange, message: Message)? {
        try fencedChange(of: change.conversationId, epoch: epoch) { stored throws(ChatStoreError) in
            guard change.changeSeq == stored.record.lastChangeSeq + 1 else {
                throw ChatStoreError(.conflict, "change \(change.changeSeq) of \(change.conversationId) is not the next")
            }
            if let key = change.clientChangeId, stored.changes.contains(where: { $0.clientChangeId == key }) {
                throw ChatStoreError(.conflict, "client change ID \(key) is used")
            }
            let seq = change.seq
            guard seq >= 1, seq <= Int64(stored.messages.count) else { return nil }
            let index = Int(seq - 1)
            var message = stored.messages[index]
            guard !message.isTombstone else { return nil }
            var change = change
            switch change.kind {
            case .edited:
                stored.versions[seq, default: []].append(MessageVersion(text: message.text, at: message.editedAt ?? message.sentAt))
                message = change.applied(to: message)
            case .deleted:
                message = change.applied(to: message)
            case .pinned, .unpinned:
                let pinned = change.applied(toPinned: stored.record.pinned)
                guard pinned != stored.record.pinned else { return nil }
                stored.record.pinned = pinned
            case .reactionAdded, .reactionRemoved:
                guard let emoji = change.emoji else { return nil }
                var holders = stored.reactions[seq, default: [:]][emoji, default: []]
                let changed = change.kind == .reactionAdded ? holders.insert(change.userId).inserted : holders.remove(change.userId) != nil
                guard changed else { return nil }
                stored.reactions[seq, default: [:]][emoji] = holders.isEmpty ? nil : holders
                change.count = holders.count
                message = change.applied(to: message)
            }
            stored.messages[index] = message
            switch change.kind {
            case .edited: stored.requote(seq)
            case .deleted: stored.emptied(seq)
            case .reactionAdded, .reactionRemoved, .pinned, .unpinned: break
            }
            stored.changes.append(change)
            stored.record.lastChangeSeq = change.changeSeq
            return (change, message)
        }
    }

    public func messageChanges(in id: ConversationID, after changeSeq: Int64, limit: Int) async throws -> [MessageChange] {
        state.withLock { state in
            guard let changes = state[id]?.changes else { return [] }
            let start = Int(max(0, min(changeSeq, Int64(changes.count))))
            return Array(changes[start..<min(changes.count, start + max(0, limit))])
        }
    }

    public func messageChanges(in id: ConversationID, since: Date, limit: Int) async throws -> [MessageChange] {
        state.withLock { state in Array((state[id]?.changes ?? []).filter { $0.at > since }.suffix(max(0, limit))) }
    }

    public func messageChange(in id: ConversationID, clientChangeId: String) async throws -> MessageChange? {
        state.withLock { state in state[id]?.changes.first { $0.clientChangeId == clientChangeId } }
    }

    public func messageChanges(for user: UserID, since: Date, after position: ChangePosition?, limit: Int) async throws -> [MessageChange] {
        state.withLock { state in
            let mine = state.values.filter { $0.record.member(user) != nil }.sorted { Array($0.record.id.rawValue.utf8).lexicographicallyPrecedes(Array($1.record.id.rawValue.utf8)) }
            let changes = mine.flatMap { $0.changes.filter { $0.at > since } }.filter { change in
                guard let position else { return true }
                let (mine, theirs) = (Array(change.conversationId.rawValue.utf8), Array(position.conversationId.rawValue.utf8))
                return mine == theirs ? change.changeSeq > position.changeSeq : theirs.lexicographicallyPrecedes(mine)
            }
            return Array(changes.prefix(max(0, limit)))
        }
    }

    public func messageVersions(in id: ConversationID, seq: Int64) async throws -> [MessageVersion] {
        state.withLock { state in state[id]?.versions[seq] ?? [] }
    }

    public func reactions(of user: UserID, in id: ConversationID, seqs: ClosedRange<Int64>) async throws -> [HeldReaction] {
        state.withLock { state in
            guard let stored = state[id] else { return [] }
            return stored.reactions.filter { seqs.contains($0.key) }.sorted { $0.key < $1.key }.flatMap { seq, holders in
                holders.filter { $0.value.contains(user) }.keys.sorted().map { HeldReaction(seq: seq, emoji: $0) }
            }
        }
    }

    public func erasures(in id: ConversationID, since: Date, limit: Int) async throws -> [Erasure] {
        state.withLock { state in
            Array((state[id]?.erasures ?? []).filter { $0.at > since }.sorted { ($0.at, $0.message.seq) < ($1.at, $1.message.seq) }.suffix(max(0, limit)))
        }
    }

    public func releaseMedia(_ ids: [MediaID]) async throws {
        users.withLock { users in
            for id in ids {
                users.mediaReferences[id] = nil
                users.releaseUnused(id)
            }
        }
    }

    public func annotations(in id: ConversationID, seqs: ClosedRange<Int64>) async throws -> [Annotation] {
        state.withLock { state in
            guard let stored = state[id] else { return [] }
            return stored.annotations.filter { seqs.contains($0.key) }.sorted { $0.key < $1.key }
                .flatMap { $0.value.values.sorted { $0.key < $1.key } }
        }
    }

    public func webhookEndpointFirstSeen(_ name: String, at: Date) async throws -> Date {
        webhookEndpoints.withLock { endpoints in
            if let first = endpoints[name] { return first }
            endpoints[name] = at.millisecondPrecision
            return at.millisecondPrecision
        }
    }

    public func webhookCursors(in id: ConversationID) async throws -> [WebhookCursorRecord] {
        state.withLock { state in (state[id]?.webhookCursors.values).map { $0.sorted { $0.endpoint < $1.endpoint } } ?? [] }
    }

    public func saveWebhookCursor(_ cursor: WebhookCursorRecord, in id: ConversationID, epoch: Int64) async throws {
        try fencedChange(of: id, epoch: epoch) { $0.webhookCursors[cursor.endpoint] = cursor }
    }

    public func conversationsOwingWebhooks(limit: Int) async throws -> [ConversationID] {
        state.withLock { state in
            Array(state.filter { $0.value.webhookCursors.values.contains(where: \.pending) }.keys.sorted().prefix(max(0, limit)))
        }
    }

    public func recentlyChangedConversations(since: Date, limit: Int) async throws -> [ConversationID] {
        state.withLock { state in
            Array(state.filter { $0.value.changedAt > since || $0.value.receiptAt.values.contains { $0 > since } || $0.value.erasures.contains { $0.at > since } || $0.value.changes.last.map { $0.at > since } == true }
                .keys.sorted().prefix(max(0, limit)))
        }
    }

    public func recentChanges(in id: ConversationID, since: Date) async throws -> [RecentChange] {
        state.withLock { state in
            guard let stored = state[id] else { return [] }
            var changes = stored.removals.filter { $0.at > since }.map { RecentChange(change: .memberRemoved, at: $0.at, removed: $0.user) }
            if stored.changedAt > since, stored.lastChange != .memberRemoved { changes.append(RecentChange(change: stored.lastChange, at: stored.changedAt)) }
            return changes.sorted { ($0.at, $0.removed?.rawValue ?? "") < ($1.at, $1.removed?.rawValue ?? "") }
        }
    }

    public func unread(of user: UserID) async throws -> UnreadCount {
        state.withLock { state in
            let each = state.values.compactMap { stored in
                stored.record.member(user).map { member in
                    let tombstones = stored.messages.dropFirst(Int(member.readSeq)).filter(\.isTombstone).count
                    return max(0, stored.record.lastSeq - member.readSeq - Int64(tombstones))
                }
            }
            return UnreadCount(messages: each.reduce(0, +), conversations: Int64(each.filter { $0 > 0 }.count))
        }
    }

    public func setMuted(_ muted: Bool, for user: UserID, in id: ConversationID, epoch: Int64) async throws -> Bool {
        try fencedChange(of: id, epoch: epoch) { stored in
            guard stored.record.member(user) != nil else { return false }
            stored.record.setMuted(muted, by: user)
            return true
        }
    }

    @discardableResult
    private func fencedChange<Result>(of id: ConversationID, epoch: Int64, _ change: (inout Stored) throws(ChatStoreError) -> Result) throws -> Result {
        try state.withLock { state throws(ChatStoreError) in
            guard state[id] != nil else { throw ChatStoreError(.notFound, "no conversation \(id)") }
            guard state[id]!.epoch == epoch else { throw ChatStoreError(.staleEpoch, "epoch \(epoch) is not \(state[id]!.epoch)") }
            return try change(&state[id]!)
        }
    }

    public func advanceReceipts(in id: ConversationID, user: UserID, deliveredSeq: Int64, readSeq: Int64, at: Date) async throws -> ConversationMember? {
        state.withLock { state in
            guard var stored = state[id], let index = stored.record.members.firstIndex(where: { $0.userId == user }) else { return nil }
            var member = stored.record.members[index]
            member.readSeq = max(member.readSeq, readSeq)
            member.deliveredSeq = max(member.deliveredSeq, deliveredSeq, member.readSeq)
            if member != stored.record.members[index] {
                stored.receiptAt[user] = at.millisecondPrecision
            }
            stored.record.members[index] = member
            state[id] = stored
            return member
        }
    }

    public func durableChanges(for user: UserID, since: Date) async throws -> DurableChanges {
        state.withLock { state in
            var changes = DurableChanges()
            for stored in state.values.sorted(by: { $0.record.id < $1.record.id }) {
                if stored.record.member(user) != nil {
                    if stored.changedAt > since {
                        changes.conversations.append(.init(conversation: stored.record, change: stored.lastChange, at: stored.changedAt))
                    }
                    for member in stored.record.members {
                        if let at = stored.receiptAt[member.userId], at > since {
                            changes.receipts.append(.init(conversationId: stored.record.id, member: member, at: at))
                        }
                    }
                    changes.annotations += stored.annotations.values.flatMap(\.values).filter { $0.at > since }
                    changes.erasures += stored.erasures.filter { $0.at > since }
                }
                for removal in stored.removals where removal.user == user && removal.at > since {
                    changes.removals.append(.init(conversation: stored.record, change: .memberRemoved, at: removal.at))
                }
            }
            changes.conversations.sort { ($0.at, $0.conversation.id) < ($1.at, $1.conversation.id) }
            changes.receipts.sort { $0.at < $1.at }
            changes.removals.sort { $0.at < $1.at }
            changes.annotations.sort { ($0.at, $0.conversationId, $0.seq, $0.key) < ($1.at, $1.conversationId, $1.seq, $1.key) }
            changes.erasures.sort { ($0.at, $0.message.conversationId, $0.message.seq) < ($1.at, $1.message.conversationId, $1.message.seq) }
            return changes
        }
    }

    // MARK: Users

    public func createUser(_ user: StoredUser, reclaimingHandlesDeletedBefore quarantineEnded: Date) async throws {
        try users.withLock { users in
            if let holder = users.idByHandle[user.user.handle], let deletion = users.byID[holder]?.deletion, deletion.requestedAt < quarantineEnded {
                users.idByHandle[user.user.handle] = nil
                users.idByHandle[DeletionRows.reclaimedHandle(of: holder)] = holder
            }
            guard users.byID[user.user.id] == nil, users.idByHandle[user.user.handle] == nil else {
                throw ChatStoreError(.conflict, "handle \(user.user.handle) is taken")
            }
            var stored = user
            stored.user.createdAt = stored.user.createdAt.millisecondPrecision
            users.byID[user.user.id] = stored
            users.idByHandle[user.user.handle] = user.user.id
        }
    }

    public func user(id: UserID) async throws -> StoredUser? {
        users.withLock { $0.byID[id] }
    }

    public func users(_ ids: [UserID]) async throws -> [User] {
        let found = users.withLock { users in ids.compactMap { users.byID[$0]?.user } }
        return StoredUser.inOrder(found, asked: ids)
    }

    public func user(handle: String) async throws -> StoredUser? {
        users.withLock { users in users.idByHandle[handle].flatMap { users.byID[$0] }.flatMap { $0.deletion == nil ? $0 : nil } }
    }

    public func updateProfile(
        of id: UserID, displayName: String?, avatarURL: String?, metadata: Metadata?, privateMetadata: Metadata?, at: Date
    ) async throws -> User? {
        try users.withLock { users throws(ChatStoreError) in
            guard let stored = users.byID[id], stored.deletion == nil else { return nil }
            if let displayName { users.byID[id]?.user.displayName = displayName }
            if let avatarURL {
                users.byID[id]?.user.avatarURL = avatarURL
                try users.setAvatar(of: id, to: nil)
            }
            if let metadata { users.byID[id]?.user.metadata = metadata.orNilWhenEmpty }
            if let privateMetadata { users.privateMetadata[id] = privateMetadata.orNilWhenEmpty }
            if displayName != nil || avatarURL != nil || metadata != nil { users.profileChanged(id, at: at) }
            return users.byID[id]?.user
        }
    }

    public func privateMetadata(of id: UserID) async throws -> Metadata? {
        users.withLock { $0.byID[id]?.deletion == nil ? $0.privateMetadata[id] : nil }
    }

    public func setAvatar(of id: UserID, to media: MediaID?, at: Date) async throws -> User? {
        try users.withLock { users throws(ChatStoreError) in
            guard let stored = users.byID[id], stored.deletion == nil else { return nil }
            guard stored.user.avatar?.id != media || stored.user.avatarURL != nil else { return stored.user }
            try users.setAvatar(of: id, to: media)
            users.byID[id]?.user.avatarURL = nil
            users.profileChanged(id, at: at)
            return users.byID[id]?.user
        }
    }

    public func untoldProfiles(limit: Int) async throws -> [UntoldProfile] {
        users.withLock { users in
            let untold = users.profiles.filter { $0.value.version > $0.value.told }.sorted { ($0.value.changedAt, $0.key) < ($1.value.changedAt, $1.key) }
            return untold.prefix(max(0, limit)).compactMap { id, profile in
                users.byID[id].map { UntoldProfile(user: $0.user, version: profile.version, changedAt: profile.changedAt) }
            }
        }
    }

    public func profileTold(_ user: UserID, through version: Int64) async throws {
        users.withLock { users in
            guard let profile = users.profiles[user] else { return }
            users.profiles[user]?.told = max(profile.told, version)
        }
    }

    public func searchUsers(prefix: String, limit: Int) async throws -> [User] {
        let key = User.nameKey(prefix)
        return users.withLock { users in
            let live = users.byID.values.filter { $0.deletion == nil }.map(\.user)
            let handles = live.filter { $0.handle.hasPrefix(prefix.lowercased()) }.sorted { $0.handle < $1.handle }
            let names = key.isEmpty ? [] : live.flatMap { user in User.nameKeys(user.displayName).filter { $0.hasPrefix(key) }.map { ($0, user) } }
                .sorted { a, b in
                    // As the SQL stores' index orders them: by key, then user ID, bytewise.
                    a.0 != b.0 ? a.0.utf8.lexicographicallyPrecedes(b.0.utf8) : a.1.id.rawValue.utf8.lexicographicallyPrecedes(b.1.id.rawValue.utf8)
                }
                .map(\.1)
            return UserNameRows.merged(handles: handles, names: names, limit: limit)
        }
    }

    public func existingUsers(_ ids: [UserID]) async throws -> Set<UserID> {
        users.withLock { users in Set(ids.filter { users.byID[$0] != nil && users.byID[$0]?.deletion == nil }) }
    }

    public func revokeToken(_ tokenID: String, expiresAt: Date) async throws {
        users.withLock { users in
            users.revoked[tokenID] = expiresAt
            users.sessions[tokenID] = nil
        }
    }

    public func isTokenRevoked(_ tokenID: String) async throws -> Bool {
        users.withLock { $0.revoked[tokenID] != nil }
    }

    public func block(_ block: Block, at: Date) async throws -> Bool {
        users.withLock { users in
            guard users.blocks[block] == nil else { return false }
            users.blocks[block] = at.millisecondPrecision
            return true
        }
    }

    public func unblock(_ block: Block) async throws -> Bool {
        users.withLock { $0.blocks.removeValue(forKey: block) != nil }
    }

    public func blocks(involving user: UserID) async throws -> [StoredBlock] {
        users.withLock { users in
            users.blocks.filter { $0.key.blocker == user || $0.key.blocked == user }.map { StoredBlock(block: $0.key, at: $0.value) }
                .sorted { ($0.at, $0.block.blocker, $0.block.blocked) > ($1.at, $1.block.blocker, $1.block.blocked) }
        }
    }

    public func blocks(among members: [UserID]) async throws -> Set<Block> {
        let set = Set(members)
        return users.withLock { users in Set(users.blocks.keys.filter { set.contains($0.blocker) && set.contains($0.blocked) }) }
    }

    public func fileReport(_ report: Report) async throws -> (report: Report, created: Bool) {
        var stored = report
        stored.createdAt = stored.createdAt.millisecondPrecision
        return users.withLock { users in
            if let open = users.reports.first(where: {
                $0.report.status == .open && $0.report.reporterId == report.reporterId && ReportRows.target(of: $0.report) == ReportRows.target(of: report)
            }) {
                return (open.report, false)
            }
            users.reports.append((stored, true))
            return (stored, true)
        }
    }

    public func report(_ id: ReportID) async throws -> Report? {
        users.withLock { $0.reports.first { $0.report.id == id }?.report }
    }

    public func reports(status: ReportStatus?, after: ReportID?, limit: Int) async throws -> [Report] {
        users.withLock { users in
            let sorted = users.reports.map(\.report).sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
            let start = after.flatMap { id in sorted.first { $0.id == id } }
            return Array(sorted.filter { report in
                (status == nil || report.status == status) && start.map { (report.createdAt, report.id) > ($0.createdAt, $0.id) } ?? true
            }.prefix(max(0, limit)))
        }
    }

    public func resolveReport(_ id: ReportID, resolution: String?, at: Date) async throws -> Report? {
        users.withLock { users in
            guard let index = users.reports.firstIndex(where: { $0.report.id == id }) else { return nil }
            if users.reports[index].report.status == .open {
                users.reports[index].report.status = .resolved
                users.reports[index].report.resolvedAt = at.millisecondPrecision
                users.reports[index].report.resolution = resolution
            }
            return users.reports[index].report
        }
    }

    public func reportsOwingWebhooks(limit: Int) async throws -> [Report] {
        users.withLock { Array($0.reports.filter(\.owed).map(\.report).sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }.prefix(max(0, limit))) }
    }

    public func reportWebhooksDone(_ id: ReportID) async throws {
        users.withLock { users in
            if let index = users.reports.firstIndex(where: { $0.report.id == id }) { users.reports[index].owed = false }
        }
    }

    public func setSuspended(_ user: UserID, since: Date?) async throws -> Bool {
        users.withLock { users in
            guard users.byID[user] != nil else { return false }
            users.byID[user]?.suspendedAt = since?.millisecondPrecision
            return true
        }
    }

    public func beginDeletion(of user: UserID, erase: Bool, at: Date) async throws -> AccountDeletion? {
        users.withLock { users in
            guard let stored = users.byID[user] else { return nil }
            var deletion = stored.deletion ?? AccountDeletion(userId: user, requestedAt: at, erase: erase)
            if deletion.finishedAt != nil, erase, !deletion.erase { deletion.finishedAt = nil }
            deletion.erase = deletion.erase || erase
            if stored.deletion == nil { users.deletionWebhooksOwed.insert(user) }
            users.byID[user] = StoredUser(
                user: stored.user, passwordHash: stored.passwordHash, passwordChangedAt: stored.passwordChangedAt, suspendedAt: stored.suspendedAt,
                deletion: deletion)
            users.sessions = users.sessions.filter { $0.value.userId != user }
            users.privateMetadata[user] = nil
            users.devices.removeAll { $0.userId == user }
            users.blocks = users.blocks.filter { $0.key.blocker != user && $0.key.blocked != user }
            if let avatar = stored.user.avatar?.id {
                users.avatars.remove(avatar)
            }
            for (id, media) in users.media where media.uploaderId == user && !users.isReferenced(id) {
                users.media[id]?.media.createdAt = Date(timeIntervalSince1970: 0)
            }
            return deletion
        }
    }

    public func finishDeletion(of user: UserID, at: Date) async throws {
        users.withLock { users in
            guard var deletion = users.byID[user]?.deletion, deletion.finishedAt == nil else { return }
            deletion.finishedAt = at.millisecondPrecision
            users.byID[user]?.deletion = deletion
        }
    }

    public func unfinishedDeletions(limit: Int) async throws -> [AccountDeletion] {
        users.withLock { users in
            Array(users.byID.values.compactMap(\.deletion).filter { $0.finishedAt == nil }
                .sorted { ($0.requestedAt, $0.userId) < ($1.requestedAt, $1.userId) }.prefix(max(0, limit)))
        }
    }

    public func deletionsOwingWebhooks(limit: Int) async throws -> [AccountDeletion] {
        users.withLock { users in
            Array(users.deletionWebhooksOwed.compactMap { users.byID[$0]?.deletion }.filter { $0.finishedAt != nil }
                .sorted { ($0.finishedAt ?? $0.requestedAt, $0.userId) < ($1.finishedAt ?? $1.requestedAt, $1.userId) }.prefix(max(0, limit)))
        }
    }

    public func deletionWebhooksDone(_ user: UserID) async throws {
        _ = users.withLock { $0.deletionWebhooksOwed.remove(user) }
    }

    public func openSession(_ session: StoredSession) async throws {
        var stored = session
        stored.createdAt = stored.createdAt.millisecondPrecision
        stored.lastUsedAt = stored.lastUsedAt.millisecondPrecision
        stored.expiresAt = stored.expiresAt.millisecondPrecision
        users.withLock { users in
            users.sessions = users.sessions.filter { $0.value.userId != session.userId || $0.value.expiresAt > stored.createdAt }
            users.sessions[session.tokenId] = stored
        }
    }

    public func session(_ tokenID: String) async throws -> StoredSession? {
        users.withLock { $0.sessions[tokenID] }
    }

    public func sessions(of user: UserID, now: Date, limit: Int) async throws -> [StoredSession] {
        users.withLock { users in
            Array(users.sessions.values.filter { $0.userId == user && $0.expiresAt > now }
                .sorted { ($0.createdAt, $0.tokenId) > ($1.createdAt, $1.tokenId) }.prefix(max(0, limit)))
        }
    }

    public func touchSession(_ tokenID: String, at: Date) async throws {
        users.withLock { users in
            guard let session = users.sessions[tokenID], session.lastUsedAt < at else { return }
            users.sessions[tokenID]?.lastUsedAt = at.millisecondPrecision
        }
    }

    public func changePassword(of user: UserID, from old: String, to new: String, keeping tokenID: String, at: Date) async throws -> [StoredSession]? {
        users.withLock { users in
            guard var stored = users.byID[user], stored.passwordHash == old else { return nil }
            stored.passwordHash = new
            stored.passwordChangedAt = at.millisecondPrecision
            users.byID[user] = stored
            let others = users.sessions.values.filter { $0.userId == user && $0.tokenId != tokenID }.sorted { $0.tokenId < $1.tokenId }
            for session in others {
                users.revoked[session.tokenId] = session.expiresAt
                users.sessions[session.tokenId] = nil
            }
            users.devices.removeAll { $0.userId == user && $0.tokenId != tokenID }
            return others
        }
    }

    public func registerDevice(_ device: StoredDevice, keepingAtMost limit: Int) async throws -> (device: StoredDevice, created: Bool, takenFrom: UserID?) {
        users.withLock { users in
            var stored = device
            var created = true
            var takenFrom: UserID?
            if let index = users.devices.firstIndex(where: { $0.device.platform == device.device.platform && $0.device.token == device.device.token }) {
                let existing = users.devices.remove(at: index)
                if existing.userId == device.userId {
                    stored.device.id = existing.device.id
                    stored.device.createdAt = existing.device.createdAt
                    created = false
                } else {
                    takenFrom = existing.userId
                }
            }
            stored.device.createdAt = stored.device.createdAt.millisecondPrecision
            users.devices.append(stored)
            users.devices.sort { ($0.device.createdAt, $0.device.id) < ($1.device.createdAt, $1.device.id) }
            let mine = users.devices.filter { $0.userId == device.userId }
            let removed = Set(mine.dropLast(max(limit, 1)).map(\.device.id))
            users.devices.removeAll { removed.contains($0.device.id) }
            return (stored, created, takenFrom)
        }
    }

    public func devices(of user: UserID) async throws -> [StoredDevice] {
        users.withLock { $0.devices.filter { $0.userId == user } }
    }

    public func removeDevice(_ id: DeviceID, of user: UserID) async throws -> Bool {
        users.withLock { users in
            guard let index = users.devices.firstIndex(where: { $0.device.id == id && $0.userId == user }) else { return false }
            users.devices.remove(at: index)
            return true
        }
    }

    public func removeDevices(registeredWith tokenID: String) async throws {
        users.withLock { $0.devices.removeAll { $0.tokenId == tokenID } }
    }

    public func recentlyActiveConversations(since: Date, limit: Int) async throws -> [ConversationID] {
        state.withLock { state in
            let recent = state.values.map(\.record).filter { $0.lastActivityAt > since }.sorted { $0.lastActivityAt > $1.lastActivityAt }
            return recent.prefix(max(0, limit)).map(\.id)
        }
    }

    public func recordMedia(_ media: StoredMedia) async throws {
        try users.withLock { users in
            guard users.media[media.media.id] == nil else { throw ChatStoreError(.conflict, "media \(media.media.id) exists") }
            var stored = media
            stored.media.createdAt = media.media.createdAt.millisecondPrecision
            users.media[media.media.id] = stored
        }
    }

    public func media(_ id: MediaID) async throws -> StoredMedia? {
        users.withLock { $0.media[id] }
    }

    @discardableResult
    public func referenceMedia(_ ids: [MediaID], in conversation: ConversationID) async throws -> Set<MediaID> {
        users.withLock { users in
            let found = Set(ids.filter { users.media[$0] != nil })
            for id in found { users.mediaReferences[id, default: []].insert(conversation) }
            return found
        }
    }

    public func removeUnattachedMedia(uploadedBefore cutoff: Date, limit: Int) async throws -> [StoredMedia] {
        users.withLock { users in
            let unattached = users.media.values
                .filter { $0.media.createdAt < cutoff && !users.isReferenced($0.media.id) }
                .sorted { ($0.media.createdAt, $0.media.id) < ($1.media.createdAt, $1.media.id) }
                .prefix(max(0, limit))
            for stored in unattached { users.media[stored.media.id] = nil }
            return Array(unattached)
        }
    }

    public func hasMedia(withSHA256 sha256: String) async throws -> Bool {
        users.withLock { $0.media.values.contains { $0.media.sha256 == sha256 } }
    }

    public func searchMessages(of user: UserID, terms: [SearchText.Term], in conversation: ConversationID?, window: Int, offset: Int, limit: Int) async throws -> [Message] {
        guard !terms.isEmpty else { return [] }
        let found = state.withLock { state in
            state.values.filter { $0.record.member(user) != nil && (conversation == nil || $0.record.id == conversation) }.flatMap { stored in
                stored.messages.compactMap { message -> (Message, Int)? in
                    guard !message.isTombstone else { return nil }
                    let texts = [message.text] + (message.attachments?.compactMap(\.caption) ?? [])
                    let counts = terms.map { term in texts.reduce(0) { $0 + SearchText.matches(of: [term], in: $1).count } }
                    guard counts.allSatisfy({ $0 > 0 }) else { return nil }
                    return (message, counts.reduce(0, +))
                }
            }
        }
        // Of the newest, the most matches first, then the newest: a stand-in for the SQL stores'
        // ranking.
        let newest = found.sorted { ($0.0.sentAt, $0.0.seq) > ($1.0.sentAt, $1.0.seq) }.prefix(max(0, window))
        let ranked = newest.sorted { ($0.1, $0.0.sentAt, $0.0.id) > ($1.1, $1.0.sentAt, $1.0.id) }.map(\.0)
        return Array(ranked.dropFirst(max(0, offset)).prefix(max(0, limit)))
    }

    public func conversationsReferencing(_ id: MediaID) async throws -> [ConversationID] {
        users.withLock { ($0.mediaReferences[id] ?? []).union($0.groupPhotos[id] ?? []).sorted() }
    }

    public func mediaBytes(of user: UserID) async throws -> Int64 {
        users.withLock { $0.media.values.filter { $0.uploaderId == user }.reduce(0) { $0 + $1.media.size } }
    }

    public func conversations(of user: UserID, after cursor: ConversationPageCursor?, limit: Int) async throws -> [ConversationRecord] {
        state.withLock { state in
            let mine = state.values.map(\.record).filter { $0.member(user) != nil }.sorted {
                ($0.lastActivityAt, $0.id) > ($1.lastActivityAt, $1.id)
            }
            let after = mine.filter { record in
                guard let cursor else { return true }
                return (record.lastActivityAt, record.id) < (cursor.lastActivityAt, cursor.id)
            }
            return Array(after.prefix(max(0, limit)))
        }
    }
}
