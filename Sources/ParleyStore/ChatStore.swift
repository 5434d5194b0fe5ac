import Foundation
import ParleyModel

/// Where conversations, members, receipts and messages are durable. One protocol, three
/// implementations (in-memory for simulation, SQLite, PostgreSQL) that pass one contract suite
/// (`ChatStoreContract` in ParleyTestKit).
///
/// Ownership fencing: a conversation's owner takes an **epoch** when it activates
/// (``acquireOwnership(of:)``) and every write it makes carries it. A write whose epoch is not the
/// conversation's current one fails: an owner that lost the conversation to another node (split
/// brain, a pause) can never append, and its caller retries on the real owner.
public protocol ChatStore: Sendable {
    /// Applies the schema migrations not yet applied. Called at start-up; idempotent.
    func migrate() async throws

    /// Creates a conversation with its members. Throws `conflict` if the ID exists.
    func createConversation(_ record: ConversationRecord) async throws

    /// The conversation with its members, or nil.
    func conversation(_ id: ConversationID) async throws -> ConversationRecord?

    /// Makes the caller the conversation's owner: increments its epoch and returns the new one.
    /// Every earlier epoch's writes fail from now on. Throws `not_found` for an unknown ID.
    func acquireOwnership(of id: ConversationID) async throws -> Int64

    /// Group commit: every append in one transaction, in order, each with its own outcome.
    /// The store assigns each appended message `lastSeq + 1` inside the transaction, checks the
    /// epoch, and returns the original message for a `clientMessageId` already stored. The
    /// sender's own `deliveredSeq` and `readSeq` move to the new seq. A message's quote
    /// (`replyTo`) and mentions are stored with it, and each member it mentions can find it
    /// (``mentions(of:before:limit:)``). When this returns, every `.appended` message is durable.
    func commit(_ appends: [AppendRequest]) async throws -> [AppendOutcome]

    /// How many ``commit(_:)`` calls the node's group commit may run at once (never two with the
    /// same conversation). One for a store with a single writer; more where concurrent
    /// transactions share the log's flushes (PostgreSQL).
    var concurrentCommits: Int { get }

    /// ``commit(_:)`` as a call that blocks the calling thread, for a store whose transactions run
    /// on the thread that asks anyway (SQLite): the group commit then runs its commits back to back
    /// on a thread of its own instead of a task per commit. Nil: commits are tasks.
    var blockingCommit: BlockingCommit? { get }

    /// Messages with `seq > after`, ascending, at most `limit`.
    func messages(in id: ConversationID, after seq: Int64, limit: Int) async throws -> [Message]

    /// The last `limit` messages with `seq < before`, ascending.
    func messages(in id: ConversationID, before seq: Int64, limit: Int) async throws -> [Message]

    /// The last message of each of these conversations (those with messages), in one go.
    func lastMessages(in ids: [ConversationID]) async throws -> [ConversationID: Message]

    /// The message a `clientMessageId` made, if any.
    func message(in id: ConversationID, clientMessageId: String) async throws -> Message?

    /// The replies to message `seq` with seqs after `after`, ascending, at most `limit`.
    func replies(in id: ConversationID, to seq: Int64, after: Int64, limit: Int) async throws -> [Message]

    /// The messages that mention `user` in the conversations it is a member of, newest first
    /// (`sentAt`, then seq, then conversation ID, each descending), from just before `position`;
    /// tombstones left out; at most `limit`.
    func mentions(of user: UserID, before position: MentionPosition?, limit: Int) async throws -> [Message]

    /// Conversations whose last activity is later than `since`, the latest first, at most `limit`:
    /// the ones whose recent messages a new owner publishes again after their owner left the ring
    /// (it may have died between committing a message and handing it to the gateways). Rare, so a
    /// scan of the conversations may serve it.
    func recentlyActiveConversations(since: Date, limit: Int) async throws -> [ConversationID]

