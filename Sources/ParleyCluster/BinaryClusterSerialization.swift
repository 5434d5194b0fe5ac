import Foundation
import ParleyModel

/// A compact binary form of `Codable` values for the cluster wire: no text, no number formatting,
/// no intermediate tree. Both ends run the same build (as for the call targets), so a value is
/// read back by the type that wrote it; what a peer sends is still checked byte by byte, and
/// anything that does not fit is a `DecodingError`, never a crash.
///
/// A value is a tag byte (0: nil, 1: present) and its payload:
/// - a primitive: its bytes (integers and floats little-endian at their own width, a `Bool` one
///   byte, a `String` its UTF-8 to the end of the value);
/// - a keyed container: entries of a 1-byte key length, the key's UTF-8, a 4-byte value length
///   and the value;
/// - an unkeyed container: a 4-byte count, then each element as a 4-byte length and the value.
///
/// A ``ClusterWireCodable`` value is written in its own hand-written form instead, after the tag 2.
public struct BinaryClusterSerialization: ClusterSerialization {
    public init() {}

    public func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        if let wire = value as? any ClusterWireCodable { return try Self.encodeWire(wire) }
        return try Self.encodeCodable(value)
    }

    public func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        if let wireType = type as? any ClusterWireCodable.Type {
            guard let value = try Self.decodeWire(wireType, from: bytes) as? Value else {
                throw DecodingError.typeMismatch(type, .init(codingPath: [], debugDescription: "wire form of \(wireType) is not \(type)"))
            }
            return value
        }
        return try Self.decodeCodable(type, from: bytes)
    }

    /// The instant `seconds` after 2001 if it is one the cluster sends — 1970 to the end of the
    /// year 9999, the instants of its messages and conversations — else nil. Foundation traps
    /// describing a date far outside (a log line would end the node), so a peer's or a row's
    /// other value is corrupt data.
    public static func checkedDate(sinceReferenceDate seconds: Double) -> Date? {
        let date = Date(timeIntervalSinceReferenceDate: seconds)
        guard seconds.isFinite, (0...253_402_300_799.999).contains(date.timeIntervalSince1970) else { return nil }
        return date
    }

    /// The `Codable` form, whatever the type.
    static func encodeCodable<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        let writer = BinaryWriter()
        writer.bytes.append(1)
        try value.encode(to: BinaryValueEncoder(writer: writer, depth: 0, codingPath: []))
        writer.closeRegions(deeperThan: -1)
        return writer.bytes
    }

    static func decodeCodable<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        try bytes.withUnsafeBufferPointer { buffer in
            let decoder = BinaryValueDecoder(bytes: buffer, range: 0..<buffer.count, codingPath: [])
            return try decoder.decodeValue(type)
        }
    }
}

// MARK: Writing

/// The bytes being written, and the length prefixes of containers still open.
final class BinaryWriter {
    var bytes: [UInt8] = []
    /// Offsets of open regions' 4-byte lengths, with the depth that opened each.
    private var open: [(offset: Int, depth: Int)] = []

    init() {
        bytes.reserveCapacity(256)
    }

    /// Reserves a length prefix, patched when the region closes.
    func openRegion(depth: Int) {
        open.append((bytes.count, depth))
        bytes.append(contentsOf: [0, 0, 0, 0])
    }

    /// Patches the lengths of regions opened deeper than `depth` (a container writes only once
    /// everything nested in it is done).
    func closeRegions(deeperThan depth: Int) {
        while let last = open.last, last.depth > depth {
            open.removeLast()
            let length = UInt32(truncatingIfNeeded: bytes.count - last.offset - 4)
            for shift in 0..<4 { bytes[last.offset + shift] = UInt8(truncatingIfNeeded: length >> (8 * UInt32(shift))) }
        }
    }

    func write<Integer: FixedWidthInteger>(_ value: Integer) {
        bytes.appendLittleEndian(value)
    }

    func write(_ string: String) {
        bytes.append(contentsOf: string.utf8)
    }

