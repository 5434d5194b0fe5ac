import Foundation

/// JSON written straight into bytes, for the objects every message passes through on the
/// gateway (a send's reply, the `message` event): the same bytes as `API.makeEncoder()` writes
/// for the same value — keys in sorted order, slashes unescaped, the control characters escaped
/// as Foundation does, timestamps as ``API/timestamp(_:)`` — without Codable's containers, boxes
/// and generic dispatch per field. The tests hold every writer here to the encoder, byte for byte.
public struct DirectJSON {
    public private(set) var bytes: [UInt8] = []

    public init(capacity: Int = 256) {
        bytes.reserveCapacity(capacity)
    }

    /// `"key":` — a key from the source, which needs no escaping.
    public mutating func key(_ key: StaticString) {
        bytes.append(UInt8(ascii: "\""))
        key.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    public mutating func raw(_ byte: Unicode.Scalar) {
        bytes.append(UInt8(ascii: byte))
    }

    /// JSON another writer made (the encoder's, for a nested value), as it is.
    public mutating func append(json: some Sequence<UInt8>) {
        bytes.append(contentsOf: json)
    }

    /// A string, escaped as Foundation's encoder does: `"` and `\` with a backslash, backspace,
    /// tab, newline, form feed and carriage return by name, other controls as `\u00xx`; every
    /// other byte (DEL, `/`, all of non-ASCII) as it is.
    public mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { utf8 in
            var start = 0
            for index in utf8.indices {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index]))
                start = index + 1
                bytes.append(UInt8(ascii: "\\"))
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
                case 0x08: bytes.append(UInt8(ascii: "b"))
                case 0x09: bytes.append(UInt8(ascii: "t"))
                case 0x0A: bytes.append(UInt8(ascii: "n"))
                case 0x0C: bytes.append(UInt8(ascii: "f"))
                case 0x0D: bytes.append(UInt8(ascii: "r"))
                default:
                    bytes.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                    bytes.append(Self.hex[Int(byte >> 4)])
                    bytes.append(Self.hex[Int(byte & 0xF)])
                }
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start...]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private static let hex = Array("0123456789abcdef".utf8)

    public mutating func integer(_ value: Int64) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        // The magnitude as unsigned, so Int64.min has one too.
        var magnitude = value.magnitude
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[19 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            bytes.append(contentsOf: buffer[(20 - count)...])
        }
    }

    mutating func timestamp(_ date: Date) {
        bytes.append(UInt8(ascii: "\""))
        if !API.appendTimestamp(millisecondsSince1970: date.millisecondsSince1970, to: &bytes) {
            bytes.append(contentsOf: API.timestamp(date).utf8)  // outside 1970–9999: the formatter
        }
        bytes.append(UInt8(ascii: "\""))
    }
}

extension Message {
    /// This message as a JSON object, as ``API/makeEncoder()`` writes it.
    public func write(to json: inout DirectJSON) {
        json.raw("{")
        if let attachments, let encoded = try? API.makeEncoder().encode(attachments) {
            // Rare beside text, and nested: the encoder's bytes.
            json.key("attachments"); json.append(json: encoded); json.raw(",")
        }
        json.key("clientMessageId"); json.string(clientMessageId); json.raw(",")
        json.key("conversationId"); json.string(conversationId.rawValue); json.raw(",")
        if deleted == true { json.key("deleted"); json.append(json: "true,".utf8) }
        if let deletedBy { json.key("deletedBy"); json.string(deletedBy.rawValue); json.raw(",") }
        if let editedAt { json.key("editedAt"); json.timestamp(editedAt); json.raw(",") }
        if erased == true { json.key("erased"); json.append(json: "true,".utf8) }
        json.key("id"); json.string(id); json.raw(",")
        if let mentions, let encoded = try? API.makeEncoder().encode(mentions) {
            json.key("mentions"); json.append(json: encoded); json.raw(",")
        }
        if let metadata { json.key("metadata"); json.append(json: metadata.json.utf8); json.raw(",") }
        if let reactions, let encoded = try? API.makeEncoder().encode(reactions) {
            json.key("reactions"); json.append(json: encoded); json.raw(",")
        }
        if let replyTo, let encoded = try? API.makeEncoder().encode(replyTo) {
            json.key("replyTo"); json.append(json: encoded); json.raw(",")
        }
        json.key("senderId"); json.string(senderId.rawValue); json.raw(",")
        json.key("sentAt"); json.timestamp(sentAt); json.raw(",")
        json.key("seq"); json.integer(seq); json.raw(",")
        json.key("text"); json.string(text)
        json.raw("}")
    }

