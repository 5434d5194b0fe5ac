import Foundation
import ParleyModel

/// A type with a wire form written by hand, which ``BinaryClusterSerialization`` uses instead of
/// the type's `Codable` one when the type is a call's argument or result: for the values every
/// chat message crosses the cluster in (a send, its result, the deliveries to a gateway), where
/// Codable's keyed containers cost more than the rest of the call. The value keeps its `Codable`
/// form for everywhere else (nested in a `Codable` value, JSON).
///
/// Both ends run the same build, so the form needs no version; what a peer sends is still read
/// with every length checked, and bytes that do not fit are a `DecodingError`.
public protocol ClusterWireCodable: Codable {
    func write(to wire: inout WireWriter) throws
    init(from wire: inout WireReader) throws
}

/// Bytes of a hand-written wire form: integers little-endian at their width, a string as a 4-byte
/// length and its UTF-8, a list as a 4-byte count and its elements.
///
/// Inlinable, so that the forms written in other modules (the chat calls') use integer and list
/// code specialized for their types rather than generic code through witness tables.
public struct WireWriter {
    @usableFromInline var buffer: [UInt8]

    /// What has been written.
    public var bytes: [UInt8] { buffer }

    init(bytes: [UInt8]) {
        self.buffer = bytes
    }

    @inlinable
    public mutating func write<Integer: FixedWidthInteger>(_ value: Integer) {
        buffer.appendLittleEndian(value)
    }

    @inlinable
    public mutating func write(_ value: Bool) {
        buffer.append(value ? 1 : 0)
    }

    @inlinable
    public mutating func write(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            write(UInt32(truncatingIfNeeded: utf8.count))
            buffer.append(contentsOf: utf8)
        }
    }

    @inlinable
    public mutating func write<Element: ClusterWireCodable>(_ list: [Element]) throws {
        try write(list) { try $1.write(to: &$0) }
    }

    /// A list of anything: its count, then each element as `writeElement` writes it.
    @inlinable
    public mutating func write<Element>(_ list: [Element], _ writeElement: (inout WireWriter, Element) throws -> Void) rethrows {
        write(UInt32(truncatingIfNeeded: list.count))
        for element in list { try writeElement(&self, element) }
    }

    /// A value in its `Codable` binary form, length-prefixed (for the rare cases of a type whose
    /// common case is written by hand).
    public mutating func write(codable value: some Encodable) throws {
        let encoded = try BinaryClusterSerialization.encodeCodable(value)
        write(UInt32(truncatingIfNeeded: encoded.count))
        buffer.append(contentsOf: encoded)
    }
}

/// Reads what ``WireWriter`` wrote, checking every length against the bytes there are (inlinable
/// as ``WireWriter`` is).
public struct WireReader {
    @usableFromInline let bytes: UnsafeBufferPointer<UInt8>
    @usableFromInline var offset: Int

    init(bytes: UnsafeBufferPointer<UInt8>, offset: Int) {
        self.bytes = bytes
        self.offset = offset
    }

    var isAtEnd: Bool { offset == bytes.count }

    @inlinable
    public func corrupt(_ what: String) -> DecodingError {
        .dataCorrupted(.init(codingPath: [], debugDescription: what))
    }

    @inlinable
    public mutating func read<Integer: FixedWidthInteger>(_ type: Integer.Type) throws -> Integer {
        let size = MemoryLayout<Integer>.size
        guard bytes.count - offset >= size else { throw corrupt("truncated \(Integer.self)") }
        defer { offset += size }
        return bytes.littleEndian(Integer.self, at: offset)
    }

    @inlinable
    public mutating func read(_ type: Bool.Type) throws -> Bool {
        switch try read(UInt8.self) {
        case 0: return false
        case 1: return true
        case let other: throw corrupt("bad Bool \(other)")
        }
    }

    /// An instant, written as its seconds since 2001 (a `Double`'s bits): refused outside
    /// 1970…9999 (``BinaryClusterSerialization/checkedDate(sinceReferenceDate:)``).
    public mutating func read(_ type: Date.Type) throws -> Date {
        guard let date = BinaryClusterSerialization.checkedDate(sinceReferenceDate: Double(bitPattern: try read(UInt64.self))) else {
            throw corrupt("a date outside 1970…9999")
        }
        return date
    }

    @inlinable
    public mutating func read(_ type: String.Type) throws -> String {
        let region = try lengthPrefixed()
        guard let string = String(checkingUTF8: UnsafeBufferPointer(rebasing: bytes[region])) else {
            throw corrupt("a string that is not UTF-8")
        }
        return string
    }

    @inlinable
    public mutating func read<Element: ClusterWireCodable>(_ type: [Element].Type) throws -> [Element] {
        try readList { try Element(from: &$0) }
    }

    /// A list that ``WireWriter/write(_:_:)`` wrote, each element as `readElement` reads it.
    @inlinable
    public mutating func readList<Element>(_ readElement: (inout WireReader) throws -> Element) throws -> [Element] {
        let count = Int(try read(UInt32.self))
        // Every element takes at least a byte: a count past the bytes left is corrupt, and never
        // reserves memory for it.
        guard count <= bytes.count - offset else { throw corrupt("a list of \(count) in \(bytes.count - offset) bytes") }
        var list: [Element] = []
        list.reserveCapacity(count)
        for _ in 0..<count { list.append(try readElement(&self)) }
        return list
    }

    public mutating func read<Value: Decodable>(codable type: Value.Type) throws -> Value {
        let region = try lengthPrefixed()
        return try BinaryClusterSerialization.decodeCodable(type, from: Array(bytes[region]))
    }

    @inlinable
    mutating func lengthPrefixed() throws -> Range<Int> {
        let length = Int(try read(UInt32.self))
        guard length <= bytes.count - offset else { throw corrupt("a value of \(length) bytes in \(bytes.count - offset)") }
        defer { offset += length }
        return offset..<(offset + length)
    }
}

extension Array: ClusterWireCodable where Element: ClusterWireCodable {
    public func write(to wire: inout WireWriter) throws {
        try wire.write(self)
    }

    public init(from wire: inout WireReader) throws {
        self = try wire.read([Element].self)
    }
}

extension BinaryClusterSerialization {
    /// The tag byte of a value in its hand-written form (the `Codable` form starts with 0 or 1).
    static let wireTag: UInt8 = 2

    static func encodeWire(_ value: some ClusterWireCodable) throws -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256)
        bytes.append(wireTag)
        var writer = WireWriter(bytes: bytes)
        try value.write(to: &writer)
        return writer.bytes
    }

    static func decodeWire<Value: ClusterWireCodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        try bytes.withUnsafeBufferPointer { buffer in
            var reader = WireReader(bytes: buffer, offset: 0)
            guard try reader.read(UInt8.self) == wireTag else { throw reader.corrupt("\(Value.self) not in its wire form") }
            let value = try Value(from: &reader)
            guard reader.isAtEnd else { throw reader.corrupt("bytes left after \(Value.self)") }
            return value
        }
    }
}
