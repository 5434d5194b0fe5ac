/// The lines of a body that arrives in pieces: each complete line (without its `\n`, and
/// without a `\r` before it), empty lines skipped. A line longer than `limit` is reported once
/// as too long, and the rest of the body is not read.
public struct JSONLines {
    public enum Line: Equatable, Sendable {
        case line(ArraySlice<UInt8>)
        case tooLong
    }

    public let limit: Int
    private var pending = PendingBytes()
    private var failed = false

    public init(limit: Int) {
        self.limit = limit
    }

    public mutating func append(_ piece: some Sequence<UInt8>) {
        guard !failed else { return }
        pending.append(piece)
    }

    public mutating func next() -> Line? {
        guard !failed else { return nil }
        while let newline = pending.bytes[pending.start...].firstIndex(of: UInt8(ascii: "\n")) {
            var line = pending.bytes[pending.start..<newline]
            pending.start = newline + 1
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            if line.count > limit { return fail() }
            if !line.isEmpty { return .line(line) }
        }
        if pending.unread > limit { return fail() }
        // What is left is the start of a line: kept at the front for the next piece.
        pending.compact()
        return nil
    }

    private mutating func fail() -> Line {
        failed = true
        pending = PendingBytes()
        return .tooLong
    }
}

/// Bytes that arrive in pieces and are read from the front (`start` is where reading is): what
/// was read is dropped when the next piece comes after all of it was, or at ``compact()``.
struct PendingBytes {
    var bytes: [UInt8] = []
    var start = 0

    var unread: Int { bytes.count - start }

    mutating func append(_ piece: some Sequence<UInt8>) {
        if start > 0 && start == bytes.count {
            bytes.removeAll(keepingCapacity: true)
            start = 0
        }
        bytes.append(contentsOf: piece)
    }

    /// What is left unread moves to the front.
    mutating func compact() {
        if start > 0 {
            bytes.removeSubrange(0..<start)
            start = 0
        }
    }
}
