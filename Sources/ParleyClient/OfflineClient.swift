import Foundation
import GRDB
import Logging
import ParleyModel
import Synchronization

/// A ``ParleyClient`` that works offline, on a ``ClientStore``:
/// - ``send(_:attachments:replyTo:mentions:metadata:to:)`` writes the message to the store's
///   outbox before anything goes on the network; the outbox sends it, in order within its
///   conversation, each message once (its `clientMessageId`), whenever the network allows,
///   across app restarts; a message the server refuses stays in the outbox, failed, and does
///   not hold back the ones after it;
/// - ``start()`` resumes the event stream from the cursor the store kept and applies every event
///   to the store; a cursor too old to replay (`410`) reloads the conversations and pages each
///   from the last seq held;
/// - ``chatList()`` and ``conversation(_:)`` show what the store holds at once (before the
///   network answers), then again after each change.
///
/// The server's order is the only order: every conversation's messages are the server's, by seq,
/// and the outbox's are shown after them until acknowledged. Nothing is merged, so nothing can
/// conflict.
public final class OfflineClient: Sendable {
    public let client: ParleyClient
    public let store: ClientStore
    let logger: Logger
    private let state = Mutex(State())
    private let wakeup = Wakeup()
    private let publishing = Mutex(())

    private struct State {
        var user: UserID?
        var started = false
        var closed = false
        var sync: Task<Void, Never>?
        /// One task per conversation that has messages to send; `again`: look once more before
        /// it ends (an entry was written while it was finishing).
        var senders: [ConversationID: (task: Task<Void, Never>?, again: Bool)] = [:]
        var subscribers: [UUID: Subscriber] = [:]
    }

    private enum Subscriber {
        case list(AsyncStream<[ChatSummary]>.Continuation)
        case conversation(ConversationID, AsyncStream<ConversationSnapshot>.Continuation)
        case events(AsyncStream<ParleyEvent>.Continuation)
    }

    /// How long the outbox waits after a retryable failure: from 0.2 s, doubling, at most 15 s
    /// (``sendNow()`` ends the wait at once, e.g. when the network comes back).
    static let sendBackoff = Backoff(first: .milliseconds(200), max: .seconds(15))
    /// A message page's most, API.md's limit.
    static let pageLimit = 200

    /// `client` must be signed in (a token), or sign in before ``start()``. The user is read
    /// from the client, else from the store (a restart without the network), else asked of the
    /// server when the stream starts.
    public init(client: ParleyClient, store: ClientStore, logger: Logger = Logger(label: "parley.offline")) {
        self.client = client
        self.store = store
        self.logger = logger
    }

    // MARK: Lifecycle

    /// Starts the event stream (resumed from the stored cursor) and the outbox. What the store
    /// holds can be read before, and while offline. `streaming: false` starts the outbox alone
    /// (a tool that only sends).
    public func start(streaming: Bool = true) {
        let begin = state.withLock { state -> Bool in
            guard !state.started, !state.closed else { return false }
            state.started = true
            return true
        }
        guard begin else { return }
        let sync = Task {
            // The store is made this user's before anything of its outbox is sent: another
            // user's messages must never go out under this user's token.
            guard let user = await self.resolveUser(asking: streaming), self.bind(to: user) else {
                if !streaming { self.kickOutbox() }
                return
            }
            self.kickOutbox()
            if streaming { await self.synchronize(user: user) }
        }
        if state.withLock({ state in state.sync = sync; return state.closed }) { sync.cancel() }
    }

    /// Stops the stream and the outbox (what waits stays in the store for the next start) and
    /// ends every observation. It does not sign out or shut the ``ParleyClient`` down.
    public func close() async {
        let (sync, senders, subscribers) = state.withLock { state in
            state.closed = true
            defer { state.subscribers = [:] }
            return (state.sync, state.senders.values.compactMap(\.task), Array(state.subscribers.values))
        }
        sync?.cancel()
        for task in senders { task.cancel() }
        await sync?.value
        for task in senders { await task.value }
        for subscriber in subscribers {
            switch subscriber {
            case .list(let continuation): continuation.finish()
            case .conversation(_, let continuation): continuation.finish()
            case .events(let continuation): continuation.finish()
            }
        }
    }

    /// Ends the outbox's wait after a failure: call it when the platform says the network is back
    /// (`NWPathMonitor`), or the app comes to the foreground. A stream that reconnects does it too.
    public func sendNow() {
        wakeup.wakeAll()
    }

