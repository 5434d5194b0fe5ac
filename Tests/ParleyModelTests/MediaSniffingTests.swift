import ParleyModel
import Testing

/// The type an upload's bytes begin as, and an image's size from its header: each accepted type
/// from the header its format documents, sizes where they sit in each format, and nil — never a
/// trap — for anything truncated, unknown or hostile.
@Suite struct MediaSniffingTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
    static func le(_ value: Int, _ count: Int) -> [UInt8] { (0..<count).map { UInt8((value >> (8 * $0)) & 0xFF) } }
    static func be(_ value: Int, _ count: Int) -> [UInt8] { le(value, count).reversed() }

    static let png = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + be(13, 4) + bytes("IHDR") + be(640, 4) + be(480, 4) + [8, 6, 0, 0, 0]
    static let gif = bytes("GIF89a") + le(320, 2) + le(200, 2) + [0xF7, 0, 0]
    /// A JPEG as phones write them: an APP1 (EXIF) segment before the frame header.
    static let jpeg: [UInt8] = [0xFF, 0xD8] + [0xFF, 0xE1] + be(2 + 300, 2) + Array(repeating: 0x45, count: 300)
        + [0xFF, 0xDB] + be(2 + 65, 2) + Array(repeating: 1, count: 65)
        + [0xFF, 0xC2] + be(17, 2) + [8] + be(3024, 2) + be(4032, 2) + [3] + Array(repeating: 0, count: 9)
    static func webp(_ chunk: String, _ data: [UInt8]) -> [UInt8] { bytes("RIFF") + le(4 + 8 + data.count, 4) + bytes("WEBP") + bytes(chunk) + le(data.count, 4) + data }
    static func ftyp(_ brand: String) -> [UInt8] { be(20, 4) + bytes("ftyp") + bytes(brand) + be(0, 4) + bytes("isom") }

    @Test func eachAcceptedTypeIsKnownByItsFirstBytes() {
        let cases: [([UInt8], String)] = [
            (Self.jpeg, "image/jpeg"), (Self.png, "image/png"), (Self.gif, "image/gif"), (Self.bytes("GIF87a") + [1, 0, 1, 0], "image/gif"),
            (Self.webp("VP8X", Array(repeating: 0, count: 10)), "image/webp"), (Self.ftyp("heic"), "image/heic"), (Self.ftyp("mif1"), "image/heic"),
            (Self.ftyp("isom"), "video/mp4"), (Self.ftyp("mp42"), "video/mp4"), (Self.ftyp("qt  "), "video/quicktime"), (Self.ftyp("M4A "), "audio/mp4"),
            ([0xFF, 0xF1, 0x50, 0x80], "audio/aac"), (Self.bytes("OggS") + [0, 2], "audio/ogg"), (Self.bytes("%PDF-1.7\n"), "application/pdf"),
        ]
        for (head, type) in cases {
            #expect(MediaSniffing.contentType(of: head) == type, "\(type)")
            #expect(MediaSniffing.contentTypes.contains(type))
        }
    }

    @Test func otherBytesAreNoAcceptedType() {
        for head in [[], [0xFF], [0xFF, 0xD8], Self.bytes("<html>"), Self.bytes("RIFF") + [0, 0, 0, 0] + Self.bytes("WAVE"), Self.ftyp("abcd"),
                     Self.bytes("MZ\u{90}"), [0x89, 0x50, 0x4E, 0x47], Self.bytes("GIF90a")] as [[UInt8]] {
            #expect(MediaSniffing.contentType(of: head) == nil, "\(head.prefix(12))")
        }
    }

    @Test func imagesTellTheirSizeFromTheirHeaders() {
        #expect(MediaSniffing.dimensions(of: Self.png, contentType: "image/png").map { [$0.width, $0.height] } == [640, 480])
        #expect(MediaSniffing.dimensions(of: Self.gif, contentType: "image/gif").map { [$0.width, $0.height] } == [320, 200])
        #expect(MediaSniffing.dimensions(of: Self.jpeg, contentType: "image/jpeg").map { [$0.width, $0.height] } == [4032, 3024], "past the EXIF segment")
        let lossy = Self.webp("VP8 ", [0x30, 0x01, 0x00, 0x9D, 0x01, 0x2A] + Self.le(1024, 2) + Self.le(768, 2))
        #expect(MediaSniffing.dimensions(of: lossy, contentType: "image/webp").map { [$0.width, $0.height] } == [1024, 768])
        let lossless = Self.webp("VP8L", [0x2F] + Self.le((99 & 0x3FFF) | ((49 & 0x3FFF) << 14), 4))
        #expect(MediaSniffing.dimensions(of: lossless, contentType: "image/webp").map { [$0.width, $0.height] } == [100, 50])
        let extended = Self.webp("VP8X", [0x10, 0, 0, 0] + Self.le(1919, 3) + Self.le(1079, 3))
        #expect(MediaSniffing.dimensions(of: extended, contentType: "image/webp").map { [$0.width, $0.height] } == [1920, 1080])
        #expect(MediaSniffing.dimensions(of: Self.bytes("%PDF-1.7"), contentType: "application/pdf") == nil, "not an image")
    }

    @Test func aHeaderCutShortOrSayingZeroHasNoSize() {
        for length in 0..<Self.png.count where length < 24 {
            #expect(MediaSniffing.dimensions(of: Array(Self.png.prefix(length)), contentType: "image/png") == nil)
        }
        for length in 0..<Self.jpeg.count - 14 {
            #expect(MediaSniffing.dimensions(of: Array(Self.jpeg.prefix(length)), contentType: "image/jpeg") == nil, "\(length) bytes")
        }
        var zero = Self.gif
        zero[6] = 0
        zero[7] = 0
        #expect(MediaSniffing.dimensions(of: zero, contentType: "image/gif") == nil)
        // A JPEG whose segment lengths lead nowhere, or to a scan before any frame.
        #expect(MediaSniffing.dimensions(of: [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x00], contentType: "image/jpeg") == nil)
        #expect(MediaSniffing.dimensions(of: [0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x08, 0, 0, 0, 0, 0, 0], contentType: "image/jpeg") == nil)
    }

    @Test func randomAndMutatedBytesNeverTrap() {
        var random = SeededRandom(seed: 0x5EED)
        let seeds = [Self.png, Self.gif, Self.jpeg, Self.webp("VP8X", Array(repeating: 0, count: 10)), Self.ftyp("heic")]
        for round in 0..<5_000 {
            var head = seeds[round % seeds.count]
            for _ in 0..<Int.random(in: 1...8, using: &random) {
                guard !head.isEmpty else { break }
                head[Int.random(in: 0..<head.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            }
            if Bool.random(using: &random) { head = Array(head.prefix(Int.random(in: 0...head.count, using: &random))) }
            let type = MediaSniffing.contentType(of: head)
            for candidate in ["image/png", "image/gif", "image/jpeg", "image/webp"] {
                if let size = MediaSniffing.dimensions(of: head, contentType: type ?? candidate) {
                    #expect(size.width > 0 && size.height > 0 && size.width <= 1 << 20 && size.height <= 1 << 20)
                }
            }
        }
    }
}