    /// A key of a keyed container (at most 255 UTF-8 bytes).
    func writeKey(_ key: some CodingKey, codingPath: [any CodingKey]) throws {
        let utf8 = key.stringValue.utf8
        guard utf8.count <= 255 else {
            throw EncodingError.invalidValue(key.stringValue, .init(codingPath: codingPath, debugDescription: "key longer than 255 bytes"))
        }
        bytes.append(UInt8(utf8.count))
        bytes.append(contentsOf: utf8)
    }
}

/// The encoder of one value: its payload goes to the writer at the current position.
struct BinaryValueEncoder: Encoder {
    let writer: BinaryWriter
    /// How many regions enclose this value.
    let depth: Int
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [Metadata.binaryWireKey: true] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(BinaryKeyedEncoder<Key>(writer: writer, depth: depth, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        BinaryUnkeyedEncoder(writer: writer, depth: depth, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        BinarySingleValueEncoder(writer: writer, depth: depth, codingPath: codingPath)
    }
}

/// Writes one nested value in its own length-prefixed region.
private func encodeNested(_ value: some Encodable, writer: BinaryWriter, depth: Int, codingPath: [any CodingKey]) throws {
    writer.closeRegions(deeperThan: depth)
    writer.openRegion(depth: depth + 1)
    writer.bytes.append(1)
    try value.encode(to: BinaryValueEncoder(writer: writer, depth: depth + 1, codingPath: codingPath))
    writer.closeRegions(deeperThan: depth)
}

struct BinaryKeyedEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let writer: BinaryWriter
    let depth: Int
    let codingPath: [any CodingKey]

    mutating func encodeNil(forKey key: Key) throws {
        writer.closeRegions(deeperThan: depth)
        try writer.writeKey(key, codingPath: codingPath)
        writer.write(UInt32(1))
        writer.bytes.append(0)
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        writer.closeRegions(deeperThan: depth)
        try writer.writeKey(key, codingPath: codingPath)
        try encodeNested(value, writer: writer, depth: depth, codingPath: codingPath)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        openNested(forKey: key)
        return KeyedEncodingContainer(BinaryKeyedEncoder<NestedKey>(writer: writer, depth: depth + 1, codingPath: codingPath))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        openNested(forKey: key)
        return BinaryUnkeyedEncoder(writer: writer, depth: depth + 1, codingPath: codingPath)
    }

    mutating func superEncoder() -> any Encoder {
        openNested(forKey: BinaryCodingKey(stringValue: "super"))
        return BinaryValueEncoder(writer: writer, depth: depth + 1, codingPath: codingPath)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        openNested(forKey: key)
        return BinaryValueEncoder(writer: writer, depth: depth + 1, codingPath: codingPath)
    }

    /// A nested container's region stays open until this container writes again (or the end).
    private func openNested(forKey key: some CodingKey) {
        writer.closeRegions(deeperThan: depth)
        // Keys of synthesized coding keys are short; a longer one is cut rather than trapping.
        let utf8 = Array(key.stringValue.utf8.prefix(255))
        writer.bytes.append(UInt8(utf8.count))
        writer.bytes.append(contentsOf: utf8)
        writer.openRegion(depth: depth + 1)
        writer.bytes.append(1)
    }
}

struct BinaryUnkeyedEncoder: UnkeyedEncodingContainer {
    let writer: BinaryWriter
    let depth: Int
    let codingPath: [any CodingKey]
    private(set) var count = 0
    private let countOffset: Int

    init(writer: BinaryWriter, depth: Int, codingPath: [any CodingKey]) {
        self.writer = writer
        self.depth = depth
        self.codingPath = codingPath
        writer.closeRegions(deeperThan: depth)
        self.countOffset = writer.bytes.count
        writer.write(UInt32(0))
    }

    private mutating func counted() {
        count += 1
        let value = UInt32(truncatingIfNeeded: count)
        for shift in 0..<4 { writer.bytes[countOffset + shift] = UInt8(truncatingIfNeeded: value >> (8 * UInt32(shift))) }
    }

    mutating func encodeNil() throws {
        writer.closeRegions(deeperThan: depth)
        writer.write(UInt32(1))
        writer.bytes.append(0)
        counted()
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try encodeNested(value, writer: writer, depth: depth, codingPath: codingPath)
        counted()
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        openNested()
        return KeyedEncodingContainer(BinaryKeyedEncoder<NestedKey>(writer: writer, depth: depth + 1, codingPath: codingPath))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        openNested()
        return BinaryUnkeyedEncoder(writer: writer, depth: depth + 1, codingPath: codingPath)
    }

