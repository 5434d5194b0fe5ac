/// What removing a file's location changes: byte ranges overwritten in place, in the order they
/// were found (a later one wins where two overlap). The file keeps its length, so every offset
/// in it stays right and nothing is re-encoded.
public struct LocationEdits: Sendable, Equatable {
    /// One range of bytes overwritten.
    public struct Edit: Sendable, Equatable {
        /// Where, in the whole file.
        public var range: Range<Int>
        /// With what: one byte repeated (zeros, or spaces in XML text), or these bytes exactly
        /// (a checksum recomputed), as many as the range holds.
        public var replacement: Replacement
    }

    public enum Replacement: Sendable, Equatable {
        /// Every byte of the range set to this one.
        case fill(UInt8)
        /// The range's bytes replaced by these (as many as the range holds).
        case bytes([UInt8])
    }

    /// Past this many edits a file is refused: a photo's GPS directory has a few dozen fields,
    /// and applying edits to each piece of an upload goes through all of them.
    public static let countMax = 4096

    public private(set) var edits: [Edit] = []

    public init() {}

    public var isEmpty: Bool { edits.isEmpty }

    mutating func fill(_ range: Range<Int>, with byte: UInt8) throws {
        guard !range.isEmpty else { return }
        try add(Edit(range: range, replacement: .fill(byte)))
    }

    mutating func write(_ bytes: [UInt8], at offset: Int) throws {
        guard !bytes.isEmpty else { return }
        try add(Edit(range: offset..<(offset + bytes.count), replacement: .bytes(bytes)))
    }

    mutating func add(_ edit: Edit) throws {
        guard edits.count < Self.countMax else { throw LocationRefusal("its metadata holds more than \(Self.countMax) location fields") }
        edits.append(edit)
    }

    /// Applies the edits that fall within `buffer`, which holds the file's bytes from `offset` on.
    public func apply(to buffer: UnsafeMutableRawBufferPointer, at offset: Int) {
        let end = offset + buffer.count
        for edit in edits where edit.range.lowerBound < end && edit.range.upperBound > offset {
            let from = max(edit.range.lowerBound, offset), to = min(edit.range.upperBound, end)
            switch edit.replacement {
            case .fill(let byte):
                for index in from..<to { buffer[index - offset] = byte }
            case .bytes(let bytes):
                for index in from..<to { buffer[index - offset] = bytes[index - edit.range.lowerBound] }
            }
        }
    }

    /// Applies the edits that fall within `bytes`, which hold the file's bytes from `offset` on.
    public func apply(to bytes: inout [UInt8], at offset: Int = 0) {
        bytes.withUnsafeMutableBytes { apply(to: $0, at: offset) }
    }
}

/// Why a file's location could not be removed: its metadata cannot be walked safely (cut short,
/// pointing outside the file, compressed, or more than a reader should follow). Such a file is
/// refused rather than kept with its location unknown.
public struct LocationRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String

    public init(_ reason: String) {
        self.reason = reason
    }

    public var description: String { reason }
}

/// A run of bytes that reads as one (an item's extents, a packet split over segments), and where
/// each of its bytes lies in the file.
struct Span {
    /// Contiguous pieces: `length` bytes at `virtual` in the span lie at `file` in the file.
    struct Piece {
        var virtual: Int
        var file: Int
        var length: Int
    }

    var pieces: [Piece] = []

    init(pieces: [Piece]) {
        self.pieces = pieces
    }

    init(file range: Range<Int>) {
        pieces = [Piece(virtual: 0, file: range.lowerBound, length: range.count)]
    }

    var count: Int { pieces.map { $0.virtual + $0.length }.max() ?? 0 }

    /// The span's bytes, read from the file (bytes of the span no piece covers read as zeros).
    func read<Source: ByteSource>(_ reader: Reader<Source>, _ what: String) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        for piece in pieces {
            let read = try reader.bytes(piece.file, piece.length, what)
            bytes.replaceSubrange(piece.virtual..<(piece.virtual + piece.length), with: read)
        }
        return bytes
    }

    /// Fills `range` of the span, wherever its bytes lie in the file.
    func fill(_ range: Range<Int>, with byte: UInt8, in edits: inout LocationEdits) throws {
        for piece in pieces {
            let from = max(range.lowerBound, piece.virtual), to = min(range.upperBound, piece.virtual + piece.length)
            guard from < to else { continue }
            try edits.fill((piece.file + from - piece.virtual)..<(piece.file + to - piece.virtual), with: byte)
        }
    }
}
