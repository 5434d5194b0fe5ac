/// Small files of every type whose location Parley removes, built byte by byte with a location in
/// each place phones and cameras put one — for the location tests and as the fuzzers' seeds.
/// Each holds the same place: EXIF rationals 48/1 51/1 2952/100 (``gpsRationals``), XMP text
/// ``xmpLatitude``, QuickTime's ISO 6709 ``iso6709``; and ``keptText`` in metadata that must stay.
public enum LocatedFiles {
    /// The GPS latitude's rationals as EXIF writes them (big-endian).
    public static let gpsRationals: [UInt8] = u32(48) + u32(1) + u32(51) + u32(1) + u32(2952) + u32(100)
    public static let xmpLatitude = "48,51.492N"
    public static let iso6709 = "+48.8582+002.2945/"
    /// What stays: the artist in EXIF and the creator in XMP.
    public static let keptText = "Parley-Test"

    // MARK: EXIF and XMP

    /// A big-endian TIFF structure: IFD0 with the artist and the GPS pointer; the GPS directory
    /// with its version, latitude reference and latitude.
    public static var tiff: [UInt8] {
        func entry(_ tag: Int, _ type: Int, _ count: Int, _ value: [UInt8]) -> [UInt8] {
            u16(tag) + u16(type) + u32(count) + value + [UInt8](repeating: 0, count: 4 - value.count)
        }
        let artist = Array((keptText + "\0").utf8)
        // IFD0 at 8 (2 entries: 30 bytes), the GPS IFD at 38 (3 entries: 42 bytes), its
        // latitude at 80 (24 bytes), the artist at 104.
        var tiff: [UInt8] = [0x4D, 0x4D] + u16(42) + u32(8)
        tiff += u16(2) + entry(0x013B, 2, artist.count, u32(104)) + entry(0x8825, 4, 1, u32(38)) + u32(0)
        tiff += u16(3) + entry(0, 1, 4, [2, 3, 0, 0]) + entry(1, 2, 2, Array("N\0".utf8)) + entry(2, 5, 3, u32(80)) + u32(0)
        return tiff + gpsRationals + artist
    }

    /// An XMP packet with the latitude as an element and the longitude as an attribute.
    public static var xmp: [UInt8] {
        Array("""
            <?xpacket begin='' id='W5M0MpCehiHzreSzNTczkc9d'?>
            <x:xmpmeta xmlns:x='adobe:ns:meta/'><rdf:RDF xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'>
            <rdf:Description rdf:about='' xmlns:exif='http://ns.adobe.com/exif/1.0/' xmlns:dc='http://purl.org/dc/elements/1.1/' exif:GPSLongitude='2,17.67E'>
            <exif:GPSLatitude>\(xmpLatitude)</exif:GPSLatitude>
            <dc:creator><rdf:Seq><rdf:li>\(keptText)</rdf:li></rdf:Seq></dc:creator>
            </rdf:Description></rdf:RDF></x:xmpmeta>
            <?xpacket end='w'?>
            """.utf8)
    }

    // MARK: JPEG

