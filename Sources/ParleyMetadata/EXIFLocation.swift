/// Where a photo was taken, as EXIF holds it: the GPS directory of a TIFF structure (latitude,
/// longitude, altitude, time, direction, area and place names). The same structure sits in a
/// JPEG's APP1, a PNG's `eXIf`, a WebP's `EXIF` and a HEIF's Exif item.
///
/// Each GPS field's value is zeroed and the directory is left with no entries (the pointer to
/// it stays, to a directory of none, which every reader takes), so every other offset stays
/// right and the rest of the metadata (orientation, camera, time taken) is untouched.
enum EXIFLocation {
    /// The ranges of `tiff` (a TIFF header and what it points to) to zero. A structure that is
    /// not TIFF, or whose directories point outside it, is refused: its GPS fields could not be
    /// found for sure.
    static func ranges(in tiff: [UInt8]) throws -> [Range<Int>] {
        let length = tiff.count
        let littleEndian: Bool
        switch (tiff.count >= 8 ? tiff[0] : 0, tiff.count >= 8 ? tiff[1] : 0) {
        case (0x49, 0x49): littleEndian = true
        case (0x4D, 0x4D): littleEndian = false
        default: throw LocationRefusal("its EXIF is not a TIFF structure")
        }
        func read(_ offset: Int, _ size: Int) -> Int? {
            guard offset >= 0, offset <= length - size else { return nil }
            var value = 0
            for byte in 0..<size {
                let shift = littleEndian ? 8 * byte : 8 * (size - 1 - byte)
                value |= Int(tiff[offset + byte]) << shift
            }
            return value
        }
        func directory(at offset: Int) throws -> (entries: Int, end: Int) {
            guard let entries = read(offset, 2), offset + 2 + 12 * entries + 4 <= length else {
                throw LocationRefusal("an EXIF directory lies outside its EXIF")
            }
            return (entries, offset + 2 + 12 * entries)
        }
        guard read(2, 2) == 42, let first = read(4, 4) else { throw LocationRefusal("its EXIF is not a TIFF structure") }
        // The GPS pointer is in IFD0; IFD1 (the thumbnail's) is looked in as well, since a
        // reader following every directory would find one there.
        var gpsDirectories: Set<Int> = []
        var ifd = first
        var seen: Set<Int> = []
        while ifd != 0, seen.count < 4, seen.insert(ifd).inserted {
            let (entries, end) = try directory(at: ifd)
            for entry in 0..<entries {
                let at = ifd + 2 + 12 * entry
                guard read(at, 2) == 0x8825, let gps = read(at + 8, 4) else { continue }
                gpsDirectories.insert(gps)
            }
            ifd = read(end, 4) ?? 0
        }
        var zeroed: [Range<Int>] = []
        for gps in gpsDirectories.sorted() {
            let (fields, end) = try directory(at: gps)
            for field in 0..<fields {
                let at = gps + 2 + 12 * field
                guard let type = read(at + 2, 2), let count = read(at + 4, 4) else { continue }
                // A value over 4 bytes lives elsewhere, at the offset the field holds.
                if let unit = unitSize[type], count <= length, unit * count > 4, let offset = read(at + 8, 4),
                    offset <= length - unit * count
                {
                    zeroed.append(offset..<(offset + unit * count))
                }
            }
            // The entries and the count before them: no fields, and what follows (zeros) reads
            // as "no next directory".
            zeroed.append(gps..<end)
        }
        return zeroed
    }

    /// Bytes per value of each TIFF field type.
    private static let unitSize: [Int: Int] = [1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8]

    /// Zeroes the GPS fields of the TIFF structure that `span` holds.
    static func strip<Source: ByteSource>(_ span: Span, _ reader: Reader<Source>, into edits: inout LocationEdits) throws {
        let tiff = try span.read(reader, "an EXIF block")
        for range in try ranges(in: tiff) {
            try span.fill(range, with: 0, in: &edits)
        }
    }

    /// A `span` that may begin with `Exif\0\0` (as in JPEG; some writers put it in PNG, WebP and
    /// HEIF too), without it.
    static func skippingHeader<Source: ByteSource>(_ span: Span, _ reader: Reader<Source>) throws -> Span {
        guard span.count >= 6 else { return span }
        let head = try span.prefix(6).read(reader, "an EXIF block")
        guard head == Array("Exif\0\0".utf8) else { return span }
        return span.dropping(6)
    }
}

extension Span {
    /// The span's first `count` bytes.
    func prefix(_ count: Int) -> Span {
        var kept: [Piece] = []
        for piece in pieces where piece.virtual < count {
            kept.append(Piece(virtual: piece.virtual, file: piece.file, length: min(piece.length, count - piece.virtual)))
        }
        return Span(pieces: kept)
    }

    /// The span without its first `count` bytes.
    func dropping(_ count: Int) -> Span {
        var kept: [Piece] = []
        for piece in pieces {
            let start = max(piece.virtual, count), end = piece.virtual + piece.length
            guard start < end else { continue }
            kept.append(Piece(virtual: start - count, file: piece.file + start - piece.virtual, length: end - start))
        }
        return Span(pieces: kept)
    }
}
