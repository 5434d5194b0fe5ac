import Foundation
import ParleyMetadata
import ParleyModel
import ParleyFuzzTargets
import Testing

/// The location leaves every type phones write, in every place they put it, and nothing else
/// changes: files built byte by byte (``LocatedFiles``) and files written by exiftool.
@Suite struct LocationStripperTests {
    static let built: [(name: String, type: String, bytes: [UInt8])] = [
        ("jpeg", "image/jpeg", LocatedFiles.jpeg()),
        ("jpeg, EXIF after 200 KB", "image/jpeg", LocatedFiles.jpeg(padding: 200_000)),
        ("jpeg with an MPF image", "image/jpeg", LocatedFiles.jpeg(secondImage: true)),
        ("png", "image/png", LocatedFiles.png),
        ("webp", "image/webp", LocatedFiles.webp),
        ("heif", "image/heic", LocatedFiles.heif()),
        ("heif, Exif in idat", "image/heic", LocatedFiles.heif(inItemData: true)),
        ("quicktime", "video/quicktime", LocatedFiles.quickTime),
    ]

    static func count(_ needle: [UInt8], in bytes: [UInt8]) -> Int {
        guard !needle.isEmpty, bytes.count >= needle.count else { return 0 }
        return (0...(bytes.count - needle.count)).filter { bytes[$0] == needle[0] && bytes[$0..<($0 + needle.count)].elementsEqual(needle) }.count
    }

    /// Every form of the place the files hold.
    static let located: [[UInt8]] = [
        LocatedFiles.gpsRationals, Array(LocatedFiles.xmpLatitude.utf8), Array("2,17.67E".utf8), Array(LocatedFiles.iso6709.utf8),
        Array("Tour Eiffel".utf8), Array("com.apple.quicktime.location.ISO6709".utf8 + [0, 0, 0, 0x1A]),
    ]

    @Test(arguments: built.indices)
    func theLocationIsGoneAndTheRestStays(_ index: Int) throws {
        let (name, type, original) = Self.built[index]
        let expected = name.contains("MPF") ? 2 : 1
        #expect(Self.count(LocatedFiles.gpsRationals, in: original) == (type.hasPrefix("video") ? 0 : expected), "\(name) holds its location")
        let stripped = try LocationStripper.stripped(original, contentType: type)
        #expect(stripped.count == original.count, "\(name): offsets stay right")
        for form in Self.located {
            #expect(Self.count(form, in: stripped) == 0, "\(name) still holds \(String(decoding: form, as: UTF8.self))")
        }
        #expect(Self.count(Array(LocatedFiles.keptText.utf8), in: stripped) == Self.count(Array(LocatedFiles.keptText.utf8), in: original), "\(name) keeps the rest")
        #expect(MediaSniffing.contentType(of: stripped) == type)
        #expect(try LocationStripper.stripped(stripped, contentType: type) == stripped, "\(name): nothing is left to strip")
    }

    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

    /// Files exiftool wrote: GPS in EXIF and XMP for the images; QuickTime keys, user data and
    /// XMP for the videos and the audio.
    @Test(arguments: [
        ("located.jpg", "image/jpeg"), ("located.png", "image/png"), ("located.webp", "image/webp"), ("located.heic", "image/heic"),
        ("located.mp4", "video/mp4"), ("located.mov", "video/quicktime"), ("located.m4a", "audio/mp4"),
    ])
    func filesExiftoolWroteLoseTheirLocation(_ name: String, _ type: String) throws {
        let original = Array(try Data(contentsOf: Self.fixtures.appendingPathComponent(name)))
        let decimal = Array("48.8582".utf8), minutes = Array("51.492N".utf8)
        // exiftool writes the latitude as 48/1 51/1 738/25, in the file's byte order.
        let littleEndian: [UInt8] = [48, 0, 0, 0, 1, 0, 0, 0, 51, 0, 0, 0, 1, 0, 0, 0, 0xE2, 0x02, 0, 0, 25, 0, 0, 0]
        let bigEndian: [UInt8] = [0, 0, 0, 48, 0, 0, 0, 1, 0, 0, 0, 51, 0, 0, 0, 1, 0, 0, 0x02, 0xE2, 0, 0, 0, 25]
        let rationals = Self.count(bigEndian, in: original) + Self.count(littleEndian, in: original)
        #expect(Self.count(minutes, in: original) + Self.count(decimal, in: original) >= 1 && (type.hasPrefix("image") ? rationals == 1 : true))
        let stripped = try LocationStripper.stripped(original, contentType: type)
        #expect(stripped.count == original.count)
        for form in [decimal, minutes, bigEndian, littleEndian] {
            #expect(Self.count(form, in: stripped) == 0, "\(name) still holds \(form)")
        }
        #expect(Self.count(Array(LocatedFiles.keptText.utf8), in: stripped) == Self.count(Array(LocatedFiles.keptText.utf8), in: original))
        #expect(try LocationStripper.stripped(stripped, contentType: type) == stripped)
    }

