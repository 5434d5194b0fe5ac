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

    /// Which conversations' members may download an upload (its messages' conversations).
    public static let referencesMigration = [
        "CREATE TABLE media_references (media_id TEXT NOT NULL, conversation_id TEXT NOT NULL, PRIMARY KEY (media_id, conversation_id))",
    ]

    /// Whether an upload was ever attached (the sweeper removes the others after a day), and
    /// the index the sweeper reads. `referenced` is a column of the upload's own row, not only
    /// its rows in `media_references`: an attach and the sweeper's delete then touch the same
    /// row, and PostgreSQL orders them by its lock (a delete that waited re-checks the flag).
    public static let sweepMigration = [
        "ALTER TABLE media ADD COLUMN referenced BOOLEAN NOT NULL DEFAULT FALSE",
        "UPDATE media SET referenced = TRUE WHERE id IN (SELECT media_id FROM media_references)",
        "CREATE INDEX media_unattached ON media(created_at) WHERE NOT referenced",
    ]

    /// A message's attachments as its `attachments` column holds them: JSON as the API writes
    /// them, NULL for none.
    public static func column(_ attachments: [Attachment]?) -> String? {
        guard let attachments, !attachments.isEmpty, let json = try? API.makeEncoder().encode(attachments) else { return nil }
        return String(decoding: json, as: UTF8.self)
    }

    /// The attachments of an `attachments` column; a column that does not read is the store's
    /// fault, not the caller's.
    public static func attachments(_ column: String?) throws(ChatStoreError) -> [Attachment]? {
        guard let column, !column.isEmpty else { return nil }
        do {
            return try API.makeDecoder().decode([Attachment].self, from: Data(column.utf8))
        } catch {
            throw ChatStoreError(.unavailable, "a message's attachments do not read: \(error)")
        }
    }

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