    // MARK: Sending

    /// Writes a message to the outbox, and returns once it is in the store (its attachments
    /// copied into the store's folder): from then on it is sent, whenever the network allows,
    /// even if the app is killed first. Observe it with ``conversation(_:)``; once acknowledged it
    /// leaves the outbox and is among the conversation's messages.
    @discardableResult
    public func send(
        _ text: String, attachments: [NewOutboxAttachment] = [], replyTo: Int64? = nil, mentions: [UserID]? = nil, metadata: Metadata? = nil,
        to conversation: ConversationID, clientMessageId: String = ClientMessageID.make()
    ) throws -> OutboxEntry {
        var kept: [OutboxAttachment] = []
        do {
            for (index, attachment) in attachments.enumerated() {
                kept.append(try keep(attachment, as: "\(clientMessageId)-\(index)"))
            }
            let entry = OutboxEntry(
                clientMessageId: clientMessageId, conversationId: conversation, text: text, attachments: kept, replyTo: replyTo, mentions: mentions,
                metadata: metadata, createdAt: Date())
            try store.database.write { db in try ClientStore.put(db, entry) }
            notify([conversation])
            kickOutbox()
            return entry
        } catch {
            removeCopies(kept)
            throw error
        }
    }

    /// Sends a failed message again (after the app fixed what was refused, e.g. a member added back).
    public func retry(_ clientMessageId: String) throws {
        guard let conversation = try changeEntry(clientMessageId, { $0.failure = nil }) else { return }
        notify([conversation])
        kickOutbox()
    }

    /// Removes a message from the outbox without sending it (a failed one, or one the user
    /// cancelled). One already on its way may still be stored by the server.
    public func discard(_ clientMessageId: String) throws {
        let entry = try store.database.write { db -> OutboxEntry? in
            let entry = try ClientStore.outboxEntry(db, clientMessageId)
            try ClientStore.removeFromOutbox(db, clientMessageId)
            return entry
        }
        guard let entry else { return }
        removeCopies(entry.attachments)
        notify([entry.conversationId])
    }

    /// Changes an entry still in the outbox; answers its conversation (nil: it is not there).
    func changeEntry(_ clientMessageId: String, _ change: @Sendable (inout OutboxEntry) -> Void) throws -> ConversationID? {
        try store.database.write { db in
            guard var entry = try ClientStore.outboxEntry(db, clientMessageId) else { return nil }
            change(&entry)
            try ClientStore.put(db, entry)
            return entry.conversationId
        }
    }

    /// The outbox's own copy of a file (the app's may be temporary); in memory, the file itself.
    private func keep(_ attachment: NewOutboxAttachment, as name: String) throws -> OutboxAttachment {
        var contentType = attachment.contentType
        if contentType == nil {
            let head = try FileHandle(forReadingFrom: attachment.file).read(upToCount: MediaSniffing.headLength) ?? Data()
            contentType = MediaSniffing.contentType(of: Array(head))
        }
        guard let contentType else {
            throw ParleyError(status: 0, code: "unsupported_media_type", message: "\(attachment.file.lastPathComponent) is not a kind of file the server takes", retryable: false)
        }
        var file = attachment.file
        if let folder = store.filesDirectory {
            file = folder.appendingPathComponent(name + (attachment.file.pathExtension.isEmpty ? "" : "." + attachment.file.pathExtension))
            try? FileManager.default.removeItem(at: file)
            try FileManager.default.copyItem(at: attachment.file, to: file)
        }
        return OutboxAttachment(file: file, contentType: contentType, caption: attachment.caption, mediaId: nil)
    }

    /// Removes the outbox's copies (never a file of the app's).
    private func removeCopies(_ attachments: [OutboxAttachment]) {
        guard let folder = store.filesDirectory?.standardizedFileURL.path else { return }
        for attachment in attachments where attachment.file.standardizedFileURL.deletingLastPathComponent().path == folder {
            try? FileManager.default.removeItem(at: attachment.file)
        }
    }

