import Foundation
import ParleyModel

/// Everything a conversation's owner knows, and the rules, with no IO: who may do what, receipts as
/// forward-only watermarks never past `lastSeq`, typing that expires by itself.
public struct ConversationState: Sendable {
    public private(set) var record: ConversationRecord
    /// Who is typing, until when.
    public private(set) var typing: [UserID: ContinuousClock.Instant] = [:]
    /// How long `typing: true` lasts unless repeated.
    public let typingExpiry: Duration

    public init(record: ConversationRecord, typingExpiry: Duration = .seconds(6)) {
        self.record = record
        self.typingExpiry = typingExpiry
    }

    public var id: ConversationID { record.id }
    public var lastSeq: Int64 { record.lastSeq }

    /// A non-member may not learn that the conversation exists: the same `not_found` as for an
    /// unknown ID.
    public func requireMember(_ user: UserID) throws(ChatError) -> ConversationMember {
        guard let member = record.member(user) else { throw ChatError(.notFound, "conversation not found") }
        return member
    }

    // MARK: Messages

    /// A change to a message was committed: its number is the last, and a pin (or a deletion)
    /// moves the pinned messages as it did in the store.
    public mutating func changed(_ change: MessageChange) {
        guard change.changeSeq > record.lastChangeSeq else { return }
        record.lastChangeSeq = change.changeSeq
        record.pinned = change.applied(toPinned: record.pinned)
    }

    /// Messages were erased: none of them is pinned any more, as in the store.
    public mutating func erased(_ seqs: [Int64]) {
        record.pinned.removeAll { seqs.contains($0) }
    }

    /// A message was committed: the conversation and its sender's watermarks move to it. Commits
    /// of one conversation happen in seq order, but their senders may be answered out of it (the
    /// group commit starts the next commit before it answers the last one's): an older message
    /// still moves its sender's watermarks.
    public mutating func committed(_ message: Message) {
        if message.seq > record.lastSeq {
            record.lastSeq = message.seq
            record.lastActivityAt = message.sentAt
        }
        if let index = record.members.firstIndex(where: { $0.userId == message.senderId }) {
            record.members[index].deliveredSeq = max(record.members[index].deliveredSeq, message.seq)
            record.members[index].readSeq = max(record.members[index].readSeq, message.seq)
        }
        typing[message.senderId] = nil
    }

    // MARK: Receipts

    /// Checks a receipt: from a member, not past `lastSeq`, not negative. Returns the watermarks to
    /// store (a lower value than the current one is ignored by the store, not refused).
    public func validateReceipt(from user: UserID, deliveredSeq: Int64?, readSeq: Int64?) throws(ChatError) -> (delivered: Int64, read: Int64) {
        let member = try requireMember(user)
        guard deliveredSeq != nil || readSeq != nil else {
            throw ChatError(.invalidRequest, "deliveredSeq or readSeq is required")
        }
        for (name, value) in [("deliveredSeq", deliveredSeq), ("readSeq", readSeq)] {
            guard let value else { continue }
            guard value >= 0 else { throw ChatError(.invalidRequest, "\(name) must not be negative") }
            guard value <= record.lastSeq else {
                throw ChatError(.invalidRequest, "\(name) \(value) is past lastSeq \(record.lastSeq)")
            }
        }
        let read = max(member.readSeq, readSeq ?? 0)
        return (max(member.deliveredSeq, deliveredSeq ?? 0, read), read)
    }

    /// The store moved a member's watermarks; returns true if they changed.
    @discardableResult
    public mutating func receiptsAdvanced(_ member: ConversationMember) -> Bool {
        guard let index = record.members.firstIndex(where: { $0.userId == member.userId }) else { return false }
        let before = record.members[index]
        record.members[index].deliveredSeq = max(before.deliveredSeq, member.deliveredSeq)
        record.members[index].readSeq = max(before.readSeq, member.readSeq)
        return record.members[index] != before
    }

    // MARK: Typing

    /// `user` starts or stops typing. Returns true when others should hear of it (a change).
    public mutating func setTyping(_ user: UserID, _ isTyping: Bool, now: ContinuousClock.Instant) throws(ChatError) -> Bool {
        _ = try requireMember(user)
        let wasTyping = isTypingNow(user, now: now)
        typing[user] = isTyping ? now.advanced(by: typingExpiry) : nil
        return wasTyping != isTyping
    }

    public func isTypingNow(_ user: UserID, now: ContinuousClock.Instant) -> Bool {
        typing[user].map { now < $0 } ?? false
    }

