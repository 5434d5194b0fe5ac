import Crypto
import Foundation
import ParleyModel

/// Something a conversation's owner committed that webhook endpoints may be told of.
public enum WebhookEvent: Sendable, Hashable {
    case created(ConversationRecord)
    case message(Message)
    /// `users` joined; `record` is the conversation after.
    case membersAdded([UserID], ConversationRecord, at: Date)
    /// `user` left or was removed; `record` is the conversation after.
    case memberRemoved(UserID, ConversationRecord, at: Date)
    /// A group was renamed or its photo changed.
    case updated(ConversationRecord, at: Date)
    /// A member's watermarks moved: `receipt.read` when `readSeq` did, else `receipt.delivered`.
    case receipt(ReceiptEvent, read: Bool)
    /// A message was erased; carries its tombstone.
    case erased(Erasure)
    /// A message was edited, deleted for everyone or reacted to.
    case changed(MessageChange)

    public var type: WebhookEventType {
        switch self {
        case .created: .conversationCreated
        case .message: .messageCreated
        case .membersAdded: .memberAdded
        case .memberRemoved: .memberRemoved
        case .updated: .conversationUpdated
        case .receipt(_, let read): read ? .receiptRead : .receiptDelivered
        case .erased: .messageErased
        case .changed(let change): WebhookEventType(change.kind)
        }
    }

    /// The delivery's ID (`evt_` and 22 base64url characters): a digest of the fact it reports,
    /// so every attempt, by this owner or one that takes the conversation over, carries the same
    /// one. A message is its seq, a receipt its watermarks (both only move forward); a change of
    /// members or name is also its place among the changes told (`change`, ``WebhookTold/changes``),
    /// since the same state comes back: "remove X, add X, remove X" are three IDs, not two.
    public func deliveryID(in conversation: ConversationID, change: Int) -> String {
        let fact: String
        switch self {
        case .created: fact = ""
        case .message(let message): fact = "\(message.seq)"
        case .membersAdded(let users, let record, _): fact = "\(users.map(\.rawValue).sorted())\(Self.memberList(record)) #\(change)"
        case .memberRemoved(let user, let record, _): fact = "\(user.rawValue)\(Self.memberList(record)) #\(change)"
        case .updated(let record, _):
            fact = "\(record.name ?? "")\(record.photo.map { " photo \($0.id.rawValue)" } ?? "")\(WebhookTold.fieldsDigest(of: record).map { " fields \($0)" } ?? "")"
                + "\(Self.memberList(record)) #\(change)"
        case .receipt(let receipt, _): fact = "\(receipt.userId.rawValue) \(receipt.deliveredSeq) \(receipt.readSeq)"
        case .erased(let erasure): fact = "\(erasure.message.seq)"
        case .changed(let change): fact = "\(change.changeSeq)"
        }
        let digest = SHA256.hash(data: Array("\(type.rawValue)\n\(conversation.rawValue)\n\(fact)".utf8))
        return "evt_" + Data(digest.prefix(16)).base64URLEncodedString
    }

    private static func memberList(_ record: ConversationRecord) -> String {
        "\(record.members.map(\.userId.rawValue).sorted())"
    }

