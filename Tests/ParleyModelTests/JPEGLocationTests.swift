import ParleyModel
import Testing

/// Location stripped from a JPEG's EXIF, everything else kept, in both byte orders.
@Suite struct JPEGLocationTests {
    /// A JPEG with an EXIF segment: IFD0 holds Orientation (6) and the GPS pointer; the GPS IFD
    /// holds GPSVersionID (inline bytes), GPSLatitudeRef "N" (inline) and GPSLatitude, three
    /// rationals 48/1 51/1 3007/100 stored after the directory. Then a quantization table, a
    /// scan and the end.
    static func exifJPEG(littleEndian: Bool) -> [UInt8] {
        func u16(_ value: Int) -> [UInt8] {
            let bytes = [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
            return littleEndian ? bytes.reversed() : bytes
        }
        func u32(_ value: Int) -> [UInt8] {
            let bytes = [UInt8(value >> 24 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
            return littleEndian ? bytes.reversed() : bytes
        }
        func entry(_ tag: Int, _ type: Int, _ count: Int, _ value: [UInt8]) -> [UInt8] {
            u16(tag) + u16(type) + u32(count) + value + Array(repeating: 0, count: 4 - value.count)
        }
        var tiff: [UInt8] = littleEndian ? [0x49, 0x49] : [0x4D, 0x4D]
        tiff += u16(42) + u32(8)
        // IFD0 at 8: 2 entries, 30 bytes; the GPS IFD at 38: 3 entries, 42 bytes; its latitude at 80.
        tiff += u16(2) + entry(0x0112, 3, 1, u16(6)) + entry(0x8825, 4, 1, u32(38)) + u32(0)
        tiff += u16(3) + entry(0x0000, 1, 4, [2, 3, 0, 0]) + entry(0x0001, 2, 2, Array("N\0".utf8)) + entry(0x0002, 5, 3, u32(80)) + u32(0)
        for (numerator, denominator) in [(48, 1), (51, 1), (3007, 100)] { tiff += u32(numerator) + u32(denominator) }
        let exif = Array("Exif\0\0".utf8) + tiff
        let app1: [UInt8] = [0xFF, 0xE1, UInt8((exif.count + 2) >> 8), UInt8((exif.count + 2) & 0xFF)] + exif
        let dqt: [UInt8] = [0xFF, 0xDB, 0x00, 0x43, 0x00] + Array(repeating: 1, count: 64)
        return [0xFF, 0xD8] + app1 + dqt + [0xFF, 0xDA, 0x00, 0x08, 1, 1, 0, 0, 0x3F, 0, 0x12, 0x34, 0xFF, 0xD9]
    }

    @Test(arguments: [true, false])
    func theGPSFieldsAreZeroedAndTheRestKept(littleEndian: Bool) {
        let original = Self.exifJPEG(littleEndian: littleEndian)
        var jpeg = original
        #expect(JPEGLocation.strip(&jpeg))
        #expect(jpeg.count == original.count, "offsets stay right")
        let tiff = 2 + 4 + 6  // SOI, the APP1 marker and length, "Exif\0\0"
        // The GPS IFD (42 bytes at 38) and the latitude (24 bytes at 80) are zeros now.
        #expect(jpeg[(tiff + 38)..<(tiff + 80 + 24)].allSatisfy { $0 == 0 })
        #expect(original[(tiff + 80)..<(tiff + 80 + 24)].contains { $0 != 0 }, "the latitude was there")
        // Everything before (the header, IFD0 with its orientation and the GPS pointer) and after is as it was.
        #expect(jpeg[..<(tiff + 38)] == original[..<(tiff + 38)])
        #expect(jpeg[(tiff + 104)...] == original[(tiff + 104)...])
        #expect(MediaSniffing.contentType(of: jpeg) == "image/jpeg")
        var again = jpeg
        #expect(!JPEGLocation.strip(&again), "an empty GPS directory has nothing left to strip")
        #expect(again == jpeg)
    }

    @Test func jpegsWithoutLocationAndOtherBytesAreLeftAlone() {
        var plain: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10] + Array("JFIF\0".utf8) + Array(repeating: 1, count: 9) + [0xFF, 0xD9]
        let before = plain
        #expect(!JPEGLocation.strip(&plain))
        #expect(plain == before)
        var png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        #expect(!JPEGLocation.strip(&png))
        var empty: [UInt8] = []
        #expect(!JPEGLocation.strip(&empty))
    }

    @Test func mutatedAndCutExifNeverTraps() {
        var random = SeededRandom(seed: 0x6B5)
        let seeds = [Self.exifJPEG(littleEndian: true), Self.exifJPEG(littleEndian: false)]
        for round in 0..<20_000 {
            var jpeg = seeds[round % 2]
            for _ in 0..<Int.random(in: 1...6, using: &random) {
                jpeg[Int.random(in: 0..<jpeg.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            }
            if Bool.random(using: &random) { jpeg = Array(jpeg.prefix(Int.random(in: 0...jpeg.count, using: &random))) }
            let count = jpeg.count
            JPEGLocation.strip(&jpeg)
            #expect(jpeg.count == count)
        }
    }
}
