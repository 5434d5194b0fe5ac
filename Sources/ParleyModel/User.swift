import Foundation

/// A user as API.md serves it.
public struct User: Hashable, Sendable, Codable {
    public var id: UserID
    /// Unique, 3–32 characters of `a-z 0-9 _ . -`.
    public var handle: String
    public var displayName: String
    /// A picture kept elsewhere (https). A user has this or ``avatar``, never both: the one set
    /// last wins.
    public var avatarURL: String?
    /// The user's profile photo: an image upload of theirs, which every signed-in user may
    /// download while it is.
    public var avatar: Media?
    /// The app's own public fields: every signed-in user reads them.
    public var metadata: Metadata?
    /// The app's own private fields: only in the user's own view (`GET /v1/users/me`), never in
    /// what anyone else is given — the stores read them apart (``ChatStore/privateMetadata(of:)``).
    public var privateMetadata: Metadata?
    public var createdAt: Date
    /// A bot: made by an operator (`POST /v1/bots`), signs in with a token only, and may annotate
    /// the messages of the conversations it is a member of.
    public var bot: Bool
    /// True for an account its user deleted (`DELETE /v1/users/me`); absent otherwise. Such an
    /// account reads as ``deletedAccount(_:createdAt:bot:)``.
    public var deleted: Bool?

    public init(id: UserID, handle: String, displayName: String, avatarURL: String? = nil, createdAt: Date, bot: Bool = false) {
        self.id = id
        self.handle = handle
        self.displayName = displayName
        self.avatarURL = avatarURL
        self.createdAt = createdAt
        self.bot = bot
    }

    /// The handle every deleted account shows (no one can register it): theirs is kept out of
    /// reach until its quarantine ends, then free.
    public static let deletedHandle = "deleted"

    /// How a deleted account reads to everyone: its ID and age, nothing of the person.
    public static func deletedAccount(_ id: UserID, createdAt: Date, bot: Bool) -> User {
        var user = User(id: id, handle: deletedHandle, displayName: "", createdAt: createdAt, bot: bot)
        user.deleted = true
        return user
    }

    private enum CodingKeys: String, CodingKey {
        case id, handle, displayName, avatarURL, avatar, metadata, privateMetadata, createdAt, bot, deleted
    }

    /// How a name, or what is typed to find one, is compared: lowercased, accents and other
    /// combining marks dropped (`Élodie` as `elodie`), runs of white space as one space, none at
    /// the ends. Scripts without case (CJK, Arabic) compare as written.
    public static func nameKey(_ text: String) -> String {
        let scalars = text.lowercased().decomposedStringWithCanonicalMapping.unicodeScalars.filter {
            $0.properties.generalCategory != .nonspacingMark
        }
        return String(String.UnicodeScalarView(scalars)).split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }

    /// The most words of a name a search finds it by.
    public static let nameWordsMax = 8

    /// What a search by prefix finds a display name by: its key from each of its first
    /// ``nameWordsMax`` words on (`ann marie smith`, `marie smith`, `smith`), so that a first or
    /// a last name finds it.
    public static func nameKeys(_ displayName: String) -> [String] {
        let words = nameKey(displayName).split(separator: " ")
        var seen: Set<String> = []
        return words.indices.prefix(nameWordsMax).map { words[$0...].joined(separator: " ") }.filter { seen.insert($0).inserted }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.id = try container.decode(UserID.self, forKey: .id)
        self.handle = try container.decode(String.self, forKey: .handle)
        self.displayName = try container.decode(String.self, forKey: .displayName)
        self.avatarURL = try container.decodeIfPresent(String.self, forKey: .avatarURL)
        self.avatar = try container.decodeIfPresent(Media.self, forKey: .avatar)
        self.metadata = try container.decodeIfPresent(Metadata.self, forKey: .metadata)
        self.privateMetadata = try container.decodeIfPresent(Metadata.self, forKey: .privateMetadata)
        self.createdAt = try container.decode(Date.self, forKey: .createdAt)
        // Absent from what a node of an earlier version sends.
        self.bot = try container.decodeIfPresent(Bool.self, forKey: .bot) ?? false
        self.deleted = try container.decodeIfPresent(Bool.self, forKey: .deleted)
    }
}

/// A user with what only the server keeps: the salted slow hash of its password.
public struct StoredUser: Hashable, Sendable {
    public var user: User
    public var passwordHash: String
    /// When the password last changed; nil if never. A token with no session recorded (issued
    /// before sessions were) is accepted only while this is nil.
    public var passwordChangedAt: Date?
    /// Since when an operator suspended the user (nil: not suspended): no token of theirs works,
    /// and they cannot sign in.
    public var suspendedAt: Date?
    /// The account's deletion, once its user asked for it; then ``user`` reads as
    /// ``User/deletedAccount(_:createdAt:bot:)``.
    public var deletion: AccountDeletion?

    public init(user: User, passwordHash: String, passwordChangedAt: Date? = nil, suspendedAt: Date? = nil, deletion: AccountDeletion? = nil) {
        self.user = deletion == nil ? user : .deletedAccount(user.id, createdAt: user.createdAt, bot: user.bot)
        self.passwordHash = passwordHash
        self.passwordChangedAt = passwordChangedAt
        self.suspendedAt = suspendedAt
        self.deletion = deletion
    }

    /// `found` in the order of `asked`, each once: what a lookup of several users answers.
    public static func inOrder(_ found: [User], asked: [UserID]) -> [User] {
        let byID = Dictionary(found.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        var seen: Set<UserID> = []
        return asked.filter { seen.insert($0).inserted }.compactMap { byID[$0] }
    }
}

/// An account's deletion (`DELETE /v1/users/me`): asked for at `requestedAt`, done (every
/// conversation left, and erased if asked) at `finishedAt`. Once asked for it is never undone: a
/// deletion left half done by a node that died is finished by another.
public struct AccountDeletion: Hashable, Sendable, Codable {
    public var userId: UserID
    public var requestedAt: Date
    /// Whether the user's messages are erased too (`?erase=true`), not only left to the others.
    public var erase: Bool
    public var finishedAt: Date?

    public init(userId: UserID, requestedAt: Date, erase: Bool, finishedAt: Date? = nil) {
        self.userId = userId
        self.requestedAt = requestedAt.millisecondPrecision
        self.erase = erase
        self.finishedAt = finishedAt?.millisecondPrecision
    }

    /// How long a deleted account's handle stays out of reach by default, so that nobody takes
    /// it to pass for the person who just left.
    public static let defaultHandleQuarantine: Duration = .seconds(30 * 86_400)
}

/// Where a page of a user's conversations continues: after this activity time and ID.
public struct ConversationPageCursor: Hashable, Sendable, Codable {
    public var lastActivityAt: Date
    public var id: ConversationID

    public init(lastActivityAt: Date, id: ConversationID) {
        self.lastActivityAt = lastActivityAt
        self.id = id
    }
}