    mutating func superEncoder() -> any Encoder {
        openNested()
        return BinaryValueEncoder(writer: writer, depth: depth + 1, codingPath: codingPath)
    }

    private mutating func openNested() {
        writer.closeRegions(deeperThan: depth)
        writer.openRegion(depth: depth + 1)
        writer.bytes.append(1)
        counted()
    }
}

struct BinarySingleValueEncoder: SingleValueEncodingContainer {
    let writer: BinaryWriter
    let depth: Int
    let codingPath: [any CodingKey]

    /// The tag byte before this payload said "present": nil rewrites it.
    mutating func encodeNil() throws {
        writer.closeRegions(deeperThan: depth)
        guard let last = writer.bytes.indices.last else { return }
        writer.bytes[last] = 0
    }

    mutating func encode(_ value: Bool) throws { writer.bytes.append(value ? 1 : 0) }
    mutating func encode(_ value: String) throws { writer.write(value) }
    mutating func encode(_ value: Double) throws { writer.write(value.bitPattern) }
    mutating func encode(_ value: Float) throws { writer.write(value.bitPattern) }
    mutating func encode(_ value: Int) throws { writer.write(Int64(value)) }
    mutating func encode(_ value: Int8) throws { writer.write(value) }
    mutating func encode(_ value: Int16) throws { writer.write(value) }
    mutating func encode(_ value: Int32) throws { writer.write(value) }
    mutating func encode(_ value: Int64) throws { writer.write(value) }
    mutating func encode(_ value: UInt) throws { writer.write(UInt64(value)) }
    mutating func encode(_ value: UInt8) throws { writer.write(value) }
    mutating func encode(_ value: UInt16) throws { writer.write(value) }
    mutating func encode(_ value: UInt32) throws { writer.write(value) }
    mutating func encode(_ value: UInt64) throws { writer.write(value) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        // The value's payload takes this value's place (no region of its own).
        try value.encode(to: BinaryValueEncoder(writer: writer, depth: depth, codingPath: codingPath))
    }
}

struct BinaryCodingKey: CodingKey {
    var stringValue: String
    var intValue: Int?

    init(stringValue: String) {
        self.stringValue = stringValue
        self.intValue = nil
    }

    init(intValue: Int) {
        self.stringValue = "\(intValue)"
        self.intValue = intValue
    }

}

// MARK: Reading

/// The decoder of one value: a tag byte, then the payload, within `range` of `bytes`.
struct BinaryValueDecoder: Decoder {
    let bytes: UnsafeBufferPointer<UInt8>
    /// The whole value, tag byte included.
    let range: Range<Int>
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [Metadata.binaryWireKey: true] }

    var isNil: Bool { range.isEmpty || bytes[range.lowerBound] == 0 }
    /// The payload, after the tag byte.
    var payload: Range<Int> { range.isEmpty ? range : (range.lowerBound + 1)..<range.upperBound }

