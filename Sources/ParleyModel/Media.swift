import Foundation

public enum MediaIDKind: IdentifierKind { public static let prefix = "m_" }
/// An upload's ID.
public typealias MediaID = Identifier<MediaIDKind>

/// An uploaded file (a photo, a video, a voice note, a document), as API.md serves it as `media`.
/// Its bytes are kept by a blob store under their SHA-256; this is what describes them.
public struct Media: Hashable, Sendable, Codable {
    public var id: MediaID
    /// The type the client declared and the bytes' first bytes confirmed (``MediaSniffing``).
    public var contentType: String
    /// Bytes stored.
    public var size: Int64
    /// The stored bytes' SHA-256, 64 lowercase hex digits: their name in the blob store, and the
    /// download's `ETag`.
    public var sha256: String
    /// An image's size in pixels, from its header; nil for other types, or when the header does
    /// not say.
    public var width: Int?
    public var height: Int?
    public var createdAt: Date

    public init(
        id: MediaID, contentType: String, size: Int64, sha256: String, width: Int? = nil, height: Int? = nil, createdAt: Date
    ) {
        self.id = id
        self.contentType = contentType
        self.size = size
        self.sha256 = sha256
        self.width = width
        self.height = height
        self.createdAt = createdAt
    }

    /// The image types: what a thumbnail is made of (other uploads, videos and documents, have
    /// none), and what a profile or group photo may be.
    public static let imageTypes: Set<String> = ["image/jpeg", "image/png", "image/gif", "image/webp", "image/heic"]

    public var isImage: Bool { Self.imageTypes.contains(contentType) }

    /// Whether `text` is a SHA-256 as ``sha256`` holds it: 64 lowercase hex digits.
    public static func isSHA256(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }
}

/// An upload as the store keeps it: its description and who uploaded it.
public struct StoredMedia: Hashable, Sendable, Codable {
    public var media: Media
    public var uploaderId: UserID

    public init(media: Media, uploaderId: UserID) {
        self.media = media
        self.uploaderId = uploaderId
    }
}

/// A file in a message: the upload, described as it was kept, and what the sender wrote under it.
public struct Attachment: Hashable, Sendable, Codable {
    public var media: Media
    public var caption: String?

    public init(media: Media, caption: String? = nil) {
        self.media = media
        self.caption = caption
    }

    /// What a conversation list or a notification says of a message with no text: "Photo",
    /// "Video", "Voice message" or "File", by its first attachment.
    public static func summary(of attachments: [Attachment]) -> String? {
        guard let first = attachments.first else { return nil }
        let kind: String
        switch first.media.contentType {
        case let type where type.hasPrefix("image/"): kind = "Photo"
        case let type where type.hasPrefix("video/"): kind = "Video"
        case let type where type.hasPrefix("audio/"): kind = "Voice message"
        default: kind = "File"
        }
        return attachments.count == 1 ? kind : "\(kind) and \(attachments.count - 1) more"
    }
}
