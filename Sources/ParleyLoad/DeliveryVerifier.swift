import ParleyModel

/// Checks a load run's history against the contract, with no IO: what the server acknowledged,
/// and what each member's stream delivered, in order.
///
/// Faults it names:
/// - `lost`: an acknowledged message that a member's stream never delivered;
/// - `duplicate`: a stream delivered the same `(conversationId, seq)` twice (after the client's
///   de-duplication, so the client library's own de-duplication is checked too);
/// - `reorder`: a stream delivered a conversation's seq after a higher one;
/// - `gap`: a stream delivered seq N and then N+k (k > 1) with the ones between never delivered;
/// - `conflict`: one `clientMessageId` acknowledged with two different seqs, or one seq
///   acknowledged for two different `clientMessageId`s, or a conversation's history read back
///   with another conversation's message in it;
/// - `attachment`: a message delivered or stored without the upload its text names
///   (``text(_:attaching:)``), or with another.
public struct DeliveryVerifier: Sendable {
    public struct Fault: Hashable, Sendable, Codable, CustomStringConvertible {
        public enum Kind: String, Hashable, Sendable, Codable {
            case lost, duplicate, reorder, gap, conflict, attachment
        }

        public var kind: Kind
        public var conversationId: ConversationID
        public var seq: Int64
        /// The member whose stream shows it (nil for `conflict`).
        public var member: UserID?
        public var detail: String

        public var description: String {
            "\(kind.rawValue): \(conversationId) seq \(seq)" + (member.map { " on \($0)'s stream" } ?? "") + (detail.isEmpty ? "" : " (\(detail))")
        }
    }

    /// Who is in each conversation (whose streams must deliver its messages).
    private var members: [ConversationID: [UserID]] = [:]
    /// Acknowledged sends: conversation → seq → clientMessageId.
    private var acknowledged: [ConversationID: [Int64: String]] = [:]
    private var seqOfClientMessageID: [String: (ConversationID, Int64)] = [:]
    /// Acknowledgements whose seq a later one was acknowledged with too (a `conflict`): the
    /// read-back still looks for them, as a store that lost a commit and gave its seq to the next
    /// one shows.
    private var displaced: [ConversationID: [(seq: Int64, clientMessageId: String)]] = [:]
    private var conflicts: [Fault] = []
    private var readBackFaults: [Fault] = []
    private var attachmentFaults: [Fault] = []
    /// What each member's stream delivered, per conversation, in arrival order.
    private var delivered: [UserID: [ConversationID: [Int64]]] = [:]

    public init() {}

    /// Makes room for `count` more acknowledged messages up front: growing the table of every
    /// clientMessageId rehashes all of it (at 3,500 msg/s, ~100,000 entries 28 s into a run, which
    /// held the senders' and streams' loops long enough to show as a 50 ms spike in the delivery
    /// p99 of that second).
    public mutating func reserve(messages count: Int) {
        seqOfClientMessageID.reserveCapacity(seqOfClientMessageID.count + count)
    }

    public mutating func conversation(_ id: ConversationID, members: [UserID]) {
        self.members[id] = members
    }

    public mutating func acknowledged(_ message: Message) {
        if let (conversation, seq) = seqOfClientMessageID[message.clientMessageId], conversation == message.conversationId, seq != message.seq {
            conflicts.append(Fault(kind: .conflict, conversationId: conversation, seq: message.seq, member: nil,
                                   detail: "clientMessageId \(message.clientMessageId) acknowledged as seq \(seq) and \(message.seq)"))
        }
        seqOfClientMessageID[message.clientMessageId] = (message.conversationId, message.seq)
        let before = acknowledged[message.conversationId, default: [:]].updateValue(message.clientMessageId, forKey: message.seq)
        if let before, before != message.clientMessageId {
            conflicts.append(Fault(kind: .conflict, conversationId: message.conversationId, seq: message.seq, member: nil,
                                   detail: "seq \(message.seq) acknowledged for clientMessageIds \(before) and \(message.clientMessageId)"))
            displaced[message.conversationId, default: []].append((message.seq, before))
        }
    }

    public mutating func delivered(_ message: Message, to member: UserID) {
        delivered[member, default: [:]][message.conversationId, default: []].append(message.seq)
        checkAttachment(of: message, on: member)
    }

    /// A send's text naming the upload it attaches (nil: none), so that a delivery shows what it
    /// must carry whether or not its acknowledgement has been seen yet.
    public static func text(_ text: String, attaching media: MediaID?) -> String {
        media.map { "\(text) with \($0.rawValue)" } ?? text
    }