    func corrupt(_ what: String) -> DecodingError {
        .dataCorrupted(.init(codingPath: codingPath, debugDescription: what))
    }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        guard !range.isEmpty else { throw corrupt("empty value for \(T.self)") }
        guard bytes[range.lowerBound] <= 1 else { throw corrupt("bad value tag \(bytes[range.lowerBound])") }
        if T.self == Date.self, bytes[range.lowerBound] == 1 {
            let seconds = try BinarySingleValueDecoder(decoder: self).decode(Double.self)
            guard let date = BinaryClusterSerialization.checkedDate(sinceReferenceDate: seconds), let value = date as? T else {
                throw corrupt("a date outside 1970…9999")
            }
            return value
        }
        return try T(from: self)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard !isNil else { throw DecodingError.valueNotFound([String: Any].self, .init(codingPath: codingPath, debugDescription: "nil where a keyed value was expected")) }
        return KeyedDecodingContainer(try BinaryKeyedDecoder<Key>(decoder: self))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard !isNil else { throw DecodingError.valueNotFound([Any].self, .init(codingPath: codingPath, debugDescription: "nil where a list was expected")) }
        return try BinaryUnkeyedDecoder(decoder: self)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        BinarySingleValueDecoder(decoder: self)
    }

    /// Reads a little-endian integer at `offset`, if it fits before `end`.
    func integer<Integer: FixedWidthInteger>(_ type: Integer.Type, at offset: Int, end: Int) throws -> Integer {
        let size = MemoryLayout<Integer>.size
        guard offset >= 0, offset <= end - size else { throw corrupt("truncated \(Integer.self)") }
        return bytes.littleEndian(Integer.self, at: offset)
    }

    /// A `length`-prefixed region starting at `offset`: its range, and where the next one starts.
    func region(at offset: Int, end: Int) throws -> Range<Int> {
        let length = Int(try integer(UInt32.self, at: offset, end: end))
        guard length <= end - offset - 4 else { throw corrupt("a value runs past its container") }
        return (offset + 4)..<(offset + 4 + length)
    }

    /// A value inside this one. (Coding paths are not tracked: building them costs an array per
    /// value, and errors name the type and the fault.)
    func nested(_ range: Range<Int>) -> BinaryValueDecoder {
        BinaryValueDecoder(bytes: bytes, range: range, codingPath: codingPath)
    }
}

struct BinaryKeyedDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    private struct Entry {
        var key: Range<Int>
        var value: Range<Int>
    }

    let decoder: BinaryValueDecoder
    private let entries: [Entry]
    var codingPath: [any CodingKey] { decoder.codingPath }

    init(decoder: BinaryValueDecoder) throws {
        self.decoder = decoder
        var entries: [Entry] = []
        let end = decoder.payload.upperBound
        var offset = decoder.payload.lowerBound
        while offset < end {
            let keyLength = Int(decoder.bytes[offset])
            guard keyLength <= end - offset - 1 else { throw decoder.corrupt("a key runs past its container") }
            let key = (offset + 1)..<(offset + 1 + keyLength)
            let value = try decoder.region(at: key.upperBound, end: end)
            entries.append(Entry(key: key, value: value))
            offset = value.upperBound
        }
        self.entries = entries
    }

    var allKeys: [Key] {
        entries.compactMap { Key(stringValue: String(decoding: UnsafeBufferPointer(rebasing: decoder.bytes[$0.key]), as: UTF8.self)) }
    }

    private func value(for key: Key) -> Range<Int>? {
        let name = key.stringValue.utf8
        for entry in entries where entry.key.count == name.count && name.elementsEqual(decoder.bytes[entry.key]) {
            return entry.value
        }
        return nil
    }

    private func required(_ key: Key) throws -> BinaryValueDecoder {
        guard let range = value(for: key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no value for \(key.stringValue)"))
        }
        return decoder.nested(range)
    }

    func contains(_ key: Key) -> Bool { value(for: key) != nil }

    func decodeNil(forKey key: Key) throws -> Bool {
        try required(key).isNil
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try required(key).decodeValue(type)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try required(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try required(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        guard let range = entries.first(where: { String(decoding: UnsafeBufferPointer(rebasing: decoder.bytes[$0.key]), as: UTF8.self) == "super" })?.value else {
            throw decoder.corrupt("no super value")
        }
        return decoder.nested(range)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        try required(key)
    }
}

struct BinaryUnkeyedDecoder: UnkeyedDecodingContainer {
    let decoder: BinaryValueDecoder
    let count: Int?
    private(set) var currentIndex = 0
    private var offset: Int
    var codingPath: [any CodingKey] { decoder.codingPath }
    var isAtEnd: Bool { currentIndex >= (count ?? 0) }

    init(decoder: BinaryValueDecoder) throws {
        self.decoder = decoder
        let payload = decoder.payload
        let count = Int(try decoder.integer(UInt32.self, at: payload.lowerBound, end: payload.upperBound))
        // Each element takes at least its 4-byte length: a larger count is a lie, not an allocation.
        guard count <= (payload.count - 4) / 4 else { throw decoder.corrupt("a list claims \(count) elements") }
        self.count = count
        self.offset = payload.lowerBound + 4
    }

    private mutating func next() throws -> BinaryValueDecoder {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any.self, .init(codingPath: codingPath, debugDescription: "the list has only \(count ?? 0) elements"))
        }
        let range = try decoder.region(at: offset, end: decoder.payload.upperBound)
        offset = range.upperBound
        defer { currentIndex += 1 }
        return decoder.nested(range)
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd else { return false }
        let range = try decoder.region(at: offset, end: decoder.payload.upperBound)
        guard range.isEmpty || decoder.bytes[range.lowerBound] == 0 else { return false }
        offset = range.upperBound
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try next().decodeValue(type)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try next().unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        try next()
    }
}