    /// A JPEG: EXIF and XMP after `padding` bytes of another segment (COM), a scan; with
    /// `secondImage`, an MPF index in the first and a second JPEG with its own EXIF after it.
    public static func jpeg(padding: Int = 0, secondImage: Bool = false) -> [UInt8] {
        var head: [UInt8] = [0xFF, 0xD8]
        var left = padding
        while left > 0 {
            let piece = min(left, 65_000)
            head += segment(0xFE, [UInt8](repeating: 0x2E, count: piece))
            left -= piece
        }
        let exif = segment(0xE1, Array("Exif\0\0".utf8) + tiff)
        let xmpSegment = segment(0xE1, Array("http://ns.adobe.com/xap/1.0/\0".utf8) + xmp)
        let body = segment(0xDB, [0] + [UInt8](repeating: 1, count: 64))
            + segment(0xC0, [8, 0, 12, 0, 16, 1, 1, 0x11, 0]) + segment(0xDA, [1, 1, 0, 0, 0x3F, 0]) + [0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD9]
        guard secondImage else { return head + exif + xmpSegment + body }
        let second = [0xFF, 0xD8] + segment(0xE1, Array("Exif\0\0".utf8) + tiff) + body
        // The MPF index: a TIFF header, one directory with the MP entries of both images.
        func mpf(secondOffset: Int) -> [UInt8] {
            var index: [UInt8] = [0x4D, 0x4D] + u16(42) + u32(8) + u16(1)
            index += u16(0xB002) + u16(7) + u32(32) + u32(26) + u32(0)
            index += u32(0x2003_0000) + u32(0) + u32(0) + u32(0) + u32(0) + u32(second.count) + u32(secondOffset) + u32(0)
            return segment(0xE2, Array("MPF\0".utf8) + index)
        }
        let placeholder = mpf(secondOffset: 0)
        let first = head + exif + placeholder + xmpSegment + body
        // Offsets in the index count from its TIFF header, 8 bytes into the segment.
        let tiffStart = head.count + exif.count + 8
        return head + exif + mpf(secondOffset: first.count - tiffStart) + xmpSegment + body + second
    }

    static func segment(_ marker: UInt8, _ body: [UInt8]) -> [UInt8] {
        [0xFF, marker] + u16(body.count + 2) + body
    }

    // MARK: PNG and WebP

