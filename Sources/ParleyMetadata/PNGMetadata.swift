/// A PNG's location: its `eXIf` chunk (EXIF's GPS directory, ``EXIFLocation``) and XMP in an
/// `iTXt` chunk (``XMPLocation``), wherever they lie among the chunks; each chunk changed gets its
/// CRC computed again. Metadata this cannot edit in place is refused: XMP compressed in its
/// `iTXt`, and the legacy "Raw profile type" text chunks (hex EXIF or XMP, often compressed).
enum PNGMetadata {
    static func edits<Source: ByteSource>(_ reader: Reader<Source>) throws -> LocationEdits {
        var edits = LocationEdits()
        var index = 8
        while true {
            let length = try reader.bigEndian(index, 4, "a PNG chunk")
            let type = try reader.bytes(index + 4, 4, "a PNG chunk")
            let data = index + 8
            guard length <= Int(Int32.max), length <= reader.count - data, reader.count - data - length >= 4 else {
                throw LocationRefusal("a PNG chunk at byte \(index) runs past the end of the file")
            }
            let span = Span(file: data..<(data + length))
            var chunk = LocationEdits()
            switch String(decoding: type, as: UTF8.self) {
            case "eXIf":
                try EXIFLocation.strip(EXIFLocation.skippingHeader(span, reader), reader, into: &chunk)
            case "iTXt":
                try internationalText(span, reader, into: &chunk)
            case "tEXt", "zTXt":
                let keyword = try span.prefix(80).read(reader, "a PNG text chunk")
                if keyword.starts(with: "Raw profile type ") {
                    throw LocationRefusal("a PNG \(String(decoding: type, as: UTF8.self)) chunk holds metadata as a raw profile, which cannot be edited in place")
                }
            case "IEND":
                return edits
            default:
                break
            }
            if !chunk.isEmpty {
                // The CRC covers the type and the data, as they are once edited.
                var covered = try reader.bytes(index + 4, 4 + length, "a PNG chunk")
                chunk.apply(to: &covered, at: index + 4)
                for edit in chunk.edits { try edits.add(edit) }
                try edits.write(bigEndianBytes(CRC32.checksum(covered)), at: data + length)
            }
            index = data + length + 4
        }
    }

    /// XMP (keyword `XML:com.adobe.xmp`) in an `iTXt` chunk: keyword, NUL, compression flag and
    /// method, language tag, NUL, translated keyword, NUL, text.
    private static func internationalText<Source: ByteSource>(_ span: Span, _ reader: Reader<Source>, into edits: inout LocationEdits) throws {
        let head = try span.prefix(18).read(reader, "a PNG iTXt chunk")
        guard head.starts(with: "XML:com.adobe.xmp\0") else { return }
        let bytes = try span.read(reader, "a PNG iTXt chunk")
        var index = 18
        guard index + 2 <= bytes.count else { throw LocationRefusal("a PNG iTXt chunk is cut short") }
        guard bytes[index] == 0 else { throw LocationRefusal("its XMP is compressed in a PNG iTXt chunk, which cannot be edited in place") }
        index += 2
        for _ in 0..<2 {
            guard let nul = bytes[index...].firstIndex(of: 0) else { throw LocationRefusal("a PNG iTXt chunk is cut short") }
            index = nul + 1
        }
        try XMPLocation.strip(span.dropping(index), reader, into: &edits)
    }

    private static func bigEndianBytes(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }
}

/// The CRC-32 of PNG chunks (ISO 3309, the polynomial 0xEDB88320 reflected).
enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = value & 1 == 1 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
        return value
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
