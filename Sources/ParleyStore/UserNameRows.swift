import Foundation
import ParleyModel

/// Display names as the SQL stores find them by prefix: `user_names` holds each user's name keys
/// (``User/nameKeys(_:)``), compared bytewise, so that a range over the index is a prefix.
public enum UserNameRows {
    /// The migration's table; `keyType` is the key column's type with a bytewise collation (each
    /// store's own word for it).
    public static func migration(keyType: String) -> [String] { [
        """
        CREATE TABLE user_names (
            name_key \(keyType) NOT NULL,
            user_id TEXT NOT NULL,
            PRIMARY KEY (name_key, user_id)
        )
        """,
        "CREATE INDEX user_names_by_user ON user_names(user_id)",
    ] }

    /// The range of keys that start with `key`: `[key, key + U+10FFFF)`, bytewise (no character
    /// sorts after U+10FFFF but itself, which no name holds).
    public static func range(startingWith key: String) -> (lower: String, upper: String) {
        (key, key + "\u{10FFFF}")
    }

    /// A search's answer: the users whose handle starts with the prefix, by handle, then those
    /// whose name does, each once, at most `limit`.
    public static func merged(handles: [User], names: [User], limit: Int) -> [User] {
        var seen: Set<UserID> = []
        return Array((handles + names).filter { seen.insert($0.id).inserted }.prefix(max(0, limit)))
    }
}
