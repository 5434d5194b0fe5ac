import Foundation
import ParleyModel

/// The sessions table as the SQL stores keep it, and a session read back from its columns.
public enum SessionRows {
    /// The migration that creates it, the same in SQLite and PostgreSQL (SQLite reads `BIGINT`
    /// as an integer column).
    public static let migration = [
        """
        CREATE TABLE sessions (
            token_id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            last_used_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            user_agent TEXT
        )
        """,
        "CREATE INDEX sessions_by_user ON sessions(user_id, created_at)",
        "ALTER TABLE users ADD COLUMN password_changed_at BIGINT",
    ]

    public static func session(tokenId: String, userId: String, createdAt: Int64, lastUsedAt: Int64, expiresAt: Int64, userAgent: String?) -> StoredSession {
        StoredSession(
            tokenId: tokenId, userId: UserID(rawValue: userId), createdAt: Date(millisecondsSince1970: createdAt),
            lastUsedAt: Date(millisecondsSince1970: lastUsedAt), expiresAt: Date(millisecondsSince1970: expiresAt), userAgent: userAgent)
    }
}