    /// Starts a sender for each conversation with messages waiting (one already running looks again).
    private func kickOutbox() {
        guard state.withLock({ $0.started && !$0.closed }) else { return }
        let conversations: [ConversationID]
        do {
            conversations = try store.database.read { db in try ClientStore.conversationsWithPending(db) }
        } catch {
            logger.error("the outbox could not be read", metadata: ["error": "\(error)"])
            return
        }
        for conversation in conversations {
            let start = state.withLock { state -> Bool in
                guard !state.closed else { return false }
                if state.senders[conversation] != nil {
                    state.senders[conversation]?.again = true
                    return false
                }
                state.senders[conversation] = (nil, false)
                return true
            }
            guard start else { continue }
            let task = Task { await self.sendAll(in: conversation) }
            let closed = state.withLock { state in
                if state.senders[conversation] != nil { state.senders[conversation]?.task = task }
                return state.closed
            }
            if closed { task.cancel() }
        }
    }

    /// Sends the conversation's waiting messages one at a time, oldest first, until none waits.
    private func sendAll(in conversation: ConversationID) async {
        var failures = 0
        while !Task.isCancelled {
            let entry: OutboxEntry?
            do {
                entry = try await store.database.read { db in try ClientStore.nextToSend(db, in: conversation) }
            } catch {
                logger.error("the outbox could not be read", metadata: ["error": "\(error)"])
                failures += 1
                await wakeup.pause(for: Self.sendBackoff.delay(afterFailures: failures))
                continue
            }
            guard let entry else {
                let done = state.withLock { state -> Bool in
                    if state.senders[conversation]?.again == true {
                        state.senders[conversation]?.again = false
                        return false
                    }
                    state.senders[conversation] = nil
                    return true
                }
                if done { return }
                continue
            }
            do {
                try await deliver(entry)
                failures = 0
            } catch let error as ParleyError where Self.isPermanent(error) {
                logger.notice("the server refused a message; it stays in the outbox, failed", metadata: ["clientMessageId": "\(entry.clientMessageId)", "error": "\(error)"])
                do {
                    _ = try changeEntry(entry.clientMessageId) { $0.failure = OutboxEntry.Failure(status: error.status, code: error.code, message: error.message) }
                    notify([conversation])
                } catch {
                    logger.error("a refused message could not be marked failed", metadata: ["error": "\(error)"])
                }
            } catch is CancellationError {
                return
            } catch {
                failures += 1
                let error = error as? ParleyError
                let wait = Self.sendBackoff.delay(afterFailures: failures, atLeast: error?.retryAfter)
                logger.debug("a send failed; trying again with the same clientMessageId", metadata: ["error": "\(String(describing: error))", "wait": "\(wait)"])
                await wakeup.pause(for: wait)
            }
        }
    }

    /// A refusal that sending again cannot change: `400`, `403`, `404`, `409`, `413`, `415`,
    /// `422`, or a file that cannot be read. A retryable error, `401` (the app signs in again;
    /// the message waits), `408`, `429` and the network's failures are tried again.
    static func isPermanent(_ error: ParleyError) -> Bool {
        if error.retryable { return false }
        switch error.status {
        case 0: return error.code != "unreachable"
        case 401, 408, 429: return false
        case 400..<500: return true
        default: return false
        }
    }

    /// Uploads what is not uploaded yet (keeping each upload's ID), sends, and on the
    /// acknowledgement moves the message from the outbox to the conversation's messages.
    private func deliver(_ entry: OutboxEntry) async throws {
        var entry = entry
        for index in entry.attachments.indices where entry.attachments[index].mediaId == nil {
            let attachment = entry.attachments[index]
            let media = try await client.upload(file: attachment.file, contentType: attachment.contentType)
            entry.attachments[index].mediaId = media.id
            let uploaded = entry.attachments
            // Kept at once: a restart sends the upload it has instead of uploading again.
            guard try changeEntry(entry.clientMessageId, { $0.attachments = uploaded }) != nil else { return }  // discarded meanwhile
        }
        try Task.checkCancellation()
        let attachments = entry.attachments.compactMap { attachment in attachment.mediaId.map { API.NewAttachment(mediaId: $0, caption: attachment.caption) } }
        let message = try await client.post(
            API.NewMessage(
                clientMessageId: entry.clientMessageId, text: entry.text, attachments: attachments.isEmpty ? nil : attachments, replyTo: entry.replyTo,
                mentions: entry.mentions, metadata: entry.metadata),
            to: entry.conversationId)
        let user = client.currentUser?.id ?? state.withLock { $0.user }
        let sent = entry
        try await store.database.write { db in
            try ClientStore.removeFromOutbox(db, sent.clientMessageId)
            try self.apply(db, message: message, user: user)
        }
        removeCopies(entry.attachments)
        notify([entry.conversationId])
    }

