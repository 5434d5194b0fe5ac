/// A JPEG's location: every EXIF APP1 segment (its GPS directory, ``EXIFLocation``) and every XMP
/// APP1 segment, standard or extended (``XMPLocation``), wherever they lie — before the first
/// scan, between scans, after many kilobytes of other segments — and the same in each image the
/// file holds besides the first: those its MPF index lists (a phone's HDR gain map, a depth
/// map, a preview) and any JPEG that directly follows the end of another. Bytes after the last
/// image that are no JPEG (a vendor's trailer) are left as they are.
enum JPEGMetadata {
    /// At most this many images in one file: a phone writes two or three.
    static let imagesMax = 32

    static func edits<Source: ByteSource>(_ reader: Reader<Source>) throws -> LocationEdits {
        var walk = Walk(reader: reader)
        var pending = [0]
        var walked: Set<Int> = []
        while let start = pending.popLast() {
            guard walked.insert(start).inserted else { continue }
            guard walked.count <= imagesMax else { throw LocationRefusal("it holds more than \(imagesMax) JPEG images") }
            let image = try walk.image(at: start)
            pending += image.others
        }
        try walk.finishExtendedXMP()
        return walk.edits
    }

    private struct Walk<Source: ByteSource> {
        let reader: Reader<Source>
        var edits = LocationEdits()
        /// Bytes scanned for markers so far, against the file's size: images that overlap would
        /// otherwise be scanned again and again.
        var scanned = 0
        /// Extended XMP, by its GUID: the pieces of each packet, which are walked once all are in.
        var extended: [[UInt8]: (length: Int, pieces: [Span.Piece])] = [:]

        init(reader: Reader<Source>) {
            self.reader = reader
        }

        /// Walks the image at `start` to its end; the images it points to (MPF), and one that
        /// begins where it ends.
        mutating func image(at start: Int) throws -> (end: Int, others: [Int]) {
            guard try reader.bytes(start, 2, "an image of the JPEG") == [0xFF, 0xD8] else {
                throw LocationRefusal("an image of the JPEG, at byte \(start), does not begin as a JPEG")
            }
            var others: [Int] = []
            var index = start + 2
            while true {
                // The next marker: 0xFF then a byte other than 0x00 (a stuffed 0xFF in scan
                // data), 0xFF (fill) or a restart marker; scan data and stray bytes are skipped.
                guard let marker = try nextMarker(from: &index) else { return (reader.count, others) }
                switch marker {
                case 0x01, 0xD8:
                    index += 2
                    continue
                case 0xD9:
                    let end = index + 2
                    // A JPEG that begins right where this one ends (MPF writers put the others there).
                    if end + 2 <= reader.count, try reader.bytes(end, 2, "bytes after an image") == [0xFF, 0xD8] { others.append(end) }
                    return (end, others)
                default:
                    break
                }
                let length = try reader.bigEndian(index + 2, 2, "a JPEG segment")
                guard length >= 2 else { throw LocationRefusal("a JPEG segment at byte \(index) has a length of \(length)") }
                let body = index + 4, end = index + 2 + length
                guard end <= reader.count else { throw LocationRefusal("a JPEG segment at byte \(index) runs past the end of the file") }
                let span = Span(file: body..<end)
                if marker == 0xE1 {
                    try app1(span)
                } else if marker == 0xE2, length >= 2 + 8, try reader.bytes(body, 4, "an APP2 segment") == Array("MPF\0".utf8) {
                    others += try mpf(tiffAt: body + 4, span.dropping(4))
                }
                index = end
            }
        }

