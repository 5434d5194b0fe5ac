/// The lines of a body that arrives in pieces: each complete line (without its `\n`, and
/// without a `\r` before it), empty lines skipped. A line longer than `limit` is reported once
/// as too long, and the rest of the body is not read.
public struct JSONLines {
    public enum Line: Equatable, Sendable {
        case line(ArraySlice<UInt8>)
        case tooLong
    }

    public let limit: Int
    private var pending: [UInt8] = []
    private var start = 0
    private var failed = false

    public init(limit: Int) {
        self.limit = limit
    }

    public mutating func append(_ piece: some Sequence<UInt8>) {
        guard !failed else { return }
        if start > 0 && start == pending.count {
            pending.removeAll(keepingCapacity: true)
            start = 0
        }
        pending.append(contentsOf: piece)
    }

    public mutating func next() -> Line? {
        guard !failed else { return nil }
        while let newline = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
            var line = pending[start..<newline]
            start = newline + 1
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            if line.count > limit { return fail() }
            if !line.isEmpty { return .line(line) }
        }
        if pending.count - start > limit { return fail() }
        // What is left is the start of a line: kept at the front for the next piece.
        if start > 0 {
            pending.removeSubrange(0..<start)
            start = 0
        }
        return nil
    }

    private mutating func fail() -> Line {
        failed = true
        pending = []
        start = 0
        return .tooLong
    }
}