    /// Adds members (those already members are left as they are). Fenced by `epoch`. The
    /// conversation's last change becomes `member_added` at `at`.
    func addMembers(_ members: [ConversationMember], to id: ConversationID, epoch: Int64, at: Date) async throws

    /// Removes a member. Fenced by `epoch`. The conversation's last change becomes
    /// `member_removed` at `at`, and the removal is kept for the removed user's resume.
    func removeMember(_ user: UserID, from id: ConversationID, epoch: Int64, at: Date) async throws

    /// Renames a group. Fenced by `epoch`. The conversation's last change becomes `updated` at `at`.
    /// Changes what is given of a conversation, under the owner's `epoch`: its name, its app
    /// fields (an empty ``Metadata`` removes them).
    func updateConversation(_ id: ConversationID, name: String?, metadata: Metadata?, epoch: Int64, at: Date) async throws

    /// A member's own app fields for the conversation (nil or empty: none), under the owner's
    /// `epoch`. False if `user` is no member.
    func setMemberMetadata(_ metadata: Metadata?, for user: UserID, in id: ConversationID, epoch: Int64) async throws -> Bool

    /// Makes upload `media` the group's photo, or removes it (nil), under the owner's `epoch`:
    /// its members may download it from now on (``conversationsReferencing(_:)``), and the photo
    /// before goes back to the sweeper unless a message, a profile or another group uses it.
    /// Returns the photo as it is after. Throws `notFound` when the upload was removed meanwhile
    /// (by the sweeper).
    func setConversationPhoto(_ id: ConversationID, to media: MediaID?, epoch: Int64, at: Date) async throws -> Media?

    /// Records that the conversation's owner owes push notifications of its messages from `seq`
    /// on; nil: it owes none. Fenced by `epoch`. An owner that takes the conversation over after
    /// its owner died finds it (``conversationsOwingPushes(limit:)``) and owes them in its place.
    func setPushesOwed(from seq: Int64?, in id: ConversationID, epoch: Int64) async throws

    /// At most `limit` conversations whose owner owed push notifications when it last said so,
    /// each with the first seq it owed.
    func conversationsOwingPushes(limit: Int) async throws -> [(conversation: ConversationID, from: Int64)]

    // MARK: Annotations

    /// Stores a bot's annotation of a message, replacing the one of the same key. Fenced by `epoch`.
    func annotate(_ annotation: Annotation, epoch: Int64) async throws

    /// The annotations of the conversation's messages `seqs`, by seq then key.
    func annotations(in id: ConversationID, seqs: ClosedRange<Int64>) async throws -> [Annotation]

    /// Erases messages `seqs` of the conversation (under the owner's `epoch`): each keeps its
    /// seq, sender, client message ID and time; its text is emptied, its attachments and
    /// annotations removed, and the erasure recorded at `at` for resuming streams. Replies to them
    /// quote a tombstone from then on, and they are no longer pinned. Returns the
    /// messages as they were before, in seq order: those erased now (not those erased before, or
    /// that do not exist).
    func eraseMessages(in id: ConversationID, seqs: [Int64], epoch: Int64, at: Date) async throws -> [Message]

    /// The conversation's erasures after `since`, oldest first, the latest `limit` of them: what an owner
    /// that takes the conversation over hands the gateways again (its predecessor may have died
    /// between an erasure's commit and its fan-out).
    func erasures(in id: ConversationID, since: Date, limit: Int) async throws -> [Erasure]

    /// The uploads are attached to no message any more: no conversation's members may download
    /// them, and the sweeper's next pass removes them (unless one is a profile or group photo).
    func releaseMedia(_ ids: [MediaID]) async throws

    // MARK: Changes to messages