        private mutating func app1(_ span: Span) throws {
            let head = try span.prefix(35).read(reader, "an APP1 segment")
            if head.starts(with: "Exif\0\0") {
                try EXIFLocation.strip(span.dropping(6), reader, into: &edits)
            } else if head.starts(with: "http://ns.adobe.com/xap/1.0/\0") {
                try XMPLocation.strip(span.dropping(29), reader, into: &edits)
            } else if head.starts(with: "http://ns.adobe.com/xmp/extension/\0") {
                // A GUID (32 hex digits), the whole packet's length and this piece's offset in it.
                let header = try span.dropping(35).prefix(40).read(reader, "an extended XMP segment")
                guard header.count == 40, let length = header.bigEndian(at: 32, 4), let offset = header.bigEndian(at: 36, 4) else {
                    throw LocationRefusal("an extended XMP segment is cut short")
                }
                let data = span.dropping(75)
                let guid = Array(header[0..<32])
                guard let piece = data.pieces.first, length <= reader.count, offset <= length - piece.length else {
                    throw LocationRefusal("an extended XMP segment's piece lies outside its packet")
                }
                var packet = extended[guid] ?? (length, [])
                guard packet.length == length else { throw LocationRefusal("an extended XMP packet's pieces disagree on its length") }
                packet.pieces.append(Span.Piece(virtual: offset, file: piece.file, length: piece.length))
                extended[guid] = packet
            }
        }

        /// Each extended XMP packet, gathered from its pieces, walked as one.
        mutating func finishExtendedXMP() throws {
            for (_, packet) in extended {
                let covered = packet.pieces.reduce(0) { $0 + $1.length }
                guard covered == packet.length else { throw LocationRefusal("an extended XMP packet is missing pieces") }
                try XMPLocation.strip(Span(pieces: packet.pieces), reader, into: &edits)
            }
        }

        /// The images an MPF index lists, other than the first (which is this one), as file offsets.
        private func mpf(tiffAt tiff: Int, _ span: Span) throws -> [Int] {
            let bytes = try span.read(reader, "an MPF segment")
            let littleEndian: Bool
            switch (bytes.count >= 8 ? bytes[0] : 0, bytes.count >= 8 ? bytes[1] : 0) {
            case (0x49, 0x49): littleEndian = true
            case (0x4D, 0x4D): littleEndian = false
            default: throw LocationRefusal("its MPF index is not a TIFF structure")
            }
            func read(_ offset: Int, _ size: Int) throws -> Int {
                guard offset >= 0, offset <= bytes.count - size else { throw LocationRefusal("its MPF index points outside itself") }
                return (0..<size).reduce(0) { value, byte in
                    value | Int(bytes[offset + byte]) << (littleEndian ? 8 * byte : 8 * (size - 1 - byte))
                }
            }
            let ifd = try read(4, 4)
            let entries = try read(ifd, 2)
            var images: [Int] = []
            for entry in 0..<entries {
                let at = ifd + 2 + 12 * entry
                guard try read(at, 2) == 0xB002 else { continue }
                // MP entries: 16 bytes each — attributes, size, offset (from the TIFF header), two dependents.
                let count = try read(at + 4, 4), list = try read(at + 8, 4)
                guard count % 16 == 0, count / 16 <= imagesMax else { throw LocationRefusal("its MPF index lists more than \(imagesMax) images") }
                for image in 0..<(count / 16) {
                    let offset = try read(list + 16 * image + 8, 4)
                    if offset != 0 { images.append(tiff + offset) }
                }
            }
            return images
        }

        /// The marker at or after `index` (which it is left at), or nil at the end of the file.
        private mutating func nextMarker(from index: inout Int) throws -> UInt8? {
            // Segments follow one another: the marker is where the last one ended, and only scan
            // data or stray bytes are scanned.
            if index + 2 <= reader.count {
                let here = try reader.bytes(index, 2, "a JPEG marker")
                if here[0] == 0xFF, here[1] != 0x00, here[1] != 0xFF, !(0xD0...0xD7).contains(here[1]) { return here[1] }
            }
            let window = 64 * 1024
            var at = index
            while at < reader.count - 1 {
                let length = min(window, reader.count - at)
                guard scanned <= 2 * reader.count + 1 << 20 else { throw LocationRefusal("its JPEG images overlap") }
                scanned += length
                let bytes = try reader.bytes(at, length, "a JPEG")
                var offset = 0
                while offset < bytes.count - 1 {
                    if bytes[offset] == 0xFF {
                        let marker = bytes[offset + 1]
                        if marker != 0x00, marker != 0xFF, !(0xD0...0xD7).contains(marker) {
                            index = at + offset
                            return marker
                        }
                    }
                    offset += 1
                }
                // The last byte of the window is looked at again with the one after it.
                at += max(1, bytes.count - 1)
            }
            return nil
        }
    }
}
