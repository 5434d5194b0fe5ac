/// What an upload's first bytes say it is, and an image's size from its header, without decoding
/// it: an upload's declared `Content-Type` is checked against this, since a client may say
/// anything. Reads only the bytes it is given (an upload's first ``headLength``); every index is
/// checked, so hostile bytes get nil, never a trap.
public enum MediaSniffing {
    /// How many of an upload's first bytes ``contentType(of:)`` and ``dimensions(of:contentType:)``
    /// look at: a JPEG's frame header may follow 64 KiB of EXIF.
    public static let headLength = 128 * 1024

    /// The types an upload may have, by what their first bytes hold.
    public static let contentTypes: Set<String> = [
        "image/jpeg", "image/png", "image/gif", "image/webp", "image/heic", "video/mp4", "video/quicktime", "audio/mp4", "audio/aac",
        "audio/ogg", "application/pdf",
    ]

    /// The content type the bytes begin as, or nil when they begin as none of ``contentTypes``.
    public static func contentType(of head: [UInt8]) -> String? {
        if starts(head, [0xFF, 0xD8, 0xFF]) { return "image/jpeg" }
        if starts(head, [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "image/png" }
        if starts(head, Array("GIF87a".utf8)) || starts(head, Array("GIF89a".utf8)) { return "image/gif" }
        if starts(head, Array("RIFF".utf8)), starts(head, Array("WEBP".utf8), at: 8) { return "image/webp" }
        if starts(head, Array("OggS".utf8)) { return "audio/ogg" }
        if starts(head, Array("%PDF-".utf8)) { return "application/pdf" }
        // ADTS: a 12-bit sync word and layer 0 (AAC without a container).
        if head.count >= 2, head[0] == 0xFF, head[1] & 0xF6 == 0xF0 { return "audio/aac" }
        // ISO base media: a `ftyp` box first, whose major brand names the kind.
        if starts(head, Array("ftyp".utf8), at: 4), head.count >= 12 {
            switch String(decoding: head[8..<12], as: UTF8.self) {
            case "heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1": return "image/heic"
            case "qt  ": return "video/quicktime"
            case "M4A ", "M4B ": return "audio/mp4"
            case "isom", "iso2", "iso4", "iso5", "iso6", "mp41", "mp42", "avc1", "dash", "M4V ", "3gp4", "3gp5", "3g2a": return "video/mp4"
            default: return nil
            }
        }
        return nil
    }

    /// An image's width and height from its header (PNG, GIF, WebP, JPEG), nil when the header
    /// is not within `head` or says nothing sensible.
    public static func dimensions(of head: [UInt8], contentType: String) -> (width: Int, height: Int)? {
        let size: (Int, Int)?
        switch contentType {
        case "image/png":
            // The IHDR chunk comes first: width and height, big-endian, after its length and type.
            guard starts(head, Array("IHDR".utf8), at: 12), let width = bigEndian(head, at: 16, bytes: 4), let height = bigEndian(head, at: 20, bytes: 4) else { return nil }
            size = (width, height)
        case "image/gif":
            guard let width = littleEndian(head, at: 6, bytes: 2), let height = littleEndian(head, at: 8, bytes: 2) else { return nil }
            size = (width, height)
        case "image/webp":
            size = webpDimensions(head)
        case "image/jpeg":
            size = jpegDimensions(head)
        default:
            return nil
        }
        guard let (width, height) = size, width > 0, height > 0, width <= 1 << 20, height <= 1 << 20 else { return nil }
        return (width, height)
    }

    private static func webpDimensions(_ head: [UInt8]) -> (Int, Int)? {
        if starts(head, Array("VP8 ".utf8), at: 12) {
            // A lossy key frame: its start code, then 14-bit width and height.
            guard starts(head, [0x9D, 0x01, 0x2A], at: 23), let width = littleEndian(head, at: 26, bytes: 2),
                let height = littleEndian(head, at: 28, bytes: 2)
            else { return nil }
            return (width & 0x3FFF, height & 0x3FFF)
        }
        if starts(head, Array("VP8L".utf8), at: 12) {
            // Lossless: a signature byte, then width − 1 and height − 1 in 14 bits each.
            guard head.count > 24, head[20] == 0x2F, let bits = littleEndian(head, at: 21, bytes: 4) else { return nil }
            return ((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
        }
        if starts(head, Array("VP8X".utf8), at: 12) {
            // Extended: the canvas's width − 1 and height − 1 in 24 bits each.
            guard let width = littleEndian(head, at: 24, bytes: 3), let height = littleEndian(head, at: 27, bytes: 3) else { return nil }
            return (width + 1, height + 1)
        }
        return nil
    }

    /// The first start-of-frame segment's size: segments are walked by their lengths from the
    /// start-of-image marker.
    private static func jpegDimensions(_ head: [UInt8]) -> (Int, Int)? {
        var index = 2
        while index + 3 < head.count {
            guard head[index] == 0xFF else { return nil }
            let marker = head[index + 1]
            if marker == 0xFF {  // fill bytes
                index += 1
                continue
            }
            if marker == 0xD8 || marker == 0x01 || (0xD0...0xD7).contains(marker) {  // no length
                index += 2
                continue
            }
            guard let length = bigEndian(head, at: index + 2, bytes: 2), length >= 2 else { return nil }
            // SOF0–SOF15, except DHT (C4), JPG (C8) and DAC (CC).
            if (0xC0...0xCF).contains(marker), marker != 0xC4, marker != 0xC8, marker != 0xCC {
                guard let height = bigEndian(head, at: index + 5, bytes: 2), let width = bigEndian(head, at: index + 7, bytes: 2) else { return nil }
                return (width, height)
            }
            if marker == 0xDA || marker == 0xD9 { return nil }  // the scan or the end, and no frame before it
            index += 2 + length
        }
        return nil
    }

    private static func starts(_ bytes: [UInt8], _ prefix: [UInt8], at offset: Int = 0) -> Bool {
        bytes.count >= offset + prefix.count && bytes[offset..<(offset + prefix.count)].elementsEqual(prefix)
    }

    private static func bigEndian(_ bytes: [UInt8], at offset: Int, bytes count: Int) -> Int? {
        guard offset >= 0, bytes.count >= offset + count else { return nil }
        return bytes[offset..<(offset + count)].reduce(0) { $0 << 8 | Int($1) }
    }

    private static func littleEndian(_ bytes: [UInt8], at offset: Int, bytes count: Int) -> Int? {
        guard offset >= 0, bytes.count >= offset + count else { return nil }
        return bytes[offset..<(offset + count)].reversed().reduce(0) { $0 << 8 | Int($1) }
    }
}
