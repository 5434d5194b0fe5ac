import CVips

/// Thumbnails of uploaded images, made with libvips (the library image services such as imgproxy
/// and sharp are built on), loaded when first used: JPEGs at most ``sizes`` pixels on their longer
/// side.
public enum Thumbnails {
    /// The sizes a thumbnail comes in: pixels on its longer side.
    public static let sizes = [160, 320, 640]

    /// The size asked for when none is.
    public static let defaultSize = 320

    /// The most pixels an image may have to be made a thumbnail of (a decompression bomb — a
    /// small file of a huge image — is refused by the size its header gives, read before
    /// anything is decoded, whatever the format). A 48-megapixel phone photo passes.
    public static let pixelsMax = 100_000_000

    /// JPEG quality of thumbnails.
    static let quality: Int32 = 80

    /// Why a thumbnail could not be made.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Whether libvips loaded and started (once per process, on first use).
    private static let started: Result<String, Failure> = {
        guard parley_vips_start() == 0 else { return .failure(Failure(description: lastError())) }
        return .success(String(cString: parley_vips_version()))
    }()

    /// Loads libvips if it is not yet, and answers its version; throws, saying why, when it cannot
    /// be loaded (then no thumbnail can be made on this machine).
    @discardableResult
    public static func start() throws(Failure) -> String {
        try started.get()
    }

    /// A JPEG of the image in `bytes`, at most `size` pixels on its longer side (never larger than
    /// the image), upright as its EXIF orientation says, without metadata; transparency on white.
    /// Blocks the calling thread while libvips works: call it off the event loops.
    public static func jpeg(of bytes: UnsafeRawBufferPointer, size: Int) throws(Failure) -> [UInt8] {
        try start()
        guard let base = bytes.baseAddress, bytes.count > 0 else { throw Failure(description: "no bytes") }
        guard (1...10_000).contains(size) else { throw Failure(description: "a thumbnail size of \(size)") }
        var out: UnsafeMutableRawPointer?
        var length = 0
        switch parley_vips_thumbnail_jpeg(base, bytes.count, Int32(size), quality, Int64(pixelsMax), &out, &length) {
        case 0: break
        case -2: throw Failure(description: "the image has more than \(pixelsMax) pixels by its header")
        default: throw Failure(description: "the image does not decode: \(lastError())")
        }
        guard let out else { throw Failure(description: "the image does not decode: \(lastError())") }
        defer { parley_vips_free(out) }
        return Array(UnsafeRawBufferPointer(start: out, count: length))
    }

    /// A JPEG of `width` × `height` RGB pixels, three bytes each, row by row (images for tests and
    /// parley-load's uploads).
    public static func jpeg(rgb pixels: [UInt8], width: Int, height: Int, quality: Int = 85) throws(Failure) -> [UInt8] {
        try start()
        guard width > 0, height > 0, pixels.count == width * height * 3 else {
            throw Failure(description: "\(pixels.count) bytes are not \(width) × \(height) RGB pixels")
        }
        var out: UnsafeMutableRawPointer?
        var length = 0
        let status = pixels.withUnsafeBufferPointer { pixels in
            parley_vips_jpeg_from_rgb(pixels.baseAddress, Int32(width), Int32(height), Int32(quality), &out, &length)
        }
        guard status == 0, let out else { throw Failure(description: "the pixels do not save as a JPEG: \(lastError())") }
        defer { parley_vips_free(out) }
        return Array(UnsafeRawBufferPointer(start: out, count: length))
    }

    private static func lastError() -> String {
        var buffer = [CChar](repeating: 0, count: 512)
        parley_vips_error(&buffer, buffer.count)
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text.split(separator: "\n").first.map(String.init) ?? "no reason given"
    }
}