    /// `{"message": …}`: the body of a send's reply and of a `message` event.
    public var wrappedJSON: [UInt8] {
        var json = DirectJSON(capacity: 160 + text.utf8.count)
        json.raw("{")
        json.key("message")
        write(to: &json)
        json.raw("}")
        return json.bytes
    }
}

extension API.NewMessage {
    /// A send's body, as ``API/makeEncoder()`` writes it (the load generator makes thousands a
    /// second).
    public var json: [UInt8] {
        if attachments != nil || replyTo != nil || mentions != nil || metadata != nil, let encoded = try? API.makeEncoder().encode(self) { return Array(encoded) }
        var json = DirectJSON(capacity: 64 + clientMessageId.utf8.count + text.utf8.count)
        json.raw("{")
        json.key("clientMessageId"); json.string(clientMessageId); json.raw(",")
        json.key("text"); json.string(text)
        json.raw("}")
        return json.bytes
    }
}

extension API {
    /// Appends `timestamp(_:)`'s text for an instant in years 1970–9999 (a server's clock) and
    /// answers true; false for any other instant, which the caller formats the slow way.
    static func appendTimestamp(millisecondsSince1970 millis: Int64, to bytes: inout [UInt8]) -> Bool {
        // 10000-01-01T00:00:00Z
        guard millis >= 0, millis < 253_402_300_800_000 else { return false }
        let days = millis / 86_400_000
        let inDay = millis % 86_400_000
        // Days since 1970-01-01 to a civil date (Howard Hinnant's `civil_from_days`).
        let z = days + 719_468
        let era = z / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func digits(_ value: Int64, _ width: Int) {
            var divisor: Int64 = 1
            for _ in 1..<width { divisor *= 10 }
            while divisor > 0 {
                bytes.append(UInt8(ascii: "0") + UInt8((value / divisor) % 10))
                divisor /= 10
            }
        }
        digits(year, 4); bytes.append(UInt8(ascii: "-"))
        digits(month, 2); bytes.append(UInt8(ascii: "-"))
        digits(day, 2); bytes.append(UInt8(ascii: "T"))
        digits(inDay / 3_600_000, 2); bytes.append(UInt8(ascii: ":"))
        digits(inDay / 60_000 % 60, 2); bytes.append(UInt8(ascii: ":"))
        digits(inDay / 1_000 % 60, 2); bytes.append(UInt8(ascii: "."))
        digits(inDay % 1_000, 3); bytes.append(UInt8(ascii: "Z"))
        return true
    }
}

extension Message {
    /// Reads `{"message": …}` as ``wrappedJSON`` writes it — keys in that order, no whitespace,
    /// strings without escapes — and nil for anything else, which the caller decodes with
    /// `JSONDecoder` (any valid JSON still reads; this is only the common case made cheap).
    public static func fromWrappedJSON(_ bytes: some Collection<UInt8>) -> Message? {
        CanonicalReader.read(bytes) { $0.wrappedMessage() }
    }
}

extension API.NewMessage {
    /// Reads a send's body as ``json`` writes it — `{"clientMessageId":…,"text":…}`, keys in that
    /// order, no whitespace, strings without escapes — and nil for anything else, which the
    /// gateway decodes with `JSONDecoder` (any valid JSON still reads; this is only the common
    /// case made cheap, on the gateway's one event loop).
    public static func fromCanonicalJSON(_ bytes: some Collection<UInt8>) -> API.NewMessage? {
        CanonicalReader.read(bytes) { reader in
            guard reader.literal("{\"clientMessageId\":"), let clientMessageId = reader.string(),
                  reader.literal(",\"text\":"), let text = reader.string(),
                  reader.literal("}"), reader.atEnd
            else { return nil }
            return API.NewMessage(clientMessageId: clientMessageId, text: text)
        }
    }
}