    // MARK: Observing

    /// The chat list as the store holds it, newest activity first: at once, then after every
    /// change (the newest list only, if the reader is slower than the changes).
    public func chatList() -> AsyncStream<[ChatSummary]> {
        let (stream, continuation) = AsyncStream.makeStream(of: [ChatSummary].self, bufferingPolicy: .bufferingNewest(1))
        subscribe(.list(continuation), continuation)
        return stream
    }

    /// One conversation as the store holds it: at once, then after every change to it.
    public func conversation(_ id: ConversationID) -> AsyncStream<ConversationSnapshot> {
        let (stream, continuation) = AsyncStream.makeStream(of: ConversationSnapshot.self, bufferingPolicy: .bufferingNewest(1))
        subscribe(.conversation(id, continuation), continuation)
        return stream
    }

    /// Every event of the stream once the store applied it, typing and presence included
    /// (which the store does not keep). Ends when the stream does (`401`: signed out).
    public func events() -> AsyncStream<ParleyEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: ParleyEvent.self, bufferingPolicy: .bufferingNewest(1_000))
        subscribe(.events(continuation), continuation)
        return stream
    }

    private func subscribe<Element>(_ subscriber: Subscriber, _ continuation: AsyncStream<Element>.Continuation) {
        let id = UUID()
        let added = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.subscribers[id] = subscriber
            return true
        }
        guard added else {
            continuation.finish()
            return
        }
        continuation.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) } }
        publish(to: [subscriber], changed: nil)
    }

    /// The chat list as the store holds it now.
    public func chatSummaries() throws -> [ChatSummary] {
        try store.database.read { db in
            let counts = try ClientStore.outboxCounts(db)
            return try ClientStore.conversations(db).map { conversation in
                ChatSummary(conversation: conversation, waiting: counts[conversation.id]?.waiting ?? 0, failed: counts[conversation.id]?.failed ?? 0)
            }
        }
    }

    /// One conversation as the store holds it now.
    public func snapshot(of id: ConversationID) throws -> ConversationSnapshot {
        try store.database.read { db in
            ConversationSnapshot(conversation: try ClientStore.conversation(db, id), messages: try ClientStore.messages(db, id), outbox: try ClientStore.outbox(db, id))
        }
    }

    /// Tells the observers of the changed conversations, and the chat list's.
    private func notify(_ changed: Set<ConversationID>) {
        guard !changed.isEmpty else { return }
        publish(to: state.withLock { Array($0.subscribers.values) }, changed: changed)
    }

    private func publish(to subscribers: [Subscriber], changed: Set<ConversationID>?) {
        // One publication at a time, each reading the store as it is then: a value read earlier
        // is never yielded after a newer one (the streams keep only the newest).
        publishing.withLock { _ in publish(reading: subscribers, changed: changed) }
    }

    private func publish(reading subscribers: [Subscriber], changed: Set<ConversationID>?) {
        do {
            var list: [ChatSummary]?
            for subscriber in subscribers {
                switch subscriber {
                case .list(let continuation):
                    if list == nil { list = try chatSummaries() }
                    continuation.yield(list ?? [])
                case .conversation(let id, let continuation):
                    if changed?.contains(id) ?? true { continuation.yield(try snapshot(of: id)) }
                case .events:
                    break
                }
            }
        } catch {
            logger.error("the store could not be read for its observers", metadata: ["error": "\(error)"])
        }
    }

    private func publish(_ event: ParleyEvent) {
        for case .events(let continuation) in state.withLock({ Array($0.subscribers.values) }) { continuation.yield(event) }
    }
}

// MARK: Synchronizing

extension OfflineClient {
    /// Makes the store `user`'s (another user's data removed); false if the store failed.
    private func bind(to user: UserID) -> Bool {
        do {
            if try store.bind(to: user) {
                logger.notice("the store held another user's data; it was removed", metadata: ["user": "\(user)"])
            }
            return true
        } catch {
            logger.error("the store could not be opened for this user", metadata: ["error": "\(error)"])
            return false
        }
    }

