import Foundation

public enum ReportIDKind: IdentifierKind { public static let prefix = "r_" }
/// A report's ID.
public typealias ReportID = Identifier<ReportIDKind>

/// Why a user or a message was reported.
public enum ReportReason: String, Codable, Sendable, Hashable, CaseIterable {
    case spam, harassment, inappropriate, other
}

public enum ReportStatus: String, Codable, Sendable, Hashable, CaseIterable {
    case open, resolved
}

/// A report of a user, or of one of their messages, for the operator to act on (`POST /v1/reports`).
public struct Report: Codable, Sendable, Hashable {
    public var id: ReportID
    public var reporterId: UserID
    /// Who is reported: the user, or the sender of the message.
    public var userId: UserID
    public var conversationId: ConversationID?
    public var seq: Int64?
    public var reason: ReportReason
    public var note: String?
    /// The reported message as it was when reported (text, attachments, annotations): what the
    /// operator judges, even if it changes or goes later.
    public var message: Message?
    public var status: ReportStatus
    public var createdAt: Date
    public var resolvedAt: Date?
    /// What the operator did, in their words.
    public var resolution: String?

    public init(
        id: ReportID, reporterId: UserID, userId: UserID, conversationId: ConversationID?, seq: Int64?, reason: ReportReason, note: String?,
        message: Message?, status: ReportStatus = .open, createdAt: Date, resolvedAt: Date? = nil, resolution: String? = nil
    ) {
        self.id = id
        self.reporterId = reporterId
        self.userId = userId
        self.conversationId = conversationId
        self.seq = seq
        self.reason = reason
        self.note = note
        self.message = message
        self.status = status
        self.createdAt = createdAt
        self.resolvedAt = resolvedAt
        self.resolution = resolution
    }

    /// The most of a note or a resolution, in characters.
    public static let noteMax = 1_000
}