    @Test func aPNGKeepsValidChecksums() throws {
        let stripped = try LocationStripper.stripped(LocatedFiles.png, contentType: "image/png")
        var index = 8
        var chunks = 0
        while index + 12 <= stripped.count {
            let length = stripped[index..<(index + 4)].reduce(0) { $0 << 8 | Int($1) }
            let covered = Array(stripped[(index + 4)..<(index + 8 + length)])
            let crc = stripped[(index + 8 + length)..<(index + 12 + length)].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            #expect(crc == LocatedFiles.crc32(covered), "chunk \(String(decoding: covered.prefix(4), as: UTF8.self))")
            index += 12 + length
            chunks += 1
        }
        #expect(chunks == 5)
    }

    /// What cannot be walked is refused, naming why, rather than kept as it is.
    @Test func whatCannotBeWalkedIsRefused() {
        func reason(_ bytes: [UInt8], _ type: String) -> String? {
            do {
                _ = try LocationStripper.edits(contentType: type, in: bytes)
                return nil
            } catch {
                return (error as? LocationRefusal)?.reason
            }
        }
        let jpeg = LocatedFiles.jpeg()
        #expect(reason(Array(jpeg.prefix(30)), "image/jpeg")?.contains("past the end") == true, "a JPEG cut inside its EXIF segment")
        var png = LocatedFiles.png
        if let keyword = Self.index(of: Array("XML:com.adobe.xmp\0".utf8), in: png) { png[keyword + 18] = 1 }  // the compression flag
        #expect(reason(png, "image/png")?.contains("compressed") == true)
        let xmp = Array("<x:xmpmeta><rdf:RDF><exif:GPSLatitude>1</rdf:RDF>".utf8)
        #expect(reason(Array("RIFF".utf8) + [UInt8(4 + 8 + xmp.count), 0, 0, 0] + Array("WEBPXMP ".utf8) + [UInt8(xmp.count), 0, 0, 0] + xmp, "image/webp")?
            .contains("not well-formed") == true)
        var heif = LocatedFiles.heif()
        if let iloc = Self.index(of: Array("iloc".utf8), in: heif) { heif[iloc + 4 + 16] = 0x7F }  // the Exif item's offset, far past the end
        #expect(reason(heif, "image/heic")?.contains("outside the file") == true)
        #expect(reason(Array(LocatedFiles.quickTime.dropLast(3)), "video/quicktime")?.contains("past its container") == true)
        #expect(reason(LocatedFiles.jpeg(), "image/gif") == nil, "a type that carries no location is not walked")
    }

    static func index(of needle: [UInt8], in bytes: [UInt8]) -> Int? {
        (0...(bytes.count - needle.count)).first { bytes[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    /// Mutated and cut files never trap, and every edit lies within the file.
    @Test(arguments: built.indices)
    func mutatedFilesNeverTrap(_ index: Int) {
        let (_, type, original) = Self.built[index]
        var random = SeededRandom(seed: 0x10CA + UInt64(index))
        for _ in 0..<(original.count > 100_000 ? 50 : 2_000) {
            var bytes = original
            for _ in 0..<Int.random(in: 1...8, using: &random) {
                bytes[Int.random(in: 0..<bytes.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            }
            if Bool.random(using: &random) { bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &random))) }
            guard let edits = try? LocationStripper.edits(contentType: type, in: bytes) else { continue }
            #expect(edits.edits.allSatisfy { $0.range.lowerBound >= 0 && $0.range.upperBound <= bytes.count })
        }
    }
}