    /// The event stream, applied to the store, until closed or signed out; started again (from
    /// the stored cursor) after any other failure.
    private func synchronize(user: UserID) async {
        var failures = 0
        while !Task.isCancelled {
            do {
                try await follow(user: user)
                break
            } catch is CancellationError {
                break
            } catch let error as ParleyError where error.status == 401 {
                logger.notice("the stream was refused (401): sign in again and start a new OfflineClient", metadata: ["error": "\(error)"])
                break
            } catch {
                failures += 1
                let wait = Self.sendBackoff.delay(afterFailures: failures)
                logger.error("synchronizing failed; starting again from the stored cursor", metadata: ["error": "\(error)", "wait": "\(wait)"])
                try? await Task.sleep(for: wait)
            }
        }
        for case .events(let continuation) in state.withLock({ Array($0.subscribers.values) }) { continuation.finish() }
    }

    /// One run of the stream from the stored cursor.
    private func follow(user: UserID) async throws {
        let cursor = try store.account()?.cursor
        // No cursor: the store was never synchronized, so it reloads once the stream is open
        // (opened first, so that nothing committed between the reload and the stream is missed).
        var reloadOnReady = cursor == nil
        for try await (event, eventCursor) in client.cursoredEvents(cursor: cursor) {
            switch event {
            case .cursorExpired:
                logger.notice("the stored cursor was too old to replay; reloading conversations")
                reloadOnReady = true
            case .ready(let ready):
                if reloadOnReady {
                    try await reload(user: user)
                    reloadOnReady = false
                }
                try await store.database.write { db in try ClientStore.setCursor(db, ready) }
                // The network is back: what waits in the outbox goes now.
                kickOutbox()
                wakeup.wakeAll()
            case .typing, .presence:
                break
            default:
                do {
                    try await apply(event, cursor: eventCursor, user: user)
                } catch let error as ParleyError where Self.isPermanent(error) {
                    // What the event needs cannot be read (a conversation the user just left):
                    // it is passed over; the rest of the stream is not held back by it.
                    logger.warning("an event was passed over: what it needs was refused", metadata: ["error": "\(error)"])
                    if let eventCursor { try await store.database.write { db in try ClientStore.setCursor(db, eventCursor) } }
                }
            }
            publish(event)
        }
    }

    /// The signed-in user: the client's, the store's, or (`asking`) the server's, asked until it
    /// answers.
    private func resolveUser(asking: Bool) async -> UserID? {
        let known = client.currentUser?.id ?? (try? store.account()?.user)
        if let known {
            state.withLock { $0.user = known }
            return known
        }
        guard asking else { return nil }
        var failures = 0
        while !Task.isCancelled {
            do {
                let user = try await client.me().id
                state.withLock { $0.user = user }
                return user
            } catch let error as ParleyError where error.status == 401 {
                logger.notice("not signed in: the stream does not start", metadata: ["error": "\(error)"])
                return nil
            } catch {
                failures += 1
                try? await Task.sleep(for: Self.sendBackoff.delay(afterFailures: failures))
            }
        }
        return nil
    }

    /// Applies one event and keeps the cursor after it in the same transaction, fetching first
    /// what it needs (a conversation not held, messages missed): a crash replays it from the
    /// cursor before.
    private func apply(_ event: ParleyEvent, cursor: String?, user: UserID) async throws {
        if case .message(let message) = event {
            try await fetchMissing(before: message, user: user)
        }
        let changed: Set<ConversationID> = try await store.database.write { db in
            if let cursor { try ClientStore.setCursor(db, cursor) }
            switch event {
            case .message(let message):
                try self.apply(db, message: message, user: user)
                return [message.conversationId]
            case .receipt(let receipt):
                guard var conversation = try ClientStore.conversation(db, receipt.conversationId) else { return [] }
                if let index = conversation.members.firstIndex(where: { $0.userId == receipt.userId }) {
                    conversation.members[index].deliveredSeq = max(conversation.members[index].deliveredSeq, receipt.deliveredSeq)
                    conversation.members[index].readSeq = max(conversation.members[index].readSeq, receipt.readSeq)
                }
                conversation.unreadCount = Self.unread(conversation, for: user)
                try ClientStore.put(db, conversation)
                return [receipt.conversationId]
            case .conversation(let change):
                var conversation = change.conversation
                guard conversation.members.contains(where: { $0.userId == user }) else {
                    try ClientStore.removeConversation(db, conversation.id)
                    return [conversation.id]
                }
                if conversation.lastMessage == nil { conversation.lastMessage = try ClientStore.message(db, conversation.id, conversation.lastSeq) }
                try ClientStore.put(db, conversation)
                return [conversation.id]
            case .user(let changed):
                try ClientStore.put(db, changed)
                return []
            case .annotation(let annotation):
                guard var message = try ClientStore.message(db, annotation.conversationId, annotation.seq) else { return [] }
                message.annotations = (message.annotations ?? [:]).merging([annotation.key: annotation.value]) { $1 }
                try ClientStore.putMessage(db, message)
                return [annotation.conversationId]
            case .erased(let tombstone):
                try self.replace(db, tombstone.conversationId, seq: tombstone.seq) { message in
                    guard message.seq != tombstone.seq else { return tombstone }
                    var reply = message
                    reply.replyTo = MessageQuote(of: tombstone)
                    return reply
                }
                return [tombstone.conversationId]
            case .changed(let change):
                try self.replace(db, change.conversationId, seq: change.seq) { change.applied(to: $0, as: user) }
                if var conversation = try ClientStore.conversation(db, change.conversationId) {
                    conversation.pinned = change.applied(toPinned: conversation.pinned)
                    if let last = conversation.lastMessage { conversation.lastMessage = change.applied(to: last, as: user) }
                    try ClientStore.put(db, conversation)
                }
                return [change.conversationId]
            case .typing, .presence, .ready, .cursorExpired:
                return []
            }
        }
        notify(changed)
    }

