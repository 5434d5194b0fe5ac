/// The calls a node is waiting on: each with its peer and deadline. Pure: the shell sweeps it
/// with the current instant and completes what it returns.
public struct CallTable<Instant: InstantProtocol, Pending> {
    private struct Entry {
        var peer: String
        var deadline: Instant
        var pending: Pending
    }

    private var entries: [UInt64: Entry] = [:]
    private var nextCallID: UInt64 = 1

    public init() {}

    public var count: Int { entries.count }

    /// A fresh call ID; IDs are never reused within one table.
    public mutating func makeCallID() -> UInt64 {
        defer { nextCallID &+= 1 }
        return nextCallID
    }

    /// Remembers a call sent (or about to be sent) to `peer`.
    public mutating func register(_ callID: UInt64, peer: String, deadline: Instant, pending: Pending) {
        precondition(entries[callID] == nil, "call \(callID) registered twice")
        entries[callID] = Entry(peer: peer, deadline: deadline, pending: pending)
    }

    /// The reply arrived (or the caller gave up): removes and returns the call, nil if unknown.
    public mutating func complete(_ callID: UInt64) -> Pending? {
        entries.removeValue(forKey: callID)?.pending
    }

    /// Removes and returns every call whose deadline is at or before `now`.
    public mutating func expire(now: Instant) -> [(callID: UInt64, pending: Pending)] {
        let expired = entries.filter { $0.value.deadline <= now }
        for id in expired.keys { entries[id] = nil }
        return expired.map { ($0.key, $0.value.pending) }.sorted { $0.callID < $1.callID }
    }

    /// Removes and returns every call waiting on `peer` (its connection closed).
    public mutating func removeAll(peer: String) -> [(callID: UInt64, pending: Pending)] {
        let lost = entries.filter { $0.value.peer == peer }
        for id in lost.keys { entries[id] = nil }
        return lost.map { ($0.key, $0.value.pending) }.sorted { $0.callID < $1.callID }
    }

    /// Removes and returns every call.
    public mutating func removeAll() -> [(callID: UInt64, pending: Pending)] {
        defer { entries = [:] }
        return entries.map { ($0.key, $0.value.pending) }.sorted { $0.callID < $1.callID }
    }

    /// The earliest deadline, if any call is waiting.
    public var earliestDeadline: Instant? { entries.values.map(\.deadline).min() }
}
