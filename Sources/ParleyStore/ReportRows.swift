import Foundation
import ParleyModel

/// The reports table as the SQL stores keep it: the report as a JSON document, with the columns
/// that find it.
public enum ReportRows {
    /// The migration that creates it (and the users' suspension), the same in SQLite and PostgreSQL.
    public static let migration = [
        """
        CREATE TABLE reports (
            id TEXT PRIMARY KEY,
            reporter_id TEXT NOT NULL,
            target TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            webhooks_owed BOOLEAN NOT NULL,
            document TEXT NOT NULL
        )
        """,
        "CREATE INDEX reports_by_status ON reports(status, created_at, id)",
        "CREATE INDEX reports_by_reporter ON reports(reporter_id, target)",
        "CREATE INDEX reports_owing_webhooks ON reports(created_at) WHERE webhooks_owed",
        "ALTER TABLE users ADD COLUMN suspended_at BIGINT",
    ]

    /// What a report is about: the same reporter's open report about the same target is the one
    /// a retried `POST /v1/reports` finds.
    public static func target(of report: Report) -> String {
        "\(report.userId.rawValue) \(report.conversationId?.rawValue ?? "-") \(report.seq.map(String.init) ?? "-")"
    }

    public static func document(_ report: Report) throws(ChatStoreError) -> String {
        do {
            return String(decoding: try API.makeEncoder().encode(report), as: UTF8.self)
        } catch {
            throw ChatStoreError(.unavailable, "a report did not encode: \(error)")
        }
    }

    public static func report(_ document: String) throws(ChatStoreError) -> Report {
        do {
            return try API.makeDecoder().decode(Report.self, from: Data(document.utf8))
        } catch {
            throw ChatStoreError(.unavailable, "a stored report did not decode: \(error)")
        }
    }
}