    /// Commits `change` — numbered by the owner, under its `epoch`: the conversation's
    /// ``ConversationRecord/lastChangeSeq`` + 1 — in one transaction with what it does to the
    /// message of its seq:
    /// - `edited`: the text becomes `change.text` (the one it replaces kept as a version) and
    ///   `editedAt` `change.at`;
    /// - `deleted`: the message becomes its tombstone (``Message/deletedTombstone(by:)``); its
    ///   annotations, reactions and versions go, and it is unpinned;
    /// - `reaction_added` / `reaction_removed`: `change.userId` holds `change.emoji` on it, or no
    ///   longer does;
    /// - `pinned` / `unpinned`: the conversation's ``ConversationRecord/pinned`` gains it first, or
    ///   loses it (``MessageChange/applied(toPinned:)``).
    /// An edit or a deletion rewrites the quote of every reply to the message.
    /// Returns the change as committed (a reaction's `count`: how many hold the emoji after) and
    /// the message as it is after. Nil when the change would change nothing — no such message, a
    /// tombstone, a reaction already held (or not held), a pin held (or not held) — and then
    /// nothing is stored and the number stays free. Throws `conflict` for a number already used.
    func commitChange(_ change: MessageChange, epoch: Int64) async throws -> (change: MessageChange, message: Message)?

    /// The conversation's changes numbered after `changeSeq`, in order, at most `limit`.
    func messageChanges(in id: ConversationID, after changeSeq: Int64, limit: Int) async throws -> [MessageChange]

    /// The conversation's changes committed after `since`, in order, the latest `limit` of them:
    /// what an owner that takes the conversation over hands the gateways again.
    func messageChanges(in id: ConversationID, since: Date, limit: Int) async throws -> [MessageChange]

    /// The edit of the conversation with this client change ID, if one was committed.
    func messageChange(in id: ConversationID, clientChangeId: String) async throws -> MessageChange?

    /// The changes committed after `since` in the conversations `user` is a member of, by
    /// conversation (in ID order) and then in order, from just past `position`; at most `limit`.
    func messageChanges(for user: UserID, since: Date, after position: ChangePosition?, limit: Int) async throws -> [MessageChange]

    /// The texts edits replaced of message `seq`, oldest first, each with when it became the text.
    func messageVersions(in id: ConversationID, seq: Int64) async throws -> [MessageVersion]

    /// The emoji `user` holds on the conversation's messages `seqs`.
    func reactions(of user: UserID, in id: ConversationID, seqs: ClosedRange<Int64>) async throws -> [HeldReaction]

    // MARK: Webhooks

    /// When a node first ran with the webhook endpoint named `name`: `at`, the first time it is
    /// asked. Conversations created since then owe the endpoint every event from their start.
    func webhookEndpointFirstSeen(_ name: String, at: Date) async throws -> Date

    /// Where each webhook endpoint's events of the conversation have got to, as its owners stored it.
    func webhookCursors(in id: ConversationID) async throws -> [WebhookCursorRecord]

    /// Stores where an endpoint's events of the conversation have got to. Fenced by `epoch`.
    func saveWebhookCursor(_ cursor: WebhookCursorRecord, in id: ConversationID, epoch: Int64) async throws

    /// At most `limit` conversations whose owner owed some endpoint events when it last stored
    /// its cursors: a node that takes one over delivers them in its place.
    func conversationsOwingWebhooks(limit: Int) async throws -> [ConversationID]

    /// At most `limit` conversations whose members, name or receipts changed, or whose messages
    /// were erased, after `since`: what an owner that died may not yet have recorded as owed to
    /// webhook endpoints, or handed to the gateways.
    func recentlyChangedConversations(since: Date, limit: Int) async throws -> [ConversationID]

    /// The conversation's changes after `since` that members' streams hear of, oldest first:
    /// each member removed (`removed` names them), and its last change of any other kind. What an
    /// owner that takes the conversation over hands the gateways again.
    func recentChanges(in id: ConversationID, since: Date) async throws -> [RecentChange]

    /// The user's unread messages in all their conversations (what an app's badge shows): each
    /// conversation's `lastSeq - readSeq`, less the tombstones (deleted or erased) past
    /// `readSeq`, summed; and how many conversations have any.
    func unread(of user: UserID) async throws -> UnreadCount