    /// Runs for every delivery of a load run: nothing is allocated unless a fault is found.
    private mutating func checkAttachment(of message: Message, on member: UserID?) {
        let text = message.text
        var named: Substring?
        if let space = text.lastIndex(of: " "), text[..<space].hasSuffix(" with") { named = text[text.index(after: space)...] }
        let carried = message.attachments ?? []
        if named == nil && carried.isEmpty { return }
        if let named, carried.count == 1, carried[0].media.id.rawValue == named { return }
        let ids = carried.map(\.media.id.rawValue)
        attachmentFaults.append(Fault(
            kind: .attachment, conversationId: message.conversationId, seq: message.seq, member: member,
            detail: "the text names \(named.map(String.init) ?? "no upload"), the message carries \(ids.isEmpty ? "none" : ids.joined(separator: ", "))"))
    }

    public var acknowledgedCount: Int { acknowledged.values.reduce(0) { $0 + $1.count } }
    public var deliveredCount: Int { delivered.values.reduce(0) { $0 + $1.values.reduce(0) { $0 + $1.count } } }

    /// Checks a conversation's full history as the store has it (read back through the API after
    /// the run): seqs 1…N without a gap or a repeat, every acknowledged message present with the
    /// seq it was acknowledged with, no `clientMessageId` stored twice.
    public mutating func readBack(_ conversation: ConversationID, history: [Message]) {
        var expected: Int64 = 1
        var byClientMessageID: [String: Int64] = [:]
        for message in history {
            if message.conversationId != conversation {
                readBackFaults.append(Fault(kind: .conflict, conversationId: conversation, seq: message.seq, member: nil,
                                            detail: "read back as this conversation's, but a message of \(message.conversationId)"))
            }
            if message.seq != expected {
                readBackFaults.append(Fault(
                    kind: message.seq < expected ? .duplicate : .gap, conversationId: conversation, seq: message.seq, member: nil,
                    detail: "in the store, expected seq \(expected)"))
            }
            if let other = byClientMessageID[message.clientMessageId], other != message.seq {
                readBackFaults.append(Fault(kind: .conflict, conversationId: conversation, seq: message.seq, member: nil,
                                            detail: "clientMessageId \(message.clientMessageId) stored as seq \(other) and \(message.seq)"))
            }
            byClientMessageID[message.clientMessageId] = message.seq
            checkAttachment(of: message, on: nil)
            expected = message.seq + 1
        }
        // What the store holds instead, so that a loss says how it looks.
        let stored = Dictionary(history.map { ($0.seq, $0.clientMessageId) }, uniquingKeysWith: { first, _ in first })
        let acked = (acknowledged[conversation] ?? [:]).map { (seq: $0.key, clientMessageId: $0.value) } + (displaced[conversation] ?? [])
        for (seq, clientMessageId) in acked.sorted(by: { $0.seq < $1.seq }) where byClientMessageID[clientMessageId] != seq {
            let instead = if let other = byClientMessageID[clientMessageId] {
                "; the store has it as seq \(other)"
            } else if let other = stored[seq] {
                "; the store has clientMessageId \(clientMessageId) nowhere, and seq \(seq) as \(other)"
            } else {
                "; the store has neither it nor seq \(seq) (\(history.count) messages read back, seqs \(history.first?.seq ?? 0)…\(history.last?.seq ?? 0))"
            }
            readBackFaults.append(Fault(kind: .lost, conversationId: conversation, seq: seq, member: nil,
                                        detail: "acknowledged as clientMessageId \(clientMessageId), not in the store with that seq" + instead))
        }
    }

    /// Every fault, in a stable order.
    public func faults() -> [Fault] {
        var faults = conflicts + readBackFaults + attachmentFaults
        for (conversation, acked) in acknowledged.sorted(by: { $0.key < $1.key }) {
            for member in members[conversation] ?? [] {
                let seqs = delivered[member]?[conversation] ?? []
                var seen: Set<Int64> = []
                var previous: Int64?
                for seq in seqs {
                    if seen.contains(seq) {
                        faults.append(Fault(kind: .duplicate, conversationId: conversation, seq: seq, member: member, detail: ""))
                    } else if let previous, seq < previous {
                        faults.append(Fault(kind: .reorder, conversationId: conversation, seq: seq, member: member, detail: "after seq \(previous)"))
                    } else if let previous, seq > previous + 1 {
                        faults.append(Fault(kind: .gap, conversationId: conversation, seq: seq, member: member, detail: "after seq \(previous)"))
                    }
                    seen.insert(seq)
                    previous = max(previous ?? seq, seq)
                }
                for seq in acked.keys.sorted() where !seen.contains(seq) {
                    faults.append(Fault(kind: .lost, conversationId: conversation, seq: seq, member: member, detail: "acknowledged, never delivered"))
                }
            }
        }
        return faults
    }
}
