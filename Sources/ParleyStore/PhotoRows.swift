import Foundation
import ParleyModel

/// Profile and group photos as the SQL stores keep them: the upload's description as JSON in the
/// user's `avatar` or the conversation's `photo` (read with the row, no join), its ID beside it
/// for the sweeper's questions; and each user's profile changes numbered, for `user.updated`
/// webhooks.
public enum PhotoRows {
    /// The same in SQLite and PostgreSQL.
    public static let migration = [
        "ALTER TABLE users ADD COLUMN avatar TEXT",
        "ALTER TABLE users ADD COLUMN avatar_media_id TEXT",
        "CREATE INDEX users_by_avatar ON users(avatar_media_id) WHERE avatar_media_id IS NOT NULL",
        "ALTER TABLE conversations ADD COLUMN photo TEXT",
        "ALTER TABLE conversations ADD COLUMN photo_media_id TEXT",
        "CREATE INDEX conversations_by_photo ON conversations(photo_media_id) WHERE photo_media_id IS NOT NULL",
        // Each change of a profile's name or picture counts up `profile_version`; webhooks have
        // been told through `profile_told`.
        "ALTER TABLE users ADD COLUMN profile_version BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE users ADD COLUMN profile_told BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE users ADD COLUMN profile_changed_at BIGINT",
        "CREATE INDEX users_profile_untold ON users(profile_changed_at, id) WHERE profile_version > profile_told",
    ]

    /// The statement that hands upload `id` back to the sweeper (its `created_at` set to 0, so
    /// the next pass removes it) unless a message, a profile or a group still uses it; `id` is
    /// the store's placeholder (`?1`, `$1`).
    public static func releaseUnused(_ id: String) -> String {
        """
        UPDATE media SET referenced = FALSE, created_at = 0 WHERE id = \(id)
            AND NOT EXISTS (SELECT 1 FROM media_references WHERE media_id = \(id))
            AND NOT EXISTS (SELECT 1 FROM users WHERE avatar_media_id = \(id))
            AND NOT EXISTS (SELECT 1 FROM conversations WHERE photo_media_id = \(id))
        """
    }

    /// A photo as its column holds it: the upload as the API writes it, NULL for none.
    public static func column(_ photo: Media?) -> String? {
        guard let photo, let json = try? API.makeEncoder().encode(photo) else { return nil }
        return String(decoding: json, as: UTF8.self)
    }

    /// The photo of a column; one that does not read is the store's fault, not the caller's.
    public static func photo(_ column: String?) throws(ChatStoreError) -> Media? {
        guard let column, !column.isEmpty else { return nil }
        do {
            return try API.makeDecoder().decode(Media.self, from: Data(column.utf8))
        } catch {
            throw ChatStoreError(.unavailable, "a stored photo does not read: \(error)")
        }
    }
}

/// A profile change webhooks have not been told of (`user.updated`): the user as they are, and
/// the number of their latest change.
public struct UntoldProfile: Hashable, Sendable {
    public var user: User
    public var version: Int64
    public var changedAt: Date

    public init(user: User, version: Int64, changedAt: Date) {
        self.user = user
        self.version = version
        self.changedAt = changedAt
    }
}

/// Apps' own fields as the SQL stores keep them: each level's ``Metadata`` as its JSON text in a
/// column of its row, NULL for none.
public enum MetadataRows {
    /// The same in SQLite and PostgreSQL but for the messages' table's name.
    public static func migration(messagesTable: String) -> [String] { [
        "ALTER TABLE users ADD COLUMN metadata TEXT",
        "ALTER TABLE users ADD COLUMN private_metadata TEXT",
        "ALTER TABLE conversations ADD COLUMN metadata TEXT",
        "ALTER TABLE members ADD COLUMN metadata TEXT",
        "ALTER TABLE \(messagesTable) ADD COLUMN metadata TEXT",
    ] }

    /// The fields of a column; one that does not read is the store's fault, not the caller's.
    public static func metadata(_ column: String?) throws(ChatStoreError) -> Metadata? {
        guard let column, !column.isEmpty else { return nil }
        guard let metadata = Metadata(json: column) else { throw ChatStoreError(.unavailable, "stored metadata does not read: \(column.prefix(64))") }
        return metadata
    }
}

/// Messages as the SQL stores find them by their words (``SearchText``).
public enum SearchRows {
    /// The word that stands for a conversation in SQLite's index: its ID's letters and digits
    /// (`c_1f…` → `c1f…`), so that a search within some conversations is one more term.
    public static func scopeToken(_ id: ConversationID) -> String {
        String(decoding: id.rawValue.utf8.filter { (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }, as: UTF8.self)
    }

    /// What the index keeps of a message: its text and captions (``SearchText/indexable(text:captions:)``);
    /// nil for a tombstone, which is never found.
    public static func indexable(_ message: Message) -> String? {
        message.isTombstone ? nil : indexable(text: message.text, attachments: message.attachments)
    }

    /// What the index keeps of a text and its attachments' captions.
    public static func indexable(text: String, attachments: [Attachment]?) -> String {
        SearchText.indexable(text: text, captions: attachments?.compactMap(\.caption) ?? [])
    }
}