    /// Mutes the conversation for one of its members, or unmutes it. Fenced by `epoch`. Not a
    /// change the other members hear of: the conversation's last change stays as it was. False
    /// if `user` is not a member.
    func setMuted(_ muted: Bool, for user: UserID, in id: ConversationID, epoch: Int64) async throws -> Bool

    // MARK: Users

    /// Stores a new user. Throws `conflict` when the handle (or ID) is taken — by a deleted
    /// account too, unless it was deleted before `quarantineEnded`: its handle is taken from it
    /// (it keeps one no handle can be) in the same transaction.
    func createUser(_ user: StoredUser, reclaimingHandlesDeletedBefore quarantineEnded: Date) async throws

    func user(id: UserID) async throws -> StoredUser?

    /// The user signing in with `handle`; nil for a deleted account.
    func user(handle: String) async throws -> StoredUser?

    /// The users with these IDs (deleted accounts too, as ``user(id:)`` reads them), in the order
    /// asked, each once; an ID that names nobody is left out.
    func users(_ ids: [UserID]) async throws -> [User]

    /// Changes what is given (an empty ``Metadata`` removes those fields); returns the user after
    /// (without its private fields), nil if unknown or deleted. An `avatarURL` removes the
    /// ``User/avatar`` (handed back to the sweeper as ``setAvatar(of:to:at:)`` does). A change of
    /// name, picture or public fields counts as one for `user.updated`
    /// (``untoldProfiles(limit:)``); of private fields alone, not.
    func updateProfile(of id: UserID, displayName: String?, avatarURL: String?, metadata: Metadata?, privateMetadata: Metadata?, at: Date) async throws -> User?

    /// The user's private app fields, read apart from the user so that no other view holds them.
    func privateMetadata(of id: UserID) async throws -> Metadata?

    /// Makes upload `media` the user's profile photo, or removes it (nil), and their `avatarURL`
    /// with it: every signed-in user may download it from now on, and the photo before goes back
    /// to the sweeper unless a message or a group uses it. Returns the user after, nil if unknown
    /// or deleted; throws `notFound` when the upload was removed meanwhile (by the sweeper). A
    /// change counts for `user.updated`; removing none is no change.
    func setAvatar(of id: UserID, to media: MediaID?, at: Date) async throws -> User?

    /// Users whose profile changed since webhooks were last told, the longest waiting first, at
    /// most `limit`.
    func untoldProfiles(limit: Int) async throws -> [UntoldProfile]

    /// Webhooks were told of `user`'s profile changes through `version`.
    func profileTold(_ user: UserID, through version: Int64) async throws

    /// Users whose handle starts with `prefix` (lowercased), by handle, then those with a name
    /// word from which the name starts with it (``User/nameKey(_:)`` of both: `smi` finds
    /// `Ann Smith`), by that key; each once, at most `limit`; deleted accounts are never found.
    func searchUsers(prefix: String, limit: Int) async throws -> [User]

    /// Which of these IDs are users whose account is not deleted (to refuse unknown member IDs).
    func existingUsers(_ ids: [UserID]) async throws -> Set<UserID>

    /// Revokes a token (by its ID) until it would have expired anyway, and removes its session.
    func revokeToken(_ tokenID: String, expiresAt: Date) async throws

    func isTokenRevoked(_ tokenID: String) async throws -> Bool

    // MARK: Blocks

    /// Records a block; blocking again keeps the first time. Returns whether it is new.
    func block(_ block: Block, at: Date) async throws -> Bool

    /// Removes a block; whether there was one.
    func unblock(_ block: Block) async throws -> Bool

    /// Every block `user` is a side of (blocker or blocked), newest first.
    func blocks(involving user: UserID) async throws -> [StoredBlock]

    /// The blocks between any two of `users`.
    func blocks(among users: [UserID]) async throws -> Set<Block>

    // MARK: Reports and suspensions

