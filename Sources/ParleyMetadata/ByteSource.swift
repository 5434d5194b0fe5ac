/// Random access to the bytes of a file being looked at: an upload spooled to disk, or bytes in
/// memory. Reads are by range and may fail (a disk error), which is not the file's fault.
public protocol ByteSource {
    /// How many bytes there are.
    var count: Int { get }
    /// Bytes `range` (within `0..<count`), exactly.
    func bytes(_ range: Range<Int>) throws -> [UInt8]
}

extension Array: ByteSource where Element == UInt8 {
    public func bytes(_ range: Range<Int>) throws -> [UInt8] {
        Array(self[range])
    }
}

/// Reads of a ``ByteSource`` that check every bound: a read past the end, or a length that does
/// not fit, is a ``LocationRefusal`` naming what was being read, never a trap.
struct Reader<Source: ByteSource> {
    let source: Source

    var count: Int { source.count }

    func bytes(_ offset: Int, _ length: Int, _ what: @autoclosure () -> String) throws -> [UInt8] {
        guard offset >= 0, length >= 0, offset <= count, length <= count - offset else {
            throw LocationRefusal("\(what()) runs past the end of the file")
        }
        return try source.bytes(offset..<(offset + length))
    }

    func bigEndian(_ offset: Int, _ size: Int, _ what: @autoclosure () -> String) throws -> Int {
        try bytes(offset, size, what()).reduce(0) { $0 << 8 | Int($1) }
    }

    func littleEndian(_ offset: Int, _ size: Int, _ what: @autoclosure () -> String) throws -> Int {
        try bytes(offset, size, what()).reversed().reduce(0) { $0 << 8 | Int($1) }
    }
}

extension Array where Element == UInt8 {
    /// The big-endian number of `size` bytes at `offset`, nil when they are not all within.
    func bigEndian(at offset: Int, _ size: Int) -> Int? {
        guard offset >= 0, size >= 0, offset <= count - size else { return nil }
        return self[offset..<(offset + size)].reduce(0) { $0 << 8 | Int($1) }
    }

    func starts(with prefix: String, at offset: Int = 0) -> Bool {
        let prefix = Array(prefix.utf8)
        return offset >= 0 && count - offset >= prefix.count && self[offset..<(offset + prefix.count)].elementsEqual(prefix)
    }
}