    /// A 1×1 PNG with `eXIf` and XMP in `iTXt`.
    public static var png: [UInt8] {
        func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
            let typed = Array(type.utf8) + data
            return u32(data.count) + typed + u32(Int(crc32(typed)))
        }
        let ihdr = u32(1) + u32(1) + [8, 0, 0, 0, 0]
        let idat: [UInt8] = [0x78, 0x01, 0x01, 0x02, 0x00, 0xFD, 0xFF, 0x00, 0x00, 0x00, 0x02, 0x00, 0x01]
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", ihdr) + chunk("eXIf", tiff)
            + chunk("iTXt", Array("XML:com.adobe.xmp\0\0\0\0\0".utf8) + xmp) + chunk("IDAT", idat) + chunk("IEND", [])
    }

    /// A WebP (VP8L, 1×1) with `EXIF` and `XMP ` chunks.
    public static var webp: [UInt8] {
        func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
            Array(type.utf8) + le32(data.count) + data + (data.count % 2 == 1 ? [0] : [])
        }
        let body = Array("WEBP".utf8) + chunk("VP8X", [0x0C, 0, 0, 0, 0, 0, 0, 0, 0, 0]) + chunk("VP8L", [0x2F, 0, 0, 0, 0x10, 0x07, 0x10, 0x11, 0x11, 0x88, 0x88, 0xFE, 0x07, 0x00])
            + chunk("EXIF", tiff) + chunk("XMP ", xmp)
        return Array("RIFF".utf8) + le32(body.count) + body
    }

    // MARK: ISO base media

    static func box(_ type: [UInt8], _ content: [UInt8]) -> [UInt8] { u32(8 + content.count) + type + content }
    static func box(_ type: String, _ content: [UInt8]) -> [UInt8] { box(Array(type.utf8), content) }

    /// A HEIF: `meta` with an Exif and an XMP item, the Exif in `mdat` after `meta` (or in
    /// `idat` with `inItemData`), the XMP in `mdat` over two extents.
    public static func heif(inItemData: Bool = false) -> [UInt8] {
        let exifItem = u32(6) + Array("Exif\0\0".utf8) + tiff
        let ftyp = box("ftyp", Array("heicmif1heic".utf8))
        let hdlr = box("hdlr", u32(0) + u32(0) + Array("pict".utf8) + [UInt8](repeating: 0, count: 13))
        let infe1 = box("infe", [2, 0, 0, 0] + u16(1) + u16(0) + Array("Exif".utf8) + [0])
        let infe2 = box("infe", [2, 0, 0, 0] + u16(2) + u16(0) + Array("mime".utf8) + [0] + Array("application/rdf+xml\0".utf8))
        let iinf = box("iinf", [0, 0, 0, 0] + u16(2) + infe1 + infe2)
        let half = xmp.count / 2
        func iloc(exifOffset: Int, xmpOffset: Int) -> [UInt8] {
            var content: [UInt8] = [1, 0, 0, 0] + [0x44, 0x00] + u16(2)
            content += u16(1) + u16(inItemData ? 1 : 0) + u16(0) + u16(1) + u32(exifOffset) + u32(exifItem.count)
            content += u16(2) + u16(0) + u16(0) + u16(2) + u32(xmpOffset) + u32(half) + u32(xmpOffset + half) + u32(xmp.count - half)
            return box("iloc", content)
        }
        let idat = inItemData ? box("idat", exifItem) : []
        let metaLength = 8 + 4 + hdlr.count + iinf.count + iloc(exifOffset: 0, xmpOffset: 0).count + idat.count
        let mdatContent = (inItemData ? [] : exifItem) + xmp
        let mdatStart = ftyp.count + metaLength + 8
        let exifOffset = inItemData ? 0 : mdatStart
        let xmpOffset = mdatStart + (inItemData ? 0 : exifItem.count)
        let meta = box("meta", [0, 0, 0, 0] + hdlr + iinf + iloc(exifOffset: exifOffset, xmpOffset: xmpOffset) + idat)
        return ftyp + meta + box("mdat", mdatContent)
    }

    /// A QuickTime movie: `mdat` first, then `moov` with a `©xyz` in `udta` and a `meta` whose
    /// `keys` name the artist and `com.apple.quicktime.location.ISO6709`, with their values in
    /// `ilst`; a 3GPP `loci`; XMP in a `uuid` box.
    public static var quickTime: [UInt8] {
        let ftyp = box("ftyp", Array("qt  ".utf8) + u32(0) + Array("qt  ".utf8))
        let mdat = box("mdat", [UInt8](repeating: 0xAB, count: 64))
        let place = Array(iso6709.utf8)
        let xyz = box([0xA9, 0x78, 0x79, 0x7A], u16(place.count) + u16(0x15C7) + place)
        let loci = box("loci", [0, 0, 0, 0] + u16(0x15C7) + Array("Tour Eiffel\0".utf8) + [0] + u32(0x0002_4B85) + u32(0x0030_DBAB) + u32(35 << 16) + [0, 0])
        let hdlr = box("hdlr", u32(0) + u32(0) + Array("mdta".utf8) + [UInt8](repeating: 0, count: 13))
        let artistKey = Array("com.apple.quicktime.artist".utf8), placeKey = Array("com.apple.quicktime.location.ISO6709".utf8)
        let keys = box("keys", u32(0) + u32(2) + u32(8 + artistKey.count) + Array("mdta".utf8) + artistKey + u32(8 + placeKey.count) + Array("mdta".utf8) + placeKey)
        func value(_ text: String) -> [UInt8] { box("data", u32(1) + u32(0) + Array(text.utf8)) }
        let ilst = box("ilst", box(u32(1), value(keptText)) + box(u32(2), value(iso6709)))
        let meta = box("meta", hdlr + keys + ilst)
        let uuid = box("uuid", [0xBE, 0x7A, 0xCF, 0xCB, 0x97, 0xA9, 0x42, 0xE8, 0x9C, 0x71, 0x99, 0x94, 0x91, 0xE3, 0xAF, 0xAC] + xmp)
        let moov = box("moov", box("mvhd", [UInt8](repeating: 0, count: 100)) + box("udta", xyz + loci) + meta)
        return ftyp + mdat + moov + uuid
    }

    // MARK: Bytes

    static func u16(_ value: Int) -> [UInt8] { [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
    static func u32(_ value: Int) -> [UInt8] { [UInt8(value >> 24 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
    static func le32(_ value: Int) -> [UInt8] { u32(value).reversed() }

    /// PNG's CRC-32, bit by bit: written apart from the stripper's table-driven one, so that each
    /// checks the other.
    public static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1 }
        }
        return crc ^ 0xFFFF_FFFF
    }
}