    /// Files a report, unless its reporter has an open one about the same user, conversation and
    /// seq: that one is returned instead (`created` false), so a retried report is one report.
    /// A new report owes its webhooks.
    func fileReport(_ report: Report) async throws -> (report: Report, created: Bool)

    func report(_ id: ReportID) async throws -> Report?

    /// Reports with this status (nil: any), oldest first (by creation, then ID), after the report
    /// `after` (the last of the page before), at most `limit`.
    func reports(status: ReportStatus?, after: ReportID?, limit: Int) async throws -> [Report]

    /// Resolves an open report; one resolved already is returned as it is. Nil if there is none.
    func resolveReport(_ id: ReportID, resolution: String?, at: Date) async throws -> Report?

    /// Reports whose webhooks are owed, oldest first, at most `limit`.
    func reportsOwingWebhooks(limit: Int) async throws -> [Report]

    /// The report's webhooks were delivered (or given up on).
    func reportWebhooksDone(_ id: ReportID) async throws

    /// Suspends a user (`since` a date) or lifts it (nil). False if there is no such user.
    func setSuspended(_ user: UserID, since: Date?) async throws -> Bool

    // MARK: Account deletion

    /// Starts deleting `user`'s account, or finds it started (the first request's time stays; an
    /// `erase` once asked stays asked). In one transaction: the profile is emptied, every session
    /// and block of the user removed, every device removed, the uploads attached to no message
    /// left to the sweeper's next pass, and `user.deleted` owed to webhooks (once finished).
    /// Nil if there is no such user.
    func beginDeletion(of user: UserID, erase: Bool, at: Date) async throws -> AccountDeletion?

    /// The deletion is done: every conversation left. Finishing again keeps the first time.
    func finishDeletion(of user: UserID, at: Date) async throws

    /// Deletions begun and not finished, oldest first, at most `limit`.
    func unfinishedDeletions(limit: Int) async throws -> [AccountDeletion]

    /// Finished deletions whose `user.deleted` webhooks are owed, oldest first, at most `limit`.
    func deletionsOwingWebhooks(limit: Int) async throws -> [AccountDeletion]

    /// The deletion's webhooks were delivered (or given up on).
    func deletionWebhooksDone(_ user: UserID) async throws

    // MARK: Sessions

    /// Records a token just issued. The user's sessions expired by the new one's creation are
    /// removed meanwhile, so a user's rows stay bounded by how often they sign in.
    func openSession(_ session: StoredSession) async throws

    /// The session of a token, or nil: revoked, expired and removed, or never recorded.
    func session(_ tokenID: String) async throws -> StoredSession?

    /// The user's sessions unexpired at `now`, newest first (by creation, then token ID), at most `limit`.
    func sessions(of user: UserID, now: Date, limit: Int) async throws -> [StoredSession]

    /// Moves a session's last use to `at` (never back).
    func touchSession(_ tokenID: String, at: Date) async throws

    /// Sets the user's password hash to `new` if it is still `old`, and marks it changed at `at`;
    /// in the same transaction every other session of the user is revoked (as ``revokeToken``
    /// does) and every device not registered by `tokenID` is removed (also those of tokens issued
    /// before sessions were recorded, which no session names). Returns the revoked sessions, or
    /// nil if the hash was not `old` (another change came first) or the user does not exist.
    func changePassword(of user: UserID, from old: String, to new: String, keeping tokenID: String, at: Date) async throws -> [StoredSession]?

    // MARK: Devices

    /// Registers a device for push notifications, one row per (platform, token). The same token
    /// registered again by the same user keeps its ID and creation time and takes the new login,
    /// topic and environment (an app registers at every launch); registered by another user (the
    /// phone changed hands, or its user signed in to another account), it leaves the first user.
    /// Past `keepingAtMost` devices, the user's oldest are removed. Returns the stored device,
    /// whether it is new, and the user it was taken from, if another had it.
    func registerDevice(_ device: StoredDevice, keepingAtMost limit: Int) async throws -> (device: StoredDevice, created: Bool, takenFrom: UserID?)

