import Foundation
import ParleyModel

/// The blocks table as the SQL stores keep it.
public enum BlockRows {
    /// The migration that creates it, the same in SQLite and PostgreSQL.
    public static let migration = [
        """
        CREATE TABLE blocks (
            blocker_id TEXT NOT NULL,
            blocked_id TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            PRIMARY KEY (blocker_id, blocked_id)
        )
        """,
        "CREATE INDEX blocks_by_blocked ON blocks(blocked_id)",
    ]

    public static func block(blocker: String, blocked: String, at: Int64) -> StoredBlock {
        StoredBlock(block: Block(blocker: UserID(rawValue: blocker), blocked: UserID(rawValue: blocked)), at: Date(millisecondsSince1970: at))
    }
}
