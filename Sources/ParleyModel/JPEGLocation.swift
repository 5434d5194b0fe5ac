/// Removes where a JPEG was taken from its EXIF metadata: phones record it (the GPS IFD: latitude,
/// longitude, altitude, time, direction) and people sending a photo in a chat rarely mean to share
/// it. The bytes are changed in place and keep their length: each GPS field's value is zeroed and
/// the GPS directory is left empty (its pointer from the main directory stays, to an IFD of no
/// entries, which every reader takes), so every other offset in the file stays right and the rest
/// of the metadata (orientation, camera, time taken) is untouched.
///
/// Reads only the bytes it is given (an upload's first bytes: EXIF sits in an APP1 segment of at
/// most 64 KiB near the start); every offset is checked, so hostile bytes are left as they are,
/// never a trap.
public enum JPEGLocation {
    /// Strips the GPS fields of the EXIF segment in `jpeg`; whether there were any.
    @discardableResult
    public static func strip(_ jpeg: inout [UInt8]) -> Bool {
        guard jpeg.count >= 4, jpeg[0] == 0xFF, jpeg[1] == 0xD8 else { return false }
        var index = 2
        while index + 4 <= jpeg.count {
            guard jpeg[index] == 0xFF else { return false }
            let marker = jpeg[index + 1]
            switch marker {
            case 0xFF:
                index += 1  // fill byte
                continue
            case 0x01, 0xD0...0xD8:
                index += 2  // markers without a length
                continue
            case 0xD9, 0xDA:
                return false  // the image data begins: no EXIF before it
            default:
                break
            }
            let length = Int(jpeg[index + 2]) << 8 | Int(jpeg[index + 3])
            guard length >= 2 else { return false }
            let start = index + 4, end = index + 2 + length
            guard end <= jpeg.count else { return false }
            if marker == 0xE1, end - start >= 14, Array(jpeg[start..<start + 6]) == Array("Exif\0\0".utf8) {
                return stripGPS(&jpeg, tiff: start + 6, end: end)
            }
            index = end
        }
        return false
    }

    /// The GPS IFD of the TIFF structure in `jpeg[tiff..<end]`, emptied.
    private static func stripGPS(_ jpeg: inout [UInt8], tiff: Int, end: Int) -> Bool {
        let length = end - tiff
        let littleEndian: Bool
        switch (jpeg[tiff], jpeg[tiff + 1]) {
        case (0x49, 0x49): littleEndian = true
        case (0x4D, 0x4D): littleEndian = false
        default: return false
        }
        func read(_ offset: Int, _ size: Int) -> Int? {
            guard offset >= 0, size <= 4, offset <= length - size else { return nil }
            var value = 0
            for byte in 0..<size {
                let shift = littleEndian ? 8 * byte : 8 * (size - 1 - byte)
                value |= Int(jpeg[tiff + offset + byte]) << shift
            }
            return value
        }
        func zero(_ offset: Int, _ size: Int) {
            guard offset >= 0, size >= 0, offset <= length - size else { return }
            for byte in 0..<size { jpeg[tiff + offset + byte] = 0 }
        }
        guard let ifd0 = read(4, 4), let entries = read(ifd0, 2) else { return false }
        var gps: Int?
        for entry in 0..<entries {
            let at = ifd0 + 2 + 12 * entry
            guard let tag = read(at, 2) else { return false }
            if tag == 0x8825 {
                gps = read(at + 8, 4)
                break
            }
        }
        guard let gps, let fields = read(gps, 2), fields > 0, gps + 2 + 12 * fields <= length else { return false }
        for field in 0..<fields {
            let at = gps + 2 + 12 * field
            guard let type = read(at + 2, 2), let count = read(at + 4, 4) else { continue }
            // A value over 4 bytes lives elsewhere, at the offset the field holds.
            if let unit = unitSize[type], count <= length, unit * count > 4, let offset = read(at + 8, 4) {
                zero(offset, unit * count)
            }
            zero(at, 12)
        }
        zero(gps, 2)  // no fields: what follows (zeros) reads as "no next directory"
        return true
    }

    /// Bytes per value of each TIFF field type.
    private static let unitSize: [Int: Int] = [1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8]
}