    /// A user's devices, oldest first.
    func devices(of user: UserID) async throws -> [StoredDevice]

    /// What a push notification to `user` needs, read together: their devices (oldest first), their
    /// unread count (``unread(of:)``), and the display name of `sender` (nil when not asked
    /// for or unknown). Nothing but the devices is read when there are none.
    func pushRecipient(_ user: UserID, sender: UserID?) async throws -> PushRecipient

    /// Removes one of a user's devices; false if the user has none with this ID.
    func removeDevice(_ id: DeviceID, of user: UserID) async throws -> Bool

    /// Removes the devices a login registered (its logout).
    func removeDevices(registeredWith tokenID: String) async throws

    /// Keeps an upload's description (its bytes are in a blob store already). An ID stored
    /// already is a `conflict`.
    func recordMedia(_ media: StoredMedia) async throws

    /// An upload's description, nil if there is none with this ID.
    func media(_ id: MediaID) async throws -> StoredMedia?

    /// The bytes of every upload `user` made, together (against their quota).
    func mediaBytes(of user: UserID) async throws -> Int64

    /// Uploads are about to be attached to a message of `conversation`: its members may download
    /// them from now on, and ``removeUnattachedMedia(uploadedBefore:limit:)`` keeps them. Answers
    /// the IDs found: one the sweeper removed first is missing. Whichever of the two comes second
    /// sees what the first did, so an upload is never both attached and removed. Idempotent.
    @discardableResult
    func referenceMedia(_ ids: [MediaID], in conversation: ConversationID) async throws -> Set<MediaID>

    /// Removes up to `limit` uploads made before `cutoff` that were never attached to a message,
    /// oldest first, and answers them (their bytes are the caller's to delete, once
    /// ``hasMedia(withSHA256:)`` says no other upload has them).
    func removeUnattachedMedia(uploadedBefore cutoff: Date, limit: Int) async throws -> [StoredMedia]

    /// Whether any upload's bytes have this SHA-256.
    func hasMedia(withSHA256 sha256: String) async throws -> Bool

    /// The messages of the conversations `user` is a member of now (or of `conversation` only, if
    /// they are a member of it) that hold every term: of the `window` newest such
    /// messages, the best matches first (then the newest), skipping `offset`, at most `limit`.
    /// Tombstones are never found; an edited message by its text now. The window bounds the
    /// work of a word found in most messages: only the newest matches are ranked.
    func searchMessages(of user: UserID, terms: [SearchText.Term], in conversation: ConversationID?, window: Int, offset: Int, limit: Int) async throws -> [Message]

    /// The conversations whose members may download an upload: those it was attached to a
    /// message of, and the group it is the photo of.
    func conversationsReferencing(_ id: MediaID) async throws -> [ConversationID]

    /// The conversations `user` is a member of, newest activity first, after `cursor`.
    func conversations(of user: UserID, after cursor: ConversationPageCursor?, limit: Int) async throws -> [ConversationRecord]

    /// Moves a member's watermarks forward (a lower value is ignored; `readSeq` implies delivered),
    /// stamping the change with `at` when one of them moved. Returns the member's watermarks after
    /// the update; nil if not a member.
    func advanceReceipts(in id: ConversationID, user: UserID, deliveredSeq: Int64, readSeq: Int64, at: Date) async throws -> ConversationMember?

    /// What changed after `since` that concerns `user`, for resuming an event stream: the user's
    /// conversations whose last change is newer, the receipts in them that moved, and the
    /// conversations the user was removed from. (Messages are read by conversation and seq.)
    func durableChanges(for user: UserID, since: Date) async throws -> DurableChanges
}

extension ChatStore {
    /// Stores a new user; a deleted account's handle stays taken.
    public func createUser(_ user: StoredUser) async throws {
        try await createUser(user, reclaimingHandlesDeletedBefore: .distantPast)
    }
}

