import Foundation
import ParleyModel

/// The media table as the SQL stores keep it (uploads' descriptions; their bytes are in a blob
/// store), and an upload read back from its columns.
public enum MediaRows {
    /// The migration that creates it, the same in SQLite and PostgreSQL.
    public static let migration = [
        """
        CREATE TABLE media (
            id TEXT PRIMARY KEY,
            uploader_id TEXT NOT NULL,
            content_type TEXT NOT NULL,
            size BIGINT NOT NULL,
            sha256 TEXT NOT NULL,
            width BIGINT,
            height BIGINT,
            created_at BIGINT NOT NULL
        )
        """,
        "CREATE INDEX media_by_uploader ON media(uploader_id, created_at)",
        "CREATE INDEX media_by_sha256 ON media(sha256)",
    ]

    public static func media(
        id: String, uploaderId: String, contentType: String, size: Int64, sha256: String, width: Int?, height: Int?, createdAt: Int64
    ) -> StoredMedia {
        StoredMedia(
            media: Media(
                id: MediaID(rawValue: id), contentType: contentType, size: size, sha256: sha256, width: width, height: height,
                createdAt: Date(millisecondsSince1970: createdAt)),
            uploaderId: UserID(rawValue: uploaderId))
    }
}
