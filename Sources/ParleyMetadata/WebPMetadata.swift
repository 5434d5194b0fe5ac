/// A WebP's location: its `EXIF` chunk (``EXIFLocation``) and its `XMP ` chunk
/// (``XMPLocation``), wherever they lie among the RIFF chunks. Bytes after the RIFF's end are
/// left as they are.
enum WebPMetadata {
    static func edits<Source: ByteSource>(_ reader: Reader<Source>) throws -> LocationEdits {
        var edits = LocationEdits()
        let riffEnd = 8 + (try reader.littleEndian(4, 4, "the RIFF header"))
        guard riffEnd <= reader.count else { throw LocationRefusal("the WebP is shorter than its RIFF header says") }
        var index = 12
        while index + 8 <= riffEnd {
            let type = String(decoding: try reader.bytes(index, 4, "a WebP chunk"), as: UTF8.self)
            let length = try reader.littleEndian(index + 4, 4, "a WebP chunk")
            let data = index + 8
            guard length <= riffEnd - data else { throw LocationRefusal("a WebP chunk at byte \(index) runs past the end of the RIFF") }
            let span = Span(file: data..<(data + length))
            switch type {
            case "EXIF": try EXIFLocation.strip(EXIFLocation.skippingHeader(span, reader), reader, into: &edits)
            case "XMP ": try XMPLocation.strip(span, reader, into: &edits)
            default: break
            }
            index = data + length + length % 2  // chunks are padded to an even length
        }
        return edits
    }
}