    /// The JSON body: `{"type", "timestamp", "data"}`, `timestamp` being when the fact was
    /// committed (`now` for what a catch-up found changed without saying when).
    public func body(in conversation: ConversationID, now: Date) -> [UInt8] {
        let encoder = Self.encoder
        let data: Data?
        switch self {
        case .created(let record):
            data = try? encoder.encode(Envelope(type: type, timestamp: record.createdAt, data: ConversationData(conversation: WebhookConversation(record))))
        case .message(let message):
            data = try? encoder.encode(Envelope(type: type, timestamp: message.sentAt, data: MessageData(conversationId: conversation, message: message)))
        case .membersAdded(let users, let record, let at):
            data = try? encoder.encode(Envelope(type: type, timestamp: at, data: ConversationData(conversation: WebhookConversation(record), userIds: users)))
        case .memberRemoved(let user, let record, let at):
            data = try? encoder.encode(Envelope(type: type, timestamp: at, data: ConversationData(conversation: WebhookConversation(record), userIds: [user])))
        case .updated(let record, let at):
            data = try? encoder.encode(Envelope(type: type, timestamp: at, data: ConversationData(conversation: WebhookConversation(record))))
        case .receipt(let receipt, _):
            let body = API.ReceiptEvent(conversationId: receipt.conversationId, userId: receipt.userId, deliveredSeq: receipt.deliveredSeq, readSeq: receipt.readSeq)
            data = try? encoder.encode(Envelope(type: type, timestamp: receipt.at, data: body))
        case .erased(let erasure):
            data = try? encoder.encode(Envelope(type: type, timestamp: erasure.at, data: MessageData(conversationId: conversation, message: erasure.message)))
        case .changed(let change):
            data = try? encoder.encode(Envelope(type: type, timestamp: change.at, data: API.ChangeEvent(change)))
        }
        // Encoding these types cannot fail; the fallback still says what happened.
        return data.map(Array.init) ?? Array("{\"type\":\"\(type.rawValue)\",\"timestamp\":\"\(API.timestamp(now))\",\"data\":{}}".utf8)
    }

    /// One for every delivery: encoding keeps no state in the encoder.
    private static let encoder = API.makeEncoder()

    private struct Envelope<Payload: Encodable>: Encodable {
        var type: WebhookEventType
        var timestamp: Date
        var data: Payload
    }

    private struct MessageData: Encodable {
        var conversationId: ConversationID
        var message: Message
    }

    private struct ConversationData: Encodable {
        var conversation: WebhookConversation
        var userIds: [UserID]?
    }
}

/// What one endpoint has been told of one conversation: enough to work out, from the
/// conversation as it is, what it has not been told yet. This is the endpoint's cursor, stored
/// as JSON (``ChatStore/saveWebhookCursor(_:in:epoch:)``).
public struct WebhookTold: Codable, Sendable, Hashable {
    /// The last message told.
    public var seq: Int64
    /// The last change to a message told (``MessageChange/changeSeq``).
    public var changeSeq: Int64 = 0
    public var name: String?
    /// The group's photo told of.
    public var photo: MediaID?
    /// A digest of the apps' fields told of, the conversation's and its members' (``fieldsDigest(of:)``);
    /// nil for none.
    public var fields: String?
    /// The members told of, with the watermarks told.
    public var members: [Member]

    /// How many changes of members, name or photo were told (what a delivery ID counts them by).
    public var changes = 0

    public struct Member: Codable, Sendable, Hashable {
        public var userId: UserID
        public var deliveredSeq: Int64
        public var readSeq: Int64
    }

    /// The conversation as it is: nothing about it is owed.
    public init(_ record: ConversationRecord) {
        self.seq = record.lastSeq
        self.changeSeq = record.lastChangeSeq
        self.name = record.name
        self.photo = record.photo?.id
        self.fields = Self.fieldsDigest(of: record)
        self.members = record.members.map { Member(userId: $0.userId, deliveredSeq: $0.deliveredSeq, readSeq: $0.readSeq) }
    }

    /// What telling an endpoint that the conversation was created tells it: its first name and
    /// members, none of its messages.
    init(created record: ConversationRecord) {
        self.init(record)
        seq = 0
        changeSeq = 0
        for index in members.indices { (members[index].deliveredSeq, members[index].readSeq) = (0, 0) }
    }

    private enum CodingKeys: String, CodingKey {
        case seq, changeSeq, name, photo, fields, members, changes
    }