    /// A message's place in the store: the message, its conversation's last seq and message,
    /// the sender's own watermarks, the unread count; an outbox entry it answers is done.
    private func apply(_ db: Database, message: Message, user: UserID?) throws {
        try store.put(db, message)
        guard var conversation = try ClientStore.conversation(db, message.conversationId) else { return }
        if message.seq >= conversation.lastSeq {
            conversation.lastSeq = message.seq
            conversation.lastMessage = message
        }
        if message.senderId == user {
            // Sent by this user (here, or on another device): an outbox entry of it is done.
            try ClientStore.removeFromOutbox(db, message.clientMessageId)
            if let index = conversation.members.firstIndex(where: { $0.userId == user }) {
                conversation.members[index].readSeq = max(conversation.members[index].readSeq, message.seq)
                conversation.members[index].deliveredSeq = max(conversation.members[index].deliveredSeq, message.seq)
            }
        }
        if let user { conversation.unreadCount = Self.unread(conversation, for: user) }
        try ClientStore.put(db, conversation)
    }

    /// A held message, and the held replies that quote it, as `change` leaves them (a change
    /// of message `seq` brings a reply's quote of it up to date, ``MessageChange/applied(to:as:)``).
    private func replace(_ db: Database, _ conversation: ConversationID, seq: Int64, _ change: (Message) -> Message) throws {
        let replies = try String.fetchAll(
            db, sql: "SELECT body FROM message WHERE conversationId = ? AND json_extract(body, '$.replyTo.seq') = ?", arguments: [conversation.rawValue, seq])
        let affected = try (ClientStore.message(db, conversation, seq).map { [$0] } ?? []) + replies.map { try ClientStore.decode(Message.self, $0) }
        for message in affected {
            let changed = change(message)
            if changed != message { try ClientStore.putMessage(db, changed) }
        }
    }

    static func unread(_ conversation: API.Conversation, for user: UserID) -> Int64 {
        max(0, conversation.lastSeq - (conversation.members.first { $0.userId == user }?.readSeq ?? conversation.lastSeq))
    }

    /// Before a message is applied: its conversation when not held, and the messages between the
    /// last held and it (never any on a stream that resumes; a conversation joined meanwhile).
    private func fetchMissing(before message: Message, user: UserID) async throws {
        let (held, range) = try await store.database.read { db in
            (try ClientStore.conversation(db, message.conversationId), try ClientStore.heldRange(db, message.conversationId))
        }
        if held == nil {
            let conversation = try await untilAnswered { try await self.client.conversation(message.conversationId) }
            try await store.database.write { db in try ClientStore.put(db, conversation) }
            try await fetchProfiles(of: conversation.members.map(\.userId))
        }
        let after = range?.upperBound ?? max(0, message.seq - 1 - Int64(store.recentMessages))
        if after < message.seq - 1 {
            try await page(message.conversationId, after: after, through: message.seq - 1)
        }
    }

