/// Removes where a photo or video was taken from the metadata phones and cameras write into it,
/// for every type an upload may have that carries such metadata:
/// - JPEG (``JPEGMetadata``), PNG (``PNGMetadata``), WebP (``WebPMetadata``): EXIF's GPS
///   directory and XMP's GPS properties;
/// - HEIC/HEIF, MP4, QuickTime, M4A (``ISOBMFFMetadata``): the same in HEIF's Exif and XMP items,
///   and QuickTime's and 3GPP's location boxes and keys.
///
/// Nothing is re-encoded and the file keeps its length: the result is a list of byte ranges to
/// overwrite (``LocationEdits``), applied as the file is copied where it is kept. A file whose
/// metadata cannot be walked safely is refused (``LocationRefusal``), never kept with its
/// location unknown.
public enum LocationStripper {
    /// The content types whose location is removed; the other accepted types (GIF, Ogg, AAC,
    /// PDF) carry none that phones write.
    public static let contentTypes: Set<String> = ["image/jpeg", "image/png", "image/webp", "image/heic", "video/mp4", "video/quicktime", "audio/mp4"]

    /// The edits that remove the location from `source`, a file of type `contentType` (as
    /// ``MediaSniffing`` found it); none for a type not in ``contentTypes``.
    ///
    /// Throws ``LocationRefusal`` when the metadata cannot be walked, and whatever `source`
    /// throws when it cannot be read.
    public static func edits(contentType: String, in source: some ByteSource) throws -> LocationEdits {
        let reader = Reader(source: source)
        switch contentType {
        case "image/jpeg": return try JPEGMetadata.edits(reader)
        case "image/png": return try PNGMetadata.edits(reader)
        case "image/webp": return try WebPMetadata.edits(reader)
        case "image/heic", "video/mp4", "video/quicktime", "audio/mp4": return try ISOBMFFMetadata.edits(reader)
        default: return LocationEdits()
        }
    }

    /// `bytes` without their location (for bytes held in memory).
    public static func stripped(_ bytes: [UInt8], contentType: String) throws -> [UInt8] {
        var result = bytes
        try edits(contentType: contentType, in: bytes).apply(to: &result)
        return result
    }
}