/// The reader of ``Message/fromWrappedJSON(_:)``, ``API/NewMessage/fromCanonicalJSON(_:)`` and
/// ``API/StreamedCommand/fromCanonicalJSON(_:)``:
/// every step checks the exact byte it expects.
struct CanonicalReader {
    let bytes: UnsafeBufferPointer<UInt8>
    var offset = 0

    /// What `body` reads from `bytes` (nil for bytes not in one contiguous piece).
    static func read<Value>(_ bytes: some Collection<UInt8>, _ body: (inout CanonicalReader) -> Value?) -> Value? {
        let read: Value?? = bytes.withContiguousStorageIfAvailable { buffer in
            var reader = CanonicalReader(bytes: buffer)
            return body(&reader)
        }
        return read ?? nil
    }

    var atEnd: Bool { offset == bytes.count }

    mutating func wrappedMessage() -> Message? {
        guard literal("{\"message\":{\"clientMessageId\":"), let clientMessageId = string(),
              literal(",\"conversationId\":"), let conversationId = string(),
              literal(",\"id\":"), let id = string(),
              literal(",\"senderId\":"), let senderId = string(),
              literal(",\"sentAt\":\""), let millis = timestamp(), literal("\""),
              literal(",\"seq\":"), let seq = integer(),
              literal(",\"text\":"), let text = string(),
              literal("}}"), atEnd
        else { return nil }
        var message = Message(
            conversationId: ConversationID(rawValue: conversationId), seq: seq, senderId: UserID(rawValue: senderId),
            clientMessageId: clientMessageId, text: text, sentAt: Date(millisecondsSince1970: millis))
        message.id = id
        return message
    }

    mutating func literal(_ expected: StaticString) -> Bool {
        let count = expected.utf8CodeUnitCount
        guard bytes.count - offset >= count, let base = bytes.baseAddress, memcmp(base + offset, expected.utf8Start, count) == 0 else { return false }
        offset += count
        return true
    }

    /// A string without escapes or control characters, valid UTF-8.
    mutating func string() -> String? {
        guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { return nil }
        let start = offset + 1
        var end = start
        while end < bytes.count, bytes[end] != UInt8(ascii: "\"") {
            guard bytes[end] != UInt8(ascii: "\\"), bytes[end] >= 0x20 else { return nil }
            end += 1
        }
        guard end < bytes.count, let value = String(checkingUTF8: UnsafeBufferPointer(rebasing: bytes[start..<end])) else { return nil }
        offset = end + 1
        return value
    }

    /// An integer: an optional minus and 1–18 digits (what Int64 holds without overflow checks).
    mutating func integer() -> Int64? {
        var negative = false
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "-") {
            negative = true
            offset += 1
        }
        var value: Int64 = 0
        var digits = 0
        while offset < bytes.count, let digit = Self.digit(bytes[offset]) {
            guard digits < 18, !(digits == 1 && value == 0) else { return nil }  // no leading zeros
            value = value * 10 + digit
            digits += 1
            offset += 1
        }
        guard digits > 0 else { return nil }
        return negative ? -value : value
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`, years 1970–9999, as milliseconds since 1970.
    mutating func timestamp() -> Int64? {
        func number(_ width: Int) -> Int64? {
            guard bytes.count - offset >= width else { return nil }
            var value: Int64 = 0
            for _ in 0..<width {
                guard let digit = Self.digit(bytes[offset]) else { return nil }
                value = value * 10 + digit
                offset += 1
            }
            return value
        }
        guard let year = number(4), literal("-"), let month = number(2), literal("-"), let day = number(2), literal("T"),
              let hour = number(2), literal(":"), let minute = number(2), literal(":"), let second = number(2), literal("."),
              let millis = number(3), literal("Z"),
              year >= 1970, (1...12).contains(month), hour < 24, minute < 60, second < 60
        else { return nil }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let daysInMonth: Int64 = month == 2 ? (leap ? 29 : 28) : [4, 6, 9, 11].contains(month) ? 30 : 31
        guard (1...daysInMonth).contains(day) else { return nil }
        // Days from a civil date (Howard Hinnant's `days_from_civil`), the inverse of the writer's.
        let y = month <= 2 ? year - 1 : year
        let era = y / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1_000 + millis
    }

    static func digit(_ byte: UInt8) -> Int64? {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") ? Int64(byte - UInt8(ascii: "0")) : nil
    }
}