/// A change of a conversation's name or members (``ChatStore/recentChanges(in:since:)``).
public struct RecentChange: Hashable, Sendable {
    public var change: ConversationChangeKind
    public var at: Date
    /// The member a `member_removed` change removed.
    public var removed: UserID?

    public init(change: ConversationChangeKind, at: Date, removed: UserID? = nil) {
        self.change = change
        self.at = at.millisecondPrecision
        self.removed = removed
    }
}

/// The durable changes after an instant that concern one user (messages aside): see
/// ``ChatStore/durableChanges(for:since:)``. Each carries the instant it was made.
public struct DurableChanges: Hashable, Sendable {
    public struct Change: Hashable, Sendable {
        public var conversation: ConversationRecord
        public var change: ConversationChangeKind
        public var at: Date

        public init(conversation: ConversationRecord, change: ConversationChangeKind, at: Date) {
            self.conversation = conversation
            self.change = change
            self.at = at.millisecondPrecision
        }
    }

    public struct Receipt: Hashable, Sendable {
        public var conversationId: ConversationID
        public var member: ConversationMember
        public var at: Date

        public init(conversationId: ConversationID, member: ConversationMember, at: Date) {
            self.conversationId = conversationId
            self.member = member
            self.at = at.millisecondPrecision
        }
    }

    /// The user's conversations whose last change is after the instant (with that change).
    public var conversations: [Change] = []
    /// Watermarks that moved after the instant, in the user's conversations.
    public var receipts: [Receipt] = []
    /// Conversations the user was removed from after the instant (`change` is `member_removed`).
    public var removals: [Change] = []
    /// Annotations stored after the instant, in the user's conversations, oldest first.
    public var annotations: [Annotation] = []
    /// Messages erased after the instant, in the user's conversations, oldest first.
    public var erasures: [Erasure] = []

    public init(conversations: [Change] = [], receipts: [Receipt] = [], removals: [Change] = [], annotations: [Annotation] = [], erasures: [Erasure] = []) {
        self.conversations = conversations
        self.receipts = receipts
        self.removals = removals
        self.annotations = annotations
        self.erasures = erasures
    }
}

/// Where a listing of changes across conversations got to (``ChatStore/messageChanges(for:since:after:limit:)``).
public struct ChangePosition: Codable, Hashable, Sendable {
    public var conversationId: ConversationID
    public var changeSeq: Int64

    public init(conversationId: ConversationID, changeSeq: Int64) {
        self.conversationId = conversationId
        self.changeSeq = changeSeq
    }

    public init(_ change: MessageChange) {
        self.init(conversationId: change.conversationId, changeSeq: change.changeSeq)
    }
}

/// An emoji a user holds on message `seq` (``ChatStore/reactions(of:in:seqs:)``).
public struct HeldReaction: Hashable, Sendable {
    public var seq: Int64
    public var emoji: String

    public init(seq: Int64, emoji: String) {
        self.seq = seq
        self.emoji = emoji
    }

    /// A message, its reactions' `me` set where `held` (the reader's reactions in its
    /// conversation) says so.
    public static func marking(_ message: Message, held: Set<HeldReaction>) -> Message {
        var message = message
        message.reactions = message.reactions?.map { reaction in
            var reaction = reaction
            reaction.me = held.contains(HeldReaction(seq: message.seq, emoji: reaction.emoji))
            return reaction
        }
        return message
    }
}

/// One message to append, from the conversation's owner.
public struct AppendRequest: Hashable, Sendable {
    public var conversationId: ConversationID
    /// The owner's epoch (from ``ChatStore/acquireOwnership(of:)``).
    public var epoch: Int64
    public var senderId: UserID
    public var clientMessageId: String
    public var text: String
    public var sentAt: Date
    /// The message's files, nil when none.
    public var attachments: [Attachment]?
    /// The quote of the message it replies to, nil when none.
    public var replyTo: MessageQuote?
    /// The members it mentions, nil when none.
    public var mentions: [UserID]?
    /// The app's own fields, nil when none.
    public var metadata: Metadata?