    /// Forgets typing that was not repeated in time; returns who stopped.
    public mutating func expireTyping(now: ContinuousClock.Instant) -> [UserID] {
        let expired = typing.filter { $0.value <= now }.map(\.key).sorted()
        for user in expired { typing[user] = nil }
        return expired
    }

    // MARK: Members

    /// Who may add: the owner of a group (any member could otherwise pull strangers into it, each
    /// of whom then receives every message); nobody to a direct conversation.
    public func validateAdd(_ users: [UserID], by actor: UserID, groupSizeMax: Int) throws(ChatError) -> [ConversationMember] {
        let acting = try requireMember(actor)
        guard record.kind == .group else { throw ChatError(.forbidden, "members cannot be added to a direct conversation") }
        guard acting.role == .owner else { throw ChatError(.forbidden, "only the owner may add members") }
        guard !users.isEmpty else { throw ChatError(.invalidRequest, "userIds must not be empty") }
        let new = Array(Set(users.filter { record.member($0) == nil })).sorted()
        guard record.members.count + new.count <= groupSizeMax else {
            throw ChatError(.invalidRequest, "a group has at most \(groupSizeMax) members")
        }
        return new.map { ConversationMember(userId: $0, role: .member) }
    }

    /// Who may remove: anyone themself; the owner anyone (from a group).
    public func validateRemove(_ user: UserID, by actor: UserID) throws(ChatError) {
        let acting = try requireMember(actor)
        guard record.member(user) != nil else { throw ChatError(.notFound, "\(user) is not a member") }
        guard record.kind == .group else { throw ChatError(.forbidden, "members cannot be removed from a direct conversation") }
        guard user == actor || acting.role == .owner else {
            throw ChatError(.forbidden, "only the owner may remove other members")
        }
    }

    /// Who may rename: any member of a group; a direct conversation has no name.
    public func validateRename(_ name: String, by actor: UserID) throws(ChatError) {
        _ = try requireMember(actor)
        guard record.kind == .group else { throw ChatError(.forbidden, "a direct conversation cannot be renamed") }
        guard (1...64).contains(name.count), name.contains(where: { !$0.isWhitespace }) else {
            throw ChatError(.invalidRequest, "name must be 1–64 characters, not only whitespace")
        }
        try StoredText.require(name, field: "name")
    }

    public mutating func setMuted(_ muted: Bool, by user: UserID) {
        record.setMuted(muted, by: user)
    }

    public mutating func renamed(_ name: String) {
        record.name = name
    }

    /// Who may change the app's fields of a conversation: a group's owner, either member of a
    /// direct conversation; and what they may be.
    public func validateMetadataChange(_ metadata: Metadata, by actor: UserID) throws(ChatError) {
        let acting = try requireMember(actor)
        guard record.kind == .direct || acting.role == .owner else { throw ChatError(.forbidden, "only the group's owner may change its metadata") }
        try metadata.validate(field: "metadata")
    }

    /// Who may change a group's photo: its owner (a direct conversation has none).
    public func validatePhotoChange(by actor: UserID) throws(ChatError) {
        let acting = try requireMember(actor)
        guard record.kind == .group else { throw ChatError(.forbidden, "a direct conversation has no photo") }
        guard acting.role == .owner else { throw ChatError(.forbidden, "only the group's owner may change its photo") }
    }

    public mutating func metadataChanged(_ metadata: Metadata?) {
        record.metadata = metadata
    }

    public mutating func memberMetadataChanged(_ metadata: Metadata?, for user: UserID) {
        if let index = record.members.firstIndex(where: { $0.userId == user }) { record.members[index].metadata = metadata }
    }

    public mutating func photoChanged(_ photo: Media?) {
        record.photo = photo
    }

    public mutating func membersAdded(_ members: [ConversationMember]) {
        for member in members where record.member(member.userId) == nil { record.members.append(member) }
    }

    /// A member leaves or is removed. When the owner leaves a group, the longest-standing member
    /// left becomes its owner (members are kept in the order they joined; the stores do the same
    /// in the same transaction), so a group is never left without someone who may add members.
    public mutating func memberRemoved(_ user: UserID) {
        let wasOwner = record.member(user)?.role == .owner
        record.members.removeAll { $0.userId == user }
        record.setMuted(false, by: user)
        typing[user] = nil
        if wasOwner, !record.members.isEmpty {
            record.members[0].role = .owner
            record.ownerId = record.members[0].userId
        }
    }
}
