import HeapModule

/// The calls a node is waiting on: each with its peer and deadline. Pure: the shell sweeps it
/// with the current instant and completes what it returns.
///
/// The deadlines are kept in a heap as well, so a sweep looks only at the calls that expired: the
/// shell sweeps every 25 ms, and a sweep that walked (and copied) every call waiting was 7 % of a
/// worker's CPU with thousands of push notices in flight. A call that completes leaves its
/// deadline in the heap until the deadline passes or the heap is rebuilt.
public struct CallTable<Instant: InstantProtocol, Pending> {
    private struct Entry {
        var peer: String
        var deadline: Instant
        var pending: Pending
    }

    private struct Deadline: Comparable {
        var deadline: Instant
        var callID: UInt64

        static func < (a: Deadline, b: Deadline) -> Bool {
            a.deadline < b.deadline || (a.deadline == b.deadline && a.callID < b.callID)
        }
    }

    private var entries: [UInt64: Entry] = [:]
    private var deadlines = Heap<Deadline>()
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
        deadlines.insert(Deadline(deadline: deadline, callID: callID))
        // Mostly deadlines of calls long completed: rebuilt from the calls still waiting.
        if deadlines.count > 2 * entries.count + 1024 {
            deadlines = Heap(entries.map { Deadline(deadline: $0.value.deadline, callID: $0.key) })
        }
    }

    /// The reply arrived (or the caller gave up): removes and returns the call, nil if unknown.
    public mutating func complete(_ callID: UInt64) -> Pending? {
        entries.removeValue(forKey: callID)?.pending
    }

    /// Removes and returns every call whose deadline is at or before `now`.
    public mutating func expire(now: Instant) -> [(callID: UInt64, pending: Pending)] {
        var expired: [(callID: UInt64, pending: Pending)] = []
        while let first = deadlines.min, first.deadline <= now {
            deadlines.removeMin()
            // Call IDs are never reused: an ID no longer here is a call that completed.
            if let entry = entries.removeValue(forKey: first.callID) { expired.append((first.callID, entry.pending)) }
        }
        return expired.sorted { $0.callID < $1.callID }
    }

    /// Removes and returns every call waiting on `peer` (its connection closed).
    public mutating func removeAll(peer: String) -> [(callID: UInt64, pending: Pending)] {
        let lost = entries.filter { $0.value.peer == peer }
        for id in lost.keys { entries[id] = nil }
        return lost.map { ($0.key, $0.value.pending) }.sorted { $0.callID < $1.callID }
    }

    /// Removes and returns every call.
    public mutating func removeAll() -> [(callID: UInt64, pending: Pending)] {
        defer {
            entries = [:]
            deadlines = Heap()
        }
        return entries.map { ($0.key, $0.value.pending) }.sorted { $0.callID < $1.callID }
    }

    /// The earliest deadline, if any call is waiting.
    public var earliestDeadline: Instant? { entries.values.map(\.deadline).min() }
}