    public init(
        conversationId: ConversationID, epoch: Int64, senderId: UserID, clientMessageId: String, text: String, sentAt: Date,
        attachments: [Attachment]? = nil, replyTo: MessageQuote? = nil, mentions: [UserID]? = nil, metadata: Metadata? = nil
    ) {
        self.metadata = metadata?.orNilWhenEmpty
        self.replyTo = replyTo
        self.mentions = mentions?.isEmpty == true ? nil : mentions
        self.conversationId = conversationId
        self.epoch = epoch
        self.senderId = senderId
        self.clientMessageId = clientMessageId
        self.text = text
        self.sentAt = sentAt.millisecondPrecision
        self.attachments = attachments
    }

    /// The message this append stores as `seq` at `sentAt` (milliseconds).
    public func message(seq: Int64, sentAt: Int64) -> Message {
        var message = Message(
            conversationId: conversationId, seq: seq, senderId: senderId, clientMessageId: clientMessageId, text: text,
            sentAt: Date(millisecondsSince1970: sentAt), attachments: attachments)
        message.replyTo = replyTo
        message.mentions = mentions
        message.metadata = metadata
        return message
    }
}

/// What became of one append.
public enum AppendOutcome: Hashable, Sendable {
    /// Stored with the next seq.
    case appended(Message)
    /// This `clientMessageId` was stored before: the original message, unchanged.
    case duplicate(Message)
    /// The epoch is not the conversation's current one: another node owns it now.
    case staleEpoch(current: Int64)
    /// No such conversation.
    case unknownConversation

    /// The message, for `.appended` and `.duplicate`.
    public var message: Message? {
        switch self {
        case .appended(let message), .duplicate(let message): message
        case .staleEpoch, .unknownConversation: nil
        }
    }
}

/// Why a store operation failed.
public struct ChatStoreError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// The ID exists already.
        case conflict
        /// No such conversation.
        case notFound
        /// The epoch is stale: another node owns the conversation.
        case staleEpoch
        /// The database could not be reached or refused the operation.
        case unavailable
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { "\(kind.rawValue): \(message)" }
}

extension ChatStore {
    /// One commit at a time, unless the store says otherwise.
    public var concurrentCommits: Int { 1 }

    /// Three reads, one after the other; a store that can answer in one read does.
    public func pushRecipient(_ user: UserID, sender: UserID?) async throws -> PushRecipient {
        let devices = try await devices(of: user)
        guard !devices.isEmpty else { return PushRecipient(devices: [], unread: 0, senderName: nil) }
        let unread = try await self.unread(of: user).messages
        let senderName = try await sender.asyncMap { try await self.user(id: $0)?.user.displayName } ?? nil
        return PushRecipient(devices: devices, unread: unread, senderName: senderName)
    }

    public var blockingCommit: BlockingCommit? { nil }
}

/// ``ChatStore/commit(_:)`` on the caller's thread.
public typealias BlockingCommit = @Sendable ([AppendRequest]) throws -> [AppendOutcome]

/// Where one webhook endpoint's events of one conversation have got to.
public struct WebhookCursorRecord: Sendable, Hashable {
    /// The endpoint's name.
    public var endpoint: String
    /// What the endpoint has been told, in the conversation owner's encoding (the store keeps it
    /// as it is).
    public var state: String
    /// Whether the endpoint was owed events beyond `state` when this was stored.
    public var pending: Bool

    public init(endpoint: String, state: String, pending: Bool) {
        self.endpoint = endpoint
        self.state = state
        self.pending = pending
    }
}

/// What a push notification to a user needs from the store (``ChatStore/pushRecipient(_:sender:)``).
public struct PushRecipient: Sendable, Hashable {
    public var devices: [StoredDevice]
    public var unread: Int64
    public var senderName: String?

    public init(devices: [StoredDevice], unread: Int64, senderName: String?) {
        self.devices = devices
        self.unread = unread
        self.senderName = senderName
    }
}

extension Optional {
    fileprivate func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