    /// Reloads every conversation (those the user left are removed) and pages each from the
    /// last seq held; the messages held are read again too (a cursor too old to replay missed
    /// their edits).
    private func reload(user: UserID) async throws {
        var conversations: [API.Conversation] = []
        var next: String?
        repeat {
            let page = try await untilAnswered { [next] in try await self.client.conversations(limit: 100, cursor: next) }
            conversations += page.conversations
            next = page.next
        } while next != nil
        let listed = Set(conversations.map(\.id))
        let reloaded = conversations
        let ranges = try await store.database.write { db -> [ConversationID: ClosedRange<Int64>] in
            for gone in try ClientStore.conversations(db) where !listed.contains(gone.id) { try ClientStore.removeConversation(db, gone.id) }
            var ranges: [ConversationID: ClosedRange<Int64>] = [:]
            for conversation in reloaded {
                try ClientStore.put(db, conversation)
                ranges[conversation.id] = try ClientStore.heldRange(db, conversation.id)
            }
            return ranges
        }
        notify(Set(conversations.map(\.id)))
        for conversation in conversations {
            // From the lowest held (read again), within the latest `recentMessages`.
            let newest = max(0, conversation.lastSeq - Int64(store.recentMessages))
            let after = max(newest, (ranges[conversation.id]?.lowerBound).map { $0 - 1 } ?? newest)
            try await page(conversation.id, after: after, through: conversation.lastSeq, replacing: true)
        }
        try await fetchProfiles(of: Array(Set(conversations.flatMap { $0.members.map(\.userId) })))
        logger.info("reloaded the conversations", metadata: ["conversations": "\(conversations.count)"])
    }

    /// Fetches the messages `after < seq <= through` into the store, a page at a time;
    /// `replacing`: the store's messages at or below `after` are removed (the store holds one
    /// run of seqs).
    private func page(_ conversation: ConversationID, after: Int64, through: Int64, replacing: Bool = false) async throws {
        var last = after
        var held = 0
        while last < through {
            let from = last
            let page = try await untilAnswered { try await self.client.messages(in: conversation, after: from, limit: Self.pageLimit) }
            guard let end = page.last?.seq else { break }
            let first = held == 0
            try await store.database.write { db in
                for message in page { try ClientStore.putMessage(db, message) }
                if replacing, first {
                    try db.execute(sql: "DELETE FROM message WHERE conversationId = ? AND seq <= ?", arguments: [conversation.rawValue, after])
                }
            }
            held += page.count
            last = end
        }
        if held > 0 {
            let user = state.withLock { $0.user }
            try await store.database.write { db in
                if let newest = try ClientStore.heldRange(db, conversation)?.upperBound, let message = try ClientStore.message(db, conversation, newest) {
                    try self.apply(db, message: message, user: user)
                }
            }
            notify([conversation])
        }
    }

    /// A read the stream's application waits for: tried again after a retryable failure until it
    /// answers (or the client is closed).
    private func untilAnswered<Result>(_ read: () async throws -> Result) async throws -> Result {
        try await client.retrying("a read for the store", within: nil, read)
    }

    /// The profiles not held of the given users, 100 a request.
    private func fetchProfiles(of users: [UserID]) async throws {
        let missing = try await store.database.read { db in
            try users.filter { try String.fetchOne(db, sql: "SELECT 1 FROM user WHERE id = ?", arguments: [$0.rawValue]) == nil }
        }
        for start in stride(from: 0, to: missing.count, by: 100) {
            let batch = Array(missing[start..<min(missing.count, start + 100)])
            let found = try await untilAnswered { try await self.client.users(batch) }
            try await store.database.write { db in for user in found { try ClientStore.put(db, user) } }
        }
    }
}

/// Wakes every task waiting in ``pause(for:)`` at once.
final class Wakeup: Sendable {
    private let waiters = Mutex<[UUID: CheckedContinuation<Void, Never>]>([:])

    func wakeAll() {
        for waiter in waiters.withLock({ waiters in defer { waiters = [:] }; return Array(waiters.values) }) { waiter.resume() }
    }

    /// Returns after `duration`, or at ``wakeAll()``, or when the task is cancelled.
    func pause(for duration: Duration) async {
        let id = UUID()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: duration) }
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        let now = self.waiters.withLock { waiters -> Bool in
                            if Task.isCancelled { return true }
                            waiters[id] = continuation
                            return false
                        }
                        if now { continuation.resume() }
                    }
                } onCancel: {
                    self.waiters.withLock { $0.removeValue(forKey: id) }?.resume()
                }
            }
            await group.next()
            group.cancelAll()
        }
    }
}