    /// What the apps' fields of a conversation and its members are, in 32 hex digits: a cursor
    /// holds this, not fields of up to 4 KiB per member. Nil when there are none.
    static func fieldsDigest(of record: ConversationRecord) -> String? {
        let members = record.members.filter { $0.metadata != nil }.sorted { $0.userId < $1.userId }
        guard record.metadata != nil || !members.isEmpty else { return nil }
        var text = record.metadata?.json ?? ""
        for member in members { text += "\n\(member.userId.rawValue)=\(member.metadata?.json ?? "")" }
        return SHA256.hash(data: Array(text.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined()
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        seq = try container.decode(Int64.self, forKey: .seq)
        // Cursors stored before messages could change told none.
        changeSeq = try container.decodeIfPresent(Int64.self, forKey: .changeSeq) ?? 0
        name = try container.decodeIfPresent(String.self, forKey: .name)
        photo = try container.decodeIfPresent(MediaID.self, forKey: .photo)
        fields = try container.decodeIfPresent(String.self, forKey: .fields)
        members = try container.decode([Member].self, forKey: .members)
        // Cursors stored before changes were counted count from 0.
        changes = try container.decodeIfPresent(Int.self, forKey: .changes) ?? 0
    }

    /// Moves what was told by `event`; a change of members, name or photo that changed them counts.
    mutating func apply(_ event: WebhookEvent) {
        let before = (name, photo, fields, members.map(\.userId))
        defer {
            if name != before.0 || photo != before.1 || fields != before.2 || members.map(\.userId) != before.3 { changes += 1 }
        }
        switch event {
        case .created(let record):
            self = WebhookTold(created: record)
        case .message(let message):
            seq = max(seq, message.seq)
            // The sender has read their own message (``ConversationState/committed(_:)``).
            if let index = members.firstIndex(where: { $0.userId == message.senderId }) {
                members[index].deliveredSeq = max(members[index].deliveredSeq, message.seq)
                members[index].readSeq = max(members[index].readSeq, message.seq)
            }
        case .membersAdded(let users, let record, _):
            for user in users where !members.contains(where: { $0.userId == user }) {
                let member = record.member(user)
                members.append(Member(userId: user, deliveredSeq: member?.deliveredSeq ?? 0, readSeq: member?.readSeq ?? 0))
            }
            fields = Self.fieldsDigest(of: record)
        case .memberRemoved(let user, let record, _):
            members.removeAll { $0.userId == user }
            fields = Self.fieldsDigest(of: record)
        case .updated(let record, _):
            name = record.name
            photo = record.photo?.id
            fields = Self.fieldsDigest(of: record)
        case .receipt(let receipt, _):
            guard let index = members.firstIndex(where: { $0.userId == receipt.userId }) else { return }
            members[index].deliveredSeq = max(members[index].deliveredSeq, receipt.deliveredSeq)
            members[index].readSeq = max(members[index].readSeq, receipt.readSeq)
        case .erased:
            // Not part of what a cursor keeps: an erasure is told as it comes (a catch-up tells
            // messages as the store has them, erased or not).
            break
        case .changed(let change):
            changeSeq = max(changeSeq, change.changeSeq)
        }
    }

    /// What an endpoint told `told` (nil: nothing, not even that the conversation exists) has
    /// not been told of `record`: messages and changes to them one by one, and what else changed
    /// as the state it changed to. In order: the conversation's creation, its new name and photo, members
    /// who joined, the messages, the changes to messages, members who left, then watermarks that
    /// moved.
    static func catchUp(from told: WebhookTold?, to record: ConversationRecord, now: Date) -> [WebhookLane.Item] {
        var items: [WebhookLane.Item] = []
        var told = told ?? {
            items.append(.event(.created(record)))
            return WebhookTold(created: record)
        }()
        let at = now.millisecondPrecision
        if told.name != record.name || told.photo != record.photo?.id || told.fields != fieldsDigest(of: record) {
            items.append(.event(.updated(record, at: at)))
            told.name = record.name
            told.photo = record.photo?.id
            told.fields = fieldsDigest(of: record)
        }
        let joined = record.members.map(\.userId).filter { user in !told.members.contains { $0.userId == user } }
        if !joined.isEmpty { items.append(.event(.membersAdded(joined, record, at: at))) }
        if record.lastSeq > told.seq { items.append(.storedMessages(through: record.lastSeq)) }
        // Each change after every message: so after the one it follows.
        if record.lastChangeSeq > told.changeSeq { items.append(.storedChanges(through: record.lastChangeSeq)) }
        for member in told.members where record.member(member.userId) == nil {
            items.append(.event(.memberRemoved(member.userId, record, at: at)))
        }
        // Watermarks last, once the messages are told: a sender's own move with their message
        // is not a receipt (streams hear of none either).
        items.append(.storedReceipts)
        return items
    }

    /// The watermarks of `record` past those told, as receipts.
    func receipts(in record: ConversationRecord, now: Date) -> [WebhookEvent] {
        record.members.compactMap { member in
            let before = members.first { $0.userId == member.userId }
            let (delivered, read) = (before?.deliveredSeq ?? 0, before?.readSeq ?? 0)
            guard member.deliveredSeq > delivered || member.readSeq > read else { return nil }
            let receipt = ReceiptEvent(
                conversationId: record.id, userId: member.userId, deliveredSeq: max(delivered, member.deliveredSeq), readSeq: max(read, member.readSeq), at: now)
            return .receipt(receipt, read: member.readSeq > read)
        }
    }

    /// Whether telling `event` would tell nothing new: what a catch-up told already, found
    /// again among what was recorded after it.
    func holds(_ event: WebhookEvent) -> Bool {
        switch event {
        case .created: true
        case .message(let message): message.seq <= seq
        case .membersAdded(let users, _, _): users.allSatisfy { user in members.contains { $0.userId == user } }
        case .memberRemoved(let user, _, _): !members.contains { $0.userId == user }
        case .updated(let record, _): record.name == name && record.photo?.id == photo && Self.fieldsDigest(of: record) == fields
        case .receipt(let receipt, _):
            members.first { $0.userId == receipt.userId }.map { receipt.deliveredSeq <= $0.deliveredSeq && receipt.readSeq <= $0.readSeq } ?? true
        case .erased: false
        case .changed(let change): change.changeSeq <= changeSeq
        }
    }
}

/// One endpoint's deliveries from one conversation, in the order its owner committed what they
/// report, one at a time: the pure part of ``ConversationWebhooks``.
///
/// Events wait in memory as the owner commits them. An endpoint that falls ``WebhookPolicy/queueMax``
/// behind, or a node that takes the conversation over, works out what is owed from what was
/// told (``WebhookTold``) instead: messages are read back from the store one by one, other
/// changes arrive as the state they left.
public struct WebhookLane: Sendable {
    public enum Item: Sendable, Hashable {
        case event(WebhookEvent)
        /// The messages after the last told, through this seq, read from the store when reached.
        case storedMessages(through: Int64)
        /// The watermarks that moved past those told, found in the conversation when reached.
        case storedReceipts
        /// The changes to messages after the last told, through this number, read from the store
        /// when reached.
        case storedChanges(through: Int64)
    }

    /// What to do next.
    public enum Step: Sendable, Hashable {
        case idle
        /// Retry no sooner than this.
        case wait(until: ContinuousClock.Instant)
        /// Read the messages after `after` through `through` (``messagesRead(_:after:)``).
        case read(after: Int64, through: Int64)
        /// Read the changes to messages numbered after `after` through `through` (``changesRead(_:after:)``).
        case readChanges(after: Int64, through: Int64)
        case deliver(WebhookEvent)
    }

    public let types: Set<WebhookEventType>
    public let policy: WebhookPolicy
    /// What the endpoint has acknowledged (nil: nothing yet, not even the conversation).
    public private(set) var told: WebhookTold?
    private var queue: [Item] = []
    private var head = 0
    private var catchUpNeeded: Bool
    /// The highest seq the queue (or the catch-up it waits for) accounts for.
    private var recordedSeq: Int64
    /// Moves on a replay: an answer to a delivery made before it no longer moves ``told``.
    private var generation = 0
    private var inFlight: (event: WebhookEvent, generation: Int)?
    private var failures = 0
    private var failingSince: ContinuousClock.Instant?
    private var retryAt: ContinuousClock.Instant?

    /// - Parameter told: what the endpoint was told, as stored; nil with `owed` for everything
    ///   from the conversation's creation.
    /// - Parameter owed: whether the conversation may have changed since (work it out on the
    ///   first ``next(record:now:)``).
    public init(types: Set<WebhookEventType>, policy: WebhookPolicy, told: WebhookTold?, owed: Bool) {
        self.types = types
        self.policy = policy
        self.told = told
        self.catchUpNeeded = owed || told == nil
        self.recordedSeq = told?.seq ?? 0
    }

    /// Whether anything may be owed: events waiting, one in flight, or a catch-up to work out.
    public var isPending: Bool { inFlight != nil || catchUpNeeded || head < queue.count }

    /// The owner committed `event`.
    ///
    /// Messages may come out of seq order: sends wait for their commit concurrently, and one
    /// commit's sends resume in any order. A message past the one after the last recorded stands
    /// for the messages up to it, read from the store when reached (a seq is committed only with
    /// every seq before it); one at or before the last recorded is already accounted for.
    public mutating func record(_ event: WebhookEvent) {
        // A catch-up still to be worked out will find it in the conversation's state.
        guard !catchUpNeeded else { return }
        guard queue.count - head < policy.queueMax else {
            queue = []
            head = 0
            catchUpNeeded = true
            return
        }
        guard case .message(let message) = event else {
            queue.append(.event(event))
            return
        }
        guard message.seq > recordedSeq else { return }
        if message.seq == recordedSeq + 1 {
            queue.append(.event(event))
        } else if head < queue.count, case .storedMessages = queue[queue.count - 1] {
            queue[queue.count - 1] = .storedMessages(through: message.seq)
        } else {
            queue.append(.storedMessages(through: message.seq))
        }
        recordedSeq = message.seq
    }

    /// Tells the endpoint the conversation's messages again from `seq` on (and what else has
    /// changed since what it acknowledged).
    public mutating func replay(from seq: Int64) {
        generation += 1
        if let current = told?.seq { told?.seq = min(current, max(0, seq - 1)) }
        queue = []
        head = 0
        catchUpNeeded = true
        retryAt = nil
        failures = 0
        failingSince = nil
    }

    /// Works out what is owed, if that is still to do, from the conversation as it is now: what
    /// the owner commits after is recorded as it comes.
    public mutating func prepare(record: ConversationRecord, wallNow: Date) {
        guard catchUpNeeded, inFlight == nil else { return }
        catchUpNeeded = false
        queue = WebhookTold.catchUp(from: told, to: record, now: wallNow)
        head = 0
        recordedSeq = max(recordedSeq, record.lastSeq)
    }

    public mutating func next(record: ConversationRecord, now: ContinuousClock.Instant, wallNow: Date) -> Step {
        guard inFlight == nil else { return .idle }
        if let retryAt, now < retryAt { return .wait(until: retryAt) }
        prepare(record: record, wallNow: wallNow)
        if head >= 256 {
            queue.removeFirst(head)
            head = 0
        }
        while head < queue.count {
            switch queue[head] {
            case .storedMessages(let through):
                let after = told?.seq ?? 0
                if through <= after || told == nil {
                    head += 1
                } else if !types.contains(.messageCreated) {
                    told?.seq = through
                    head += 1
                } else {
                    return .read(after: after, through: through)
                }
            case .storedChanges(let through):
                let after = told?.changeSeq ?? 0
                if through <= after || told == nil {
                    head += 1
                } else if types.isDisjoint(with: WebhookEventType.changes) {
                    told?.changeSeq = through
                    head += 1
                } else {
                    return .readChanges(after: after, through: through)
                }
            case .storedReceipts:
                head += 1
                guard var told else { continue }
                // Messages the owner committed since the catch-up was worked out wait behind this
                // and will move their senders' own watermarks when told: those moves are no receipts.
                for case .event(.message(let message)) in queue[head...] { told.apply(.message(message)) }
                let receipts = told.receipts(in: record, now: wallNow)
                queue.insert(contentsOf: receipts.map { Item.event($0) }, at: head)
            case .event(let event):
                head += 1
                guard types.contains(event.type), told.map({ !$0.holds(event) }) ?? true else {
                    apply(event)
                    continue
                }
                inFlight = (event, generation)
                return .deliver(event)
            }
        }
        queue = []
        head = 0
        return .idle
    }

    /// The messages a ``Step/read(after:through:)`` asked for (in seq order).
    public mutating func messagesRead(_ messages: [Message], after: Int64) {
        guard head < queue.count, case .storedMessages(let through) = queue[head], told?.seq == after else { return }
        let read = messages.filter { $0.seq > after && $0.seq <= through }
        guard let last = read.last else {
            // The store has none of them (it cannot lose committed messages): move on rather
            // than ask forever.
            told?.seq = through
            head += 1
            return
        }
        var expanded = read.map { Item.event(.message($0)) }
        if last.seq < through { expanded.append(.storedMessages(through: through)) }
        queue.replaceSubrange(head..<(head + 1), with: expanded)
    }

    /// The changes a ``Step/readChanges(after:through:)`` asked for (in order).
    public mutating func changesRead(_ changes: [MessageChange], after: Int64) {
        guard head < queue.count, case .storedChanges(let through) = queue[head], told?.changeSeq == after else { return }
        let read = changes.filter { $0.changeSeq > after && $0.changeSeq <= through }
        guard let last = read.last else {
            told?.changeSeq = through
            head += 1
            return
        }
        var expanded = read.map { Item.event(.changed($0)) }
        if last.changeSeq < through { expanded.append(.storedChanges(through: through)) }
        queue.replaceSubrange(head..<(head + 1), with: expanded)
    }

    /// The endpoint took the delivery in flight.
    public mutating func delivered() {
        guard let (event, sent) = inFlight else { return }
        inFlight = nil
        failures = 0
        failingSince = nil
        retryAt = nil
        if sent == generation { apply(event) }
    }

    /// The delivery in flight failed: it goes again after a backoff, unless it has been failing
    /// for ``WebhookPolicy/giveUpAfter``; then it is dropped and returned.
    public mutating func failed(retryAfter: Duration?, now: ContinuousClock.Instant) -> WebhookEvent? {
        guard let (event, sent) = inFlight else { return nil }
        inFlight = nil
        guard sent == generation else { return nil }
        failures += 1
        let since = failingSince ?? now
        failingSince = since
        if now - since >= policy.giveUpAfter {
            failures = 0
            failingSince = nil
            retryAt = nil
            apply(event)
            return event
        }
        retryAt = now + policy.retry.delay(afterFailures: failures, atLeast: retryAfter)
        // Still where it was taken from (nothing is taken while it is in flight), unless the
        // queue was dropped for a catch-up, which will find it again.
        if !catchUpNeeded, head > 0 { head -= 1 }
        return nil
    }

    /// The ID of a delivery of `event`, the next thing this endpoint is told.
    public func deliveryID(of event: WebhookEvent, in conversation: ConversationID) -> String {
        event.deliveryID(in: conversation, change: (told?.changes ?? 0) + 1)
    }

    private mutating func apply(_ event: WebhookEvent) {
        if told == nil, case .created(let record) = event {
            told = WebhookTold(created: record)
        } else {
            told?.apply(event)
        }
    }
}