struct BinarySingleValueDecoder: SingleValueDecodingContainer {
    let decoder: BinaryValueDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool { decoder.isNil }

    private func present() throws -> Range<Int> {
        guard !decoder.isNil else {
            throw DecodingError.valueNotFound(Any.self, .init(codingPath: codingPath, debugDescription: "nil where a value was expected"))
        }
        return decoder.payload
    }

    /// An integer that fills the payload exactly.
    private func integer<Integer: FixedWidthInteger>(_ type: Integer.Type) throws -> Integer {
        let payload = try present()
        guard payload.count == MemoryLayout<Integer>.size else { throw decoder.corrupt("\(payload.count) bytes for a \(Integer.self)") }
        return try decoder.integer(type, at: payload.lowerBound, end: payload.upperBound)
    }

    private func narrowed<Narrow: FixedWidthInteger>(_ value: some FixedWidthInteger, as type: Narrow.Type) throws -> Narrow {
        guard let narrow = Narrow(exactly: value) else { throw decoder.corrupt("\(value) does not fit a \(Narrow.self)") }
        return narrow
    }

    func decode(_ type: Bool.Type) throws -> Bool {
        switch try integer(UInt8.self) {
        case 0: false
        case 1: true
        case let other: throw decoder.corrupt("\(other) is not a Bool")
        }
    }

    func decode(_ type: String.Type) throws -> String {
        let payload = try present()
        guard let string = String(checkingUTF8: UnsafeBufferPointer(rebasing: decoder.bytes[payload])) else {
            throw decoder.corrupt("a string that is not UTF-8")
        }
        return string
    }

    // Nothing the cluster sends is NaN or infinite; a Date of NaN traps when it is described
    // (Foundation's Date.description), so such a value is corrupt data, refused here.
    func decode(_ type: Double.Type) throws -> Double {
        let value = Double(bitPattern: try integer(UInt64.self))
        guard value.isFinite else { throw decoder.corrupt("a number that is not finite") }
        return value
    }

    func decode(_ type: Float.Type) throws -> Float {
        let value = Float(bitPattern: try integer(UInt32.self))
        guard value.isFinite else { throw decoder.corrupt("a number that is not finite") }
        return value
    }
    func decode(_ type: Int.Type) throws -> Int { try narrowed(try integer(Int64.self), as: Int.self) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(Int8.self) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(Int16.self) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(Int32.self) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(Int64.self) }
    func decode(_ type: UInt.Type) throws -> UInt { try narrowed(try integer(UInt64.self), as: UInt.self) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(UInt8.self) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(UInt16.self) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(UInt32.self) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(UInt64.self) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        // The value's payload took this value's place: same range, same tag.
        try T(from: decoder)
    }
}

// MARK: Integers, for both binary forms

extension Array where Element == UInt8 {
    /// Appends `value`'s bytes, least significant first.
    @inlinable
    mutating func appendLittleEndian<Integer: FixedWidthInteger>(_ value: Integer) {
        var little = value.littleEndian
        Swift.withUnsafeBytes(of: &little) { append(contentsOf: $0) }
    }
}

extension UnsafeBufferPointer where Element == UInt8 {
    /// The integer whose bytes, least significant first, start at `offset` (the caller has checked
    /// that they are all there).
    @inlinable
    func littleEndian<Integer: FixedWidthInteger>(_ type: Integer.Type, at offset: Int) -> Integer {
        var value: Integer = 0
        for index in 0..<MemoryLayout<Integer>.size { value |= Integer(truncatingIfNeeded: self[offset + index]) << (8 * index) }
        return value
    }
}
