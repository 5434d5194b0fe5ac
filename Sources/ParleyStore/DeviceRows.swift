import Foundation
import ParleyModel

/// The devices table as the SQL stores keep it, and a device read back from its columns.
public enum DeviceRows {
    /// The migration that creates it, the same in SQLite and PostgreSQL (SQLite reads `BIGINT`
    /// as an integer column).
    public static let migration = [
        """
        CREATE TABLE devices (
            id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            token_id TEXT NOT NULL,
            platform TEXT NOT NULL,
            token TEXT NOT NULL,
            topic TEXT,
            environment TEXT,
            created_at BIGINT NOT NULL,
            UNIQUE (platform, token)
        )
        """,
        "CREATE INDEX devices_by_user ON devices(user_id, created_at)",
        "CREATE INDEX devices_by_token_id ON devices(token_id)",
    ]

    /// A device from its columns; a platform or environment this version does not know is the
    /// store's fault, not the caller's.
    public static func device(
        id: String, userId: String, tokenId: String, platform: String, token: String, topic: String?, environment: String?, createdAt: Int64
    ) throws(ChatStoreError) -> StoredDevice {
        guard let platformValue = PushPlatform(rawValue: platform) else { throw ChatStoreError(.unavailable, "a device of unknown platform \(platform)") }
        var environmentValue: APNsEnvironment?
        if let environment {
            guard let known = APNsEnvironment(rawValue: environment) else { throw ChatStoreError(.unavailable, "a device of unknown APNs environment \(environment)") }
            environmentValue = known
        }
        return StoredDevice(
            device: Device(
                id: DeviceID(rawValue: id), platform: platformValue, token: token, topic: topic, environment: environmentValue,
                createdAt: Date(millisecondsSince1970: createdAt)),
            userId: UserID(rawValue: userId), tokenId: tokenId)
    }
}
