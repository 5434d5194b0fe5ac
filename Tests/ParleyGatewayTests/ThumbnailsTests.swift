import Foundation
import ParleyImaging
import ParleyModel
import Testing

@Suite struct ThumbnailsTests {
    /// A `width` × `height` gradient, different for each seed.
    static func pixels(width: Int, height: Int, seed: Int = 0) -> [UInt8] {
        var pixels = [UInt8](repeating: 0, count: width * height * 3)
        for y in 0..<height {
            for x in 0..<width {
                let i = (y * width + x) * 3
                pixels[i] = UInt8(truncatingIfNeeded: x * 255 / width + seed)
                pixels[i + 1] = UInt8(truncatingIfNeeded: y * 255 / height)
                pixels[i + 2] = UInt8(truncatingIfNeeded: (x ^ y) + seed * 7)
            }
        }
        return pixels
    }

    func thumbnail(_ image: [UInt8], size: Int) throws -> (bytes: [UInt8], width: Int?, height: Int?) {
        let bytes = try image.withUnsafeBytes { try Thumbnails.jpeg(of: $0, size: size) }
        let dimensions = MediaSniffing.dimensions(of: bytes, contentType: "image/jpeg")
        return (bytes, dimensions?.width, dimensions?.height)
    }

    @Test(arguments: Thumbnails.sizes)
    func aLandscapePhotoFitsItsLongerSide(size: Int) throws {
        let photo = try Thumbnails.jpeg(rgb: Self.pixels(width: 1200, height: 800), width: 1200, height: 800)
        #expect(MediaSniffing.contentType(of: photo) == "image/jpeg")
        let made = try thumbnail(photo, size: size)
        #expect(MediaSniffing.contentType(of: made.bytes) == "image/jpeg")
        #expect(made.width == size)
        #expect(made.height == Int((Double(size) * 2 / 3).rounded()))
        #expect(made.bytes.count < photo.count)
    }

    @Test func aPortraitFitsItsHeightAndASmallImageIsNotEnlarged() throws {
        let portrait = try Thumbnails.jpeg(rgb: Self.pixels(width: 300, height: 900), width: 300, height: 900)
        let made = try thumbnail(portrait, size: 320)
        #expect(made.width == 107 && made.height == 320)
        let small = try Thumbnails.jpeg(rgb: Self.pixels(width: 100, height: 50), width: 100, height: 50)
        let same = try thumbnail(small, size: 640)
        #expect(same.width == 100 && same.height == 50)
    }

    @Test func aTransparentPNGBecomesAJPEGOnWhite() throws {
        // 2 × 1 RGBA: a transparent pixel and an opaque black one, stored uncompressed.
        let png = PNG.rgba(width: 2, height: 1, pixels: [0, 0, 0, 0, 0, 0, 0, 255])
        let made = try thumbnail(png, size: 160)
        #expect(MediaSniffing.contentType(of: made.bytes) == "image/jpeg")
        #expect(made.width == 2 && made.height == 1)
    }

    /// A small file whose header claims 60,000 × 60,000 pixels is refused by that header before
    /// libvips decodes anything — whatever the upload's own header sniff found (nothing, for a
    /// frame header past its first 128 KiB or a HEIC).
    @Test func aHugeImageIsRefusedByItsHeaderBeforeItIsDecoded() throws {
        var jpeg = try Thumbnails.jpeg(rgb: Self.pixels(width: 8, height: 8), width: 8, height: 8)
        guard let sof = (2..<(jpeg.count - 9)).first(where: { jpeg[$0] == 0xFF && (jpeg[$0 + 1] == 0xC0 || jpeg[$0 + 1] == 0xC2) }) else {
            Issue.record("no frame header in the JPEG")
            return
        }
        jpeg.replaceSubrange((sof + 5)..<(sof + 9), with: [0xEA, 0x60, 0xEA, 0x60])  // 60,000 × 60,000
        do {
            _ = try jpeg.withUnsafeBytes { try Thumbnails.jpeg(of: $0, size: 160) }
            Issue.record("a 3.6-gigapixel image was made a thumbnail of")
        } catch {
            #expect("\(error)".contains("more than \(Thumbnails.pixelsMax) pixels"), "\(error)")
        }
    }

    @Test func bytesThatDoNotDecodeAreRefusedNeverTrap() throws {
        var truncated = try Thumbnails.jpeg(rgb: Self.pixels(width: 64, height: 64), width: 64, height: 64)
        truncated.removeLast(truncated.count - 20)
        var random = SeededRandom(seed: 35)
        let inputs: [[UInt8]] = [
            [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + [UInt8](repeating: 0, count: 100),
            Array("%PDF-1.4 not an image".utf8),
            truncated,
            (0..<5000).map { _ in UInt8.random(in: 0...255, using: &random) },
        ]
        for input in inputs {
            #expect(throws: Thumbnails.Failure.self) { try thumbnail(input, size: 160) }
        }
        #expect(throws: Thumbnails.Failure.self) { try Thumbnails.jpeg(of: UnsafeRawBufferPointer(start: nil, count: 0), size: 160) }
    }
}

/// Minimal PNG files for tests: uncompressed (stored) deflate blocks.
enum PNG {
    static func rgba(width: Int, height: Int, pixels: [UInt8]) -> [UInt8] {
        var raw: [UInt8] = []
        for row in 0..<height {
            raw.append(0)
            raw += pixels[(row * width * 4)..<((row + 1) * width * 4)]
        }
        var zlib: [UInt8] = [0x78, 0x01, 0x01]
        zlib += [UInt8(raw.count & 0xFF), UInt8(raw.count >> 8), UInt8(~raw.count & 0xFF), UInt8((~raw.count >> 8) & 0xFF)]
        zlib += raw
        var (a, b): (UInt32, UInt32) = (1, 0)
        for byte in raw { a = (a + UInt32(byte)) % 65521; b = (b + a) % 65521 }
        zlib += bigEndian((b << 16) | a)
        var header = bigEndian(UInt32(width)) + bigEndian(UInt32(height))
        header += [8, 6, 0, 0, 0]
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", header) + chunk("IDAT", zlib) + chunk("IEND", [])
    }

    static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)]
    }

    static func chunk(_ kind: String, _ data: [UInt8]) -> [UInt8] {
        let body = Array(kind.utf8) + data
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in body {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return bigEndian(UInt32(data.count)) + body + bigEndian(~crc)
    }
}
