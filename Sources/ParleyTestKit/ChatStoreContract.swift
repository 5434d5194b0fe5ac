import Foundation
import ParleyModel
import ParleyStore

/// The one contract every ``ChatStore`` passes: test targets run each case against each store
/// (`@Test(arguments: ChatStoreContract.cases)`). A broken rule throws ``ContractViolation``.
public enum ChatStoreContract {
    public typealias Case = ContractCase<any ChatStore>

    static func check(_ condition: Bool, _ message: @autoclosure () -> String, line: Int = #line) throws {
        try contractCheck(condition, message, file: "ChatStoreContract.swift", line: line)
    }

    static let alice: UserID = "u_alice"
    static let bob: UserID = "u_bob"
    static let carol: UserID = "u_carol"
    static let t0 = Date(millisecondsSince1970: 1_795_000_000_123)

    static func conversation(_ id: ConversationID = .make(), members: [UserID] = [alice, bob]) -> ConversationRecord {
        ConversationRecord(
            id: id, kind: members.count == 2 ? .direct : .group, name: members.count == 2 ? nil : "team", ownerId: members[0],
            createdAt: t0, members: members.enumerated().map { ConversationMember(userId: $1, role: $0 == 0 ? .owner : .member) })
    }

    static func append(_ id: ConversationID, epoch: Int64, _ text: String, from sender: UserID = alice, cmid: String = UUID().uuidString.lowercased(), at offset: Int64 = 0) -> AppendRequest {
        AppendRequest(conversationId: id, epoch: epoch, senderId: sender, clientMessageId: cmid, text: text, sentAt: Date(millisecondsSince1970: t0.millisecondsSince1970 + offset))
    }

    /// A new conversation, owned (epoch acquired) by the caller.
    static func owned(_ store: any ChatStore, members: [UserID] = [alice, bob]) async throws -> (ConversationID, Int64) {
        let record = conversation(members: members)
        try await store.createConversation(record)
        return (record.id, try await store.acquireOwnership(of: record.id))
    }

    /// What the migrations' undo tests keep through an undo: `user`'s profile photo (the upload
    /// it answers) and a message from them to `reader` with the words `Findable Élodie`.
    public static func pictureAndMessage(of user: UserID, to reader: UserID, in store: any ChatStore) async throws -> StoredMedia {
        let photo = StoredMedia(media: Media(id: .make(), contentType: "image/png", size: 1, sha256: String(repeating: "ab", count: 32), createdAt: Date()), uploaderId: user)
        try await store.recordMedia(photo)
        _ = try await store.setAvatar(of: user, to: photo.media.id, at: Date())
        let id = ConversationID.make()
        try await store.createConversation(ConversationRecord(
            id: id, kind: .direct, name: nil, ownerId: user, createdAt: Date(),
            members: [ConversationMember(userId: user, role: .owner), ConversationMember(userId: reader, role: .member)]))
        let epoch = try await store.acquireOwnership(of: id)
        _ = try await store.commit([AppendRequest(
            conversationId: id, epoch: epoch, senderId: user, clientMessageId: UUID().uuidString.lowercased(), text: "Findable Élodie", sentAt: Date())])
        return photo
    }

    /// An image upload of `user`'s, young enough that only a release hands it to a sweep before `t0`.
    static func photoUpload(by user: UserID) -> StoredMedia {
        StoredMedia(
            media: Media(
                id: .make(), contentType: "image/jpeg", size: 2_000, sha256: (0..<32).map { _ in String(format: "%02x", Int.random(in: 0...255)) }.joined(),
                width: 64, height: 48, createdAt: t0.addingTimeInterval(1_000_000)),
            uploaderId: user)
    }

    /// One of every class of character the API accepts in a text: what a store gives back must be
    /// these bytes exactly.
    public static let acceptedTexts: [String] = [
        "plain ASCII",
        "tab\tnewline\ncarriage return\r\nend",
        "emoji 👍🏽 and flags 🇫🇷🇯🇵",
        "ZWJ sequences 👩‍👩‍👧‍👦 👨🏿‍🚀 🏳️‍🌈",
        "right to left: שלום עולם · مرحبا بالعالم",
        "combining marks: e\u{301} Z\u{324}\u{354}\u{367}\u{311}\u{343} ᄀ\u{1161}\u{11A8}",
        "invisible: \u{FEFF} \u{200B} \u{2028} \u{2029} \u{7F} \u{85} end",
        "private use \u{E000} \u{10FFFD}, noncharacters \u{FFFE} \u{FFFF}, astral 𝄞𓀀",
        String(repeating: "𝄞", count: 4_000),  // 4,000 scalars of 4 bytes each
        String(repeating: "é", count: 4_000),
    ]

    public static let cases: [Case] = [
        Case(name: "every class of accepted text reads back byte for byte, as messages, names and display names") { store in
            // Fresh IDs and handles: a shared store (the PostgreSQL suite's) keeps earlier runs' users.
            let run = UUID().uuidString.prefix(8).lowercased()
            let users = (0..<acceptedTexts.count).map { _ in UserID.make() }
            for (index, (user, text)) in zip(users, acceptedTexts).enumerated() {
                let displayName = String(text.prefix(64))
                try await store.createUser(StoredUser(
                    user: User(id: user, handle: "text\(index)-\(run)", displayName: displayName, createdAt: t0), passwordHash: "h"))
                let stored = try await store.user(id: user)?.user.displayName
                try check(stored.map { Array($0.utf8) } == Array(displayName.utf8), "display name \(index) changed")
            }
            var record = conversation(members: [alice, bob, carol])
            record.name = String(acceptedTexts[5].prefix(64))
            try await store.createConversation(record)
            let epoch = try await store.acquireOwnership(of: record.id)
            let storedName = try await store.conversation(record.id)?.name
            try check(storedName.map { Array($0.utf8) } == record.name.map { Array($0.utf8) }, "the conversation's name changed")
            let appends = acceptedTexts.enumerated().map { append(record.id, epoch: epoch, $1, at: Int64($0)) }
            let outcomes = try await store.commit(appends)
            var acknowledged: [Message] = []
            for outcome in outcomes {
                guard case .appended(let message) = outcome else { throw ContractViolation(description: "not appended: \(outcome)") }
                acknowledged.append(message)
            }
            for (message, text) in zip(acknowledged, acceptedTexts) {
                try check(Array(message.text.utf8) == Array(text.utf8), "acknowledged text of seq \(message.seq) changed")
            }
            let after = try await store.messages(in: record.id, after: 0, limit: 100)
            let before = try await store.messages(in: record.id, before: Int64(acceptedTexts.count) + 1, limit: 100)
            for read in [after, before] {
                try check(read.map { Array($0.text.utf8) } == acceptedTexts.map { Array($0.utf8) }, "a read-back text differs from what was acknowledged")
            }
            for (message, text) in zip(acknowledged, acceptedTexts) {
                let found = try await store.message(in: record.id, clientMessageId: message.clientMessageId)
                try check(found.map { Array($0.text.utf8) } == Array(text.utf8), "seq \(message.seq) found by clientMessageId differs")
            }
            let last = try await store.lastMessages(in: [record.id])[record.id]
            try check(last.map { Array($0.text.utf8) } == acceptedTexts.last.map { Array($0.utf8) }, "the last message differs")
        },
        Case(name: "a conversation reads back as created; a second create conflicts") { store in
            let record = conversation(members: [alice, bob, carol])
            try await store.createConversation(record)
            let read = try await store.conversation(record.id)
            try check(read == record, "read back \(String(describing: read)), created \(record)")
            do {
                try await store.createConversation(record)
                try check(false, "a second create must throw")
            } catch let error as ChatStoreError {
                try check(error.kind == .conflict, "second create threw \(error)")
            }
            try check(try await store.conversation(.make()) == nil, "an unknown ID reads as nil")
        },
        Case(name: "each acquisition of ownership gives a higher epoch") { store in
            let record = conversation()
            try await store.createConversation(record)
            let first = try await store.acquireOwnership(of: record.id)
            let second = try await store.acquireOwnership(of: record.id)
            try check(second > first, "epochs \(first) then \(second)")
            do {
                _ = try await store.acquireOwnership(of: .make())
                try check(false, "acquiring an unknown conversation must throw")
            } catch let error as ChatStoreError {
                try check(error.kind == .notFound, "threw \(error)")
            }
        },
        Case(name: "appends get seqs 1…N in order, across conversations in one commit") { store in
            let (a, epochA) = try await owned(store)
            let (b, epochB) = try await owned(store)
            var batch: [AppendRequest] = []
            for i in 0..<10 {
                let even = i % 2 == 0
                batch.append(append(even ? a : b, epoch: even ? epochA : epochB, "m\(i)", at: Int64(i)))
            }
            let outcomes = try await store.commit(batch)
            try check(outcomes.count == 10, "\(outcomes.count) outcomes for 10 appends")
            for (i, outcome) in outcomes.enumerated() {
                guard case .appended(let message) = outcome else { throw ContractViolation(description: "append \(i): \(outcome)") }
                try check(message.seq == Int64(i / 2 + 1) && message.text == "m\(i)", "append \(i) got seq \(message.seq), text \(message.text)")
                try check(message.id == "\(message.conversationId.rawValue):\(message.seq)", "message id \(message.id)")
            }
            let readA = try await store.conversation(a)
            try check(readA?.lastSeq == 5, "lastSeq \(String(describing: readA?.lastSeq))")
            try check(readA?.lastActivityAt == Date(millisecondsSince1970: t0.millisecondsSince1970 + 8), "lastActivityAt follows the last message")
            let stored = try await store.messages(in: a, after: 0, limit: 100)
            try check(stored.map(\.seq) == [1, 2, 3, 4, 5] && stored.map(\.text) == ["m0", "m2", "m4", "m6", "m8"], "stored \(stored.map(\.text))")
        },
        Case(name: "a clientMessageId stored before returns the original and uses no seq") { store in
            let (id, epoch) = try await owned(store)
            let cmid = UUID().uuidString.lowercased()
            let first = try await store.commit([append(id, epoch: epoch, "original", cmid: cmid)])
            let again = try await store.commit([append(id, epoch: epoch, "resent with other text", from: bob, cmid: cmid, at: 500), append(id, epoch: epoch, "next")])
            guard case .appended(let original) = first.first, case .duplicate(let duplicate) = again.first, case .appended(let next) = again.last else {
                throw ContractViolation(description: "outcomes \(first) then \(again)")
            }
            try check(duplicate == original, "duplicate \(duplicate) is not the original \(original)")
            try check(next.seq == 2, "the next message got seq \(next.seq), expected 2: a duplicate must not use a seq")
            try check(try await store.message(in: id, clientMessageId: cmid) == original, "lookup by clientMessageId")
        },
        Case(name: "an appended message is the message read back, to the millisecond it is stored with") { store in
            let (id, epoch) = try await owned(store)
            var request = append(id, epoch: epoch, "between milliseconds")
            request.sentAt = Date(timeIntervalSince1970: 1_800_000_000.123_456)
            let outcomes = try await store.commit([request, request])
            guard case .appended(let appended) = outcomes.first, case .duplicate(let duplicate) = outcomes.last else {
                throw ContractViolation(description: "outcomes \(outcomes)")
            }
            let stored = try await store.messages(in: id, after: 0, limit: 10)
            try check(stored == [appended], "appended \(appended), read back \(stored)")
            try check(duplicate == appended, "the same clientMessageId again in the batch: \(duplicate)")
        },
        Case(name: "the same clientMessageId twice in one commit stores it once") { store in
            let (id, epoch) = try await owned(store)
            let cmid = UUID().uuidString.lowercased()
            let outcomes = try await store.commit([append(id, epoch: epoch, "a", cmid: cmid), append(id, epoch: epoch, "a", cmid: cmid)])
            guard case .appended(let message) = outcomes.first, case .duplicate(let duplicate) = outcomes.last else {
                throw ContractViolation(description: "outcomes \(outcomes)")
            }
            try check(message == duplicate && message.seq == 1, "\(message) vs \(duplicate)")
        },
        Case(name: "recently active conversations: those with activity after the instant, the latest first") { store in
            // Far from every other case's instants: a shared database holds their conversations too.
            let (a, epochA) = try await owned(store)
            let (b, epochB) = try await owned(store)
            let (quiet, _) = try await owned(store)
            let late: Int64 = 9_000_000_000
            _ = try await store.commit([append(a, epoch: epochA, "a", at: late + 1_000), append(b, epoch: epochB, "b", at: late + 3_000)])
            let since = Date(millisecondsSince1970: t0.millisecondsSince1970 + late)
            let mine: Set<ConversationID> = [a, b, quiet]
            let recent = try await store.recentlyActiveConversations(since: since, limit: 100).filter(mine.contains)
            try check(recent == [b, a], "recently active \(recent), expected b then a (the quiet one not at all)")
            let afterA = try await store.recentlyActiveConversations(
                since: Date(millisecondsSince1970: t0.millisecondsSince1970 + late + 1_000), limit: 100).filter(mine.contains)
            try check(afterA == [b], "activity strictly after a's message: \(afterA)")
            let one = try await store.recentlyActiveConversations(since: since, limit: 1)
            try check(one.count == 1, "limit 1 gave \(one.count)")
        },
        Case(name: "a stale epoch cannot append; the new owner continues gapless") { store in
            let (id, oldEpoch) = try await owned(store)
            _ = try await store.commit([append(id, epoch: oldEpoch, "by the first owner")])
            let newEpoch = try await store.acquireOwnership(of: id)
            let outcomes = try await store.commit([append(id, epoch: oldEpoch, "by the stale owner"), append(id, epoch: newEpoch, "by the new owner")])
            try check(outcomes.first == .staleEpoch(current: newEpoch), "stale append: \(String(describing: outcomes.first))")
            try check(outcomes.last?.message?.seq == 2, "new owner's append: \(String(describing: outcomes.last))")
            let texts = try await store.messages(in: id, after: 0, limit: 10).map(\.text)
            try check(texts == ["by the first owner", "by the new owner"], "stored \(texts)")
            do {
                try await store.addMembers([ConversationMember(userId: carol, role: .member)], to: id, epoch: oldEpoch, at: t0)
                try check(false, "a stale owner must not add members")
            } catch let error as ChatStoreError {
                try check(error.kind == .staleEpoch, "threw \(error)")
            }
        },
        Case(name: "an unknown conversation cannot append") { store in
            let outcomes = try await store.commit([append(.make(), epoch: 1, "nowhere")])
            try check(outcomes == [.unknownConversation], "\(outcomes)")
        },
        Case(name: "history pages by after and before") { store in
            let (id, epoch) = try await owned(store)
            _ = try await store.commit((1...20).map { append(id, epoch: epoch, "m\($0)", at: Int64($0)) })
            try check(try await store.messages(in: id, after: 15, limit: 100).map(\.seq) == [16, 17, 18, 19, 20], "after 15")
            try check(try await store.messages(in: id, after: 0, limit: 3).map(\.seq) == [1, 2, 3], "after 0 limit 3")
            try check(try await store.messages(in: id, before: 10, limit: 4).map(\.seq) == [6, 7, 8, 9], "before 10 limit 4")
            try check(try await store.messages(in: id, before: 3, limit: 50).map(\.seq) == [1, 2], "before 3")
            try check(try await store.messages(in: id, after: 20, limit: 10).isEmpty, "after the last")
            try check(try await store.messages(in: .make(), after: 0, limit: 10).isEmpty, "unknown conversation")
        },
        Case(name: "the last messages of several conversations come in one call") { store in
            let (a, epochA) = try await owned(store)
            let (b, epochB) = try await owned(store)
            let (empty, _) = try await owned(store)
            _ = try await store.commit([append(a, epoch: epochA, "a1"), append(b, epoch: epochB, "b1"), append(a, epoch: epochA, "a2")])
            let last = try await store.lastMessages(in: [a, b, empty, .make()])
            try check(last[a]?.text == "a2" && last[a]?.seq == 2, "a: \(String(describing: last[a]))")
            try check(last[b]?.text == "b1" && last[b]?.seq == 1, "b: \(String(describing: last[b]))")
            try check(last.count == 2, "no entry for a conversation without messages or an unknown one: \(last.keys)")
        },
        Case(name: "text is stored exactly as sent") { store in
            let (id, epoch) = try await owned(store)
            let texts = ["  leading and trailing  \n", "e\u{301} (decomposed) vs \u{e9} (composed)", "👋🏽 مرحبا 你好", "tab\there", String(repeating: "x", count: 4000)]
            _ = try await store.commit(texts.map { append(id, epoch: epoch, $0) })
            let stored = try await store.messages(in: id, after: 0, limit: 10)
            for (text, message) in zip(texts, stored) {
                try check(Array(message.text.unicodeScalars) == Array(text.unicodeScalars), "stored \(message.text.debugDescription) for \(text.debugDescription)")
            }
        },
        Case(name: "sending moves the sender's own watermarks to its message") { store in
            let (id, epoch) = try await owned(store)
            _ = try await store.commit([append(id, epoch: epoch, "1"), append(id, epoch: epoch, "2", from: bob)])
            let members = try await store.conversation(id)?.members ?? []
            let aliceMember = members.first { $0.userId == alice }
            let bobMember = members.first { $0.userId == bob }
            try check(aliceMember?.deliveredSeq == 1 && aliceMember?.readSeq == 1, "alice \(members)")
            try check(bobMember?.deliveredSeq == 2 && bobMember?.readSeq == 2, "bob \(members)")
        },
        Case(name: "receipts only move forward and read implies delivered") { store in
            let (id, epoch) = try await owned(store)
            _ = try await store.commit((1...10).map { append(id, epoch: epoch, "m\($0)") })
            var bob = try await store.advanceReceipts(in: id, user: Self.bob, deliveredSeq: 7, readSeq: 3, at: t0)
            try check(bob?.deliveredSeq == 7 && bob?.readSeq == 3, "\(String(describing: bob))")
            bob = try await store.advanceReceipts(in: id, user: Self.bob, deliveredSeq: 2, readSeq: 1, at: t0)
            try check(bob?.deliveredSeq == 7 && bob?.readSeq == 3, "moved back: \(String(describing: bob))")
            bob = try await store.advanceReceipts(in: id, user: Self.bob, deliveredSeq: 0, readSeq: 9, at: t0)
            try check(bob?.deliveredSeq == 9 && bob?.readSeq == 9, "read 9 implies delivered 9: \(String(describing: bob))")
            try check(try await store.conversation(id)?.member(Self.bob) == bob, "persisted")
            try check(try await store.advanceReceipts(in: id, user: carol, deliveredSeq: 1, readSeq: 1, at: t0) == nil, "a non-member has no receipts")
        },
        Case(name: "members are added once and removed, fenced by epoch") { store in
            let (id, epoch) = try await owned(store, members: [alice, bob, carol])
            let dave: UserID = "u_dave"
            try await store.addMembers([ConversationMember(userId: dave, role: .member), ConversationMember(userId: bob, role: .owner)], to: id, epoch: epoch, at: t0)
            var members = try await store.conversation(id)?.members ?? []
            try check(members.map(\.userId).sorted() == [alice, bob, carol, dave].sorted(), "\(members)")
            try check(members.first { $0.userId == bob }?.role == .member, "an existing member is left as it is")
            try await store.removeMember(carol, from: id, epoch: epoch, at: t0)
            members = try await store.conversation(id)?.members ?? []
            try check(members.map(\.userId).sorted() == [alice, bob, dave].sorted(), "\(members)")
        },
        Case(name: "when the owner leaves, the longest-standing member left owns the group (ConversationState's rule)") { store in
            let dave: UserID = "u_dave"
            let (id, epoch) = try await owned(store, members: [alice, bob, carol])
            try await store.addMembers([ConversationMember(userId: dave, role: .member)], to: id, epoch: epoch, at: t0)
            // Bob joined before Carol and Dave: he inherits. A member leaving changes no owner.
            try await store.removeMember(carol, from: id, epoch: epoch, at: t0)
            try check(try await store.conversation(id)?.ownerId == alice, "a member leaving changes no owner")
            try await store.removeMember(alice, from: id, epoch: epoch, at: t0)
            var read = try require2(try await store.conversation(id))
            try check(read.ownerId == bob && read.member(bob)?.role == .owner, "owner after alice left: \(read.ownerId), \(read.members)")
            try check(read.members.filter { $0.role == .owner }.count == 1, "one owner: \(read.members)")
            try check(read.members.map(\.userId) == [bob, dave], "members in the order they joined: \(read.members)")
            try await store.removeMember(bob, from: id, epoch: epoch, at: t0)
            read = try require2(try await store.conversation(id))
            try check(read.ownerId == dave && read.members.map(\.role) == [.owner], "the last member owns it: \(read.members)")
        },
        Case(name: "concurrent commits never share or skip a seq") { store in
            let (id, epoch) = try await owned(store)
            let seqs = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for task in 0..<20 {
                    group.addTask {
                        var seqs: [Int64] = []
                        for i in 0..<10 {
                            let outcome = try await store.commit([append(id, epoch: epoch, "t\(task)-\(i)")])
                            seqs += outcome.compactMap { $0.message?.seq }
                        }
                        return seqs
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            try check(seqs.sorted() == Array(1...200), "seqs \(seqs.sorted().prefix(20))…")
        },
        Case(name: "users: unique handles, lookups, profile updates") { store in
            let suffix = UUID().uuidString.prefix(8).lowercased()
            let ann = StoredUser(user: User(id: .make(), handle: "ann_\(suffix)", displayName: "Ann", createdAt: t0), passwordHash: "$2b$12$hash")
            try await store.createUser(ann)
            try check(try await store.user(id: ann.user.id) == ann, "by id")
            try check(try await store.user(handle: ann.user.handle) == ann, "by handle")
            try check(try await store.user(handle: "nobody_\(suffix)") == nil, "unknown handle")
            do {
                try await store.createUser(StoredUser(user: User(id: .make(), handle: ann.user.handle, displayName: "Other", createdAt: t0), passwordHash: "x"))
                try check(false, "a taken handle must conflict")
            } catch let error as ChatStoreError {
                try check(error.kind == .conflict, "threw \(error)")
            }
            let renamed = try await store.updateProfile(of: ann.user.id, displayName: "Ann B.", avatarURL: nil, metadata: nil, privateMetadata: nil, at: t0)
            try check(renamed?.displayName == "Ann B." && renamed?.avatarURL == nil && renamed?.handle == ann.user.handle, "\(String(describing: renamed))")
            let pictured = try await store.updateProfile(of: ann.user.id, displayName: nil, avatarURL: "https://example.com/a.png", metadata: nil, privateMetadata: nil, at: t0)
            try check(pictured?.displayName == "Ann B." && pictured?.avatarURL == "https://example.com/a.png", "\(String(describing: pictured))")
            try check(try await store.updateProfile(of: .make(), displayName: "x", avatarURL: nil, metadata: nil, privateMetadata: nil, at: t0) == nil, "unknown user")
            try check(try await store.existingUsers([ann.user.id, .make()]) == [ann.user.id], "existing users")
        },
        Case(name: "users: a bot is kept as a bot") { store in
            let run = UUID().uuidString.prefix(8).lowercased()
            let bot = User(id: UserID.make(), handle: "bot\(run)", displayName: "Translator", createdAt: t0, bot: true)
            let person = User(id: UserID.make(), handle: "person\(run)", displayName: "Person", createdAt: t0)
            try await store.createUser(StoredUser(user: bot, passwordHash: "!"))
            try await store.createUser(StoredUser(user: person, passwordHash: "hash"))
            let byID = try await store.user(id: bot.id)?.user, byHandle = try await store.user(handle: bot.handle)?.user
            try check(byID == bot && byHandle?.bot == true, "the bot read back")
            try check(try await store.user(id: person.id)?.user.bot == false, "a person read back as a bot")
            try check(try await store.searchUsers(prefix: "bot\(run)", limit: 5) == [bot], "found as a bot")
        },
        Case(name: "annotations: stored per message and key, replaced, fenced, and found by seqs and for a member's resume") { store in
            let (me, other) = (UserID.make(), UserID.make())
            let (id, epoch) = try await owned(store, members: [me, other])
            _ = try await store.commit((1...3).map { append(id, epoch: epoch, "m\($0)") })
            let first = Annotation(conversationId: id, seq: 2, key: "translation.es", value: "hola", authorId: other, at: t0.addingTimeInterval(10))
            let other1 = Annotation(conversationId: id, seq: 1, key: "summary", value: "greetings", authorId: other, at: t0.addingTimeInterval(11))
            try await store.annotate(first, epoch: epoch)
            try await store.annotate(other1, epoch: epoch)
            let replaced = Annotation(conversationId: id, seq: 2, key: "translation.es", value: "¡hola!", authorId: other, at: t0.addingTimeInterval(12))
            try await store.annotate(replaced, epoch: epoch)
            let all = try await store.annotations(in: id, seqs: 1...3)
            try check(all == [other1, replaced], "by seq: \(all)")
            try check(try await store.annotations(in: id, seqs: 2...2) == [replaced], "one seq")
            try check(try await store.annotations(in: id, seqs: 3...3).isEmpty, "a message without")
            let changes = try await store.durableChanges(for: me, since: t0.addingTimeInterval(10.5)).annotations
            try check(changes == [other1, replaced], "a member's resume finds them, oldest first: \(changes)")
            try check(try await store.durableChanges(for: UserID.make(), since: t0).annotations.isEmpty, "a stranger's resume")
            _ = try await store.acquireOwnership(of: id)
            do {
                try await store.annotate(first, epoch: epoch)
                try check(false, "a stale owner annotated")
            } catch let error as ChatStoreError {
                try check(error.kind == .staleEpoch, "a stale epoch threw \(error)")
            }
        },
        Case(name: "users: handle prefix search takes _ and . literally") { store in
            let suffix = UUID().uuidString.prefix(8).lowercased()
            for handle in ["q\(suffix)_a", "q\(suffix)_b", "q\(suffix)xa", "q\(suffix).c"] {
                try await store.createUser(StoredUser(user: User(id: .make(), handle: handle, displayName: handle, createdAt: t0), passwordHash: "x"))
            }
            let underscore = try await store.searchUsers(prefix: "q\(suffix)_", limit: 10).map(\.handle)
            try check(underscore == ["q\(suffix)_a", "q\(suffix)_b"], "\(underscore)")
            let all = try await store.searchUsers(prefix: "q\(suffix)", limit: 3).map(\.handle)
            try check(all == ["q\(suffix).c", "q\(suffix)_a", "q\(suffix)_b"], "sorted by handle, limited: \(all)")
        },
        Case(name: "users: display names are found by the prefix of any of their words, case and accents aside") { store in
            let run = UUID().uuidString.prefix(6).lowercased()
            func user(_ handle: String, _ name: String) async throws -> User {
                let user = User(id: .make(), handle: "\(handle)\(run)", displayName: name, createdAt: t0)
                try await store.createUser(StoredUser(user: user, passwordHash: "x"))
                return user
            }
            let elodie = try await user("el", "Élodie Zq\(run)Martin")
            let ann = try await user("an", "ANN-MARIE  Zq\(run)Smith Zq\(run)Smith")
            let li = try await user("li", "李小龙 Zq\(run)")
            let named = try await user("zq\(run)", "Nobody")
            try check(try await store.searchUsers(prefix: "zq\(run)MAR", limit: 10) == [elodie], "a later word, another case")
            try check(try await store.searchUsers(prefix: "élodie zq\(run)", limit: 10) == [elodie], "accents aside, from the first word")
            try check(try await store.searchUsers(prefix: "ann-marie zq\(run)s", limit: 10) == [ann], "white space runs count as one")
            let all = try await store.searchUsers(prefix: "Zq\(run)", limit: 10)
            try check(all.first == named && Set(all) == [named, elodie, ann, li] && all.count == 4,
                      "a handle first, then names by key, each once: \(all.map(\.handle))")
            try check(try await store.searchUsers(prefix: "李小", limit: 10) == [li], "a script without case, as written")
            try check(try await store.searchUsers(prefix: "Zq\(run)", limit: 2).count == 2, "limited")
            let renamed = try require2(try await store.updateProfile(of: elodie.id, displayName: "Lodie", avatarURL: nil, metadata: nil, privateMetadata: nil, at: t0))
            try check(try await store.searchUsers(prefix: "zq\(run)mar", limit: 10).isEmpty, "a name changed is no longer found by the old one")
            try check(try await store.searchUsers(prefix: "lodie", limit: 10).contains(renamed), "but by the new")
            _ = try await store.beginDeletion(of: ann.id, erase: false, at: t0)
            try check(try await store.searchUsers(prefix: "zq\(run)smith", limit: 10).isEmpty, "a deleted account is never found")
        },
        Case(name: "revoked tokens stay revoked") { store in
            let token = UUID().uuidString
            try check(!(try await store.isTokenRevoked(token)), "not yet")
            try await store.revokeToken(token, expiresAt: t0.addingTimeInterval(3600))
            try await store.revokeToken(token, expiresAt: t0.addingTimeInterval(3600))
            try check(try await store.isTokenRevoked(token), "revoked")
        },
        Case(name: "sessions: recorded, listed newest first unexpired, touched forward only, gone when revoked") { store in
            // A fresh user: a shared store (the PostgreSQL suite's) keeps earlier runs' sessions.
            let me = UserID.make()
            let other = UserID.make()
            func session(_ user: UserID, at offset: Double, lasting: Double = 3600, agent: String? = "app/1.0") -> StoredSession {
                StoredSession(
                    tokenId: UUID().uuidString.lowercased(), userId: user, createdAt: t0.addingTimeInterval(offset), lastUsedAt: t0.addingTimeInterval(offset),
                    expiresAt: t0.addingTimeInterval(offset + lasting), userAgent: agent)
            }
            let first = session(me, at: 0, agent: nil)
            let second = session(me, at: 10, agent: "Parley/2 (iPhone; iOS 19) «é»")
            let short = session(me, at: 20, lasting: 30)
            let theirs = session(other, at: 5)
            for s in [first, second, short, theirs] { try await store.openSession(s) }
            try await store.openSession(first)  // recorded twice: still one
            let readBack = try await store.session(second.tokenId)
            try check(readBack == second, "read back: \(String(describing: readBack))")
            try check(try await store.session(UUID().uuidString) == nil, "an unknown token has no session")
            var listed = try await store.sessions(of: me, now: t0.addingTimeInterval(25), limit: 10)
            try check(listed == [short, second, first], "newest first: \(listed.map(\.tokenId))")
            listed = try await store.sessions(of: me, now: t0.addingTimeInterval(60), limit: 10)
            try check(listed == [second, first], "the expired one is not listed: \(listed.map(\.tokenId))")
            try check(try await store.sessions(of: me, now: t0, limit: 1) == [short], "limited")
            // Touched: forward only.
            try await store.touchSession(first.tokenId, at: t0.addingTimeInterval(100))
            try await store.touchSession(first.tokenId, at: t0.addingTimeInterval(50))
            try check(try await store.session(first.tokenId)?.lastUsedAt == t0.addingTimeInterval(100), "touched forward only")
            // A new session removes the user's expired ones (and only the user's).
            let later = session(me, at: 100)
            try await store.openSession(later)
            try check(try await store.session(short.tokenId) == nil, "the expired session was removed when the next opened")
            try check(try await store.session(theirs.tokenId) != nil, "another user's session stayed")
            // Revoked: the session goes, the revocation stays.
            try await store.revokeToken(second.tokenId, expiresAt: second.expiresAt)
            try check(try await store.session(second.tokenId) == nil, "a revoked token's session is gone")
            try check(try await store.isTokenRevoked(second.tokenId), "and the token is revoked")
            try check(try await store.sessions(of: me, now: t0.addingTimeInterval(100), limit: 10).map(\.tokenId) == [later.tokenId, first.tokenId], "listed after revoking")
        },
        Case(name: "blocks: one per pair and direction, the first time kept, found from either side and among members") { store in
            // Fresh users: a shared store (the PostgreSQL suite's) keeps earlier runs' blocks.
            let (ann, bob, cat, dan) = (UserID.make(), UserID.make(), UserID.make(), UserID.make())
            try check(try await store.block(Block(blocker: ann, blocked: bob), at: t0), "a new block")
            try check(!(try await store.block(Block(blocker: ann, blocked: bob), at: t0.addingTimeInterval(5))), "blocked twice is not new")
            try check(try await store.block(Block(blocker: cat, blocked: ann), at: t0.addingTimeInterval(1)), "the other direction, by someone else")
            try check(try await store.block(Block(blocker: bob, blocked: ann), at: t0.addingTimeInterval(2)), "both directions are two blocks")
            _ = try await store.block(Block(blocker: cat, blocked: dan), at: t0.addingTimeInterval(3))
            let involving = try await store.blocks(involving: ann)
            let expected = [
                StoredBlock(block: Block(blocker: bob, blocked: ann), at: t0.addingTimeInterval(2)),
                StoredBlock(block: Block(blocker: cat, blocked: ann), at: t0.addingTimeInterval(1)),
                StoredBlock(block: Block(blocker: ann, blocked: bob), at: t0),
            ]
            try check(involving == expected, "either side, newest first, the first time kept: \(involving)")
            let among = try await store.blocks(among: [ann, bob, dan])
            try check(among == [Block(blocker: ann, blocked: bob), Block(blocker: bob, blocked: ann)], "among members only: \(among)")
            try check(try await store.blocks(among: [ann]).isEmpty, "one member has no pairs")
            try check(try await store.unblock(Block(blocker: ann, blocked: bob)), "unblocked")
            try check(!(try await store.unblock(Block(blocker: ann, blocked: bob))), "unblocked twice")
            try check(try await store.blocks(among: [ann, bob]) == [Block(blocker: bob, blocked: ann)], "the other direction stays")
        },
        Case(name: "reports: one open per reporter and target, listed oldest first by status and page, resolved once, webhooks owed until done") { store in
            // Fresh users; the listing is checked around this run's reports (a shared store holds others).
            let (ann, bob, cat) = (UserID.make(), UserID.make(), UserID.make())
            let conversation = ConversationID.make()
            let message = Message(conversationId: conversation, seq: 3, senderId: bob, clientMessageId: "c", text: "buy now", sentAt: t0)
            func report(_ reporter: UserID, _ user: UserID, seq: Int64?, at offset: Double, reason: ReportReason = .spam) -> Report {
                Report(
                    id: .make(), reporterId: reporter, userId: user, conversationId: seq == nil ? nil : conversation, seq: seq, reason: reason,
                    note: "«note»", message: seq == nil ? nil : message, createdAt: Date(millisecondsSince1970: Int64(Date().timeIntervalSince1970 * 1000) + Int64(offset * 1000)))
            }
            let first = report(ann, bob, seq: 3, at: 0)
            let filed = try await store.fileReport(first)
            try check(filed.created && filed.report == first, "filed: \(filed)")
            let retried = try await store.fileReport(report(ann, bob, seq: 3, at: 1, reason: .harassment))
            try check(!retried.created && retried.report == first, "a retry finds the open report: \(retried)")
            let aboutUser = try await store.fileReport(report(ann, bob, seq: nil, at: 2))
            let byCat = try await store.fileReport(report(cat, bob, seq: 3, at: 3))
            try check(aboutUser.created && byCat.created, "another target, another reporter: new reports")
            try check(try await store.report(first.id) == first, "read back")
            try check(try await store.report(.make()) == nil, "an unknown report")
            let mine: Set<ReportID> = [first.id, aboutUser.report.id, byCat.report.id]
            var open = try await store.reports(status: .open, after: nil, limit: 10_000).filter { mine.contains($0.id) }
            try check(open.map(\.id) == [first.id, aboutUser.report.id, byCat.report.id], "open, oldest first: \(open.map(\.id))")
            let page = try await store.reports(status: .open, after: first.id, limit: 1)
            try check(page.first.map { $0.createdAt >= first.createdAt && $0.id != first.id } == true, "a page after the first: \(page.map(\.id))")
            let owed = try await store.reportsOwingWebhooks(limit: 10_000).filter { mine.contains($0.id) }
            try check(owed.map(\.id) == [first.id, aboutUser.report.id, byCat.report.id], "webhooks owed: \(owed.map(\.id))")
            try await store.reportWebhooksDone(first.id)
            try check(!(try await store.reportsOwingWebhooks(limit: 10_000)).contains { $0.id == first.id }, "done")

            let resolved = try await store.resolveReport(first.id, resolution: "warned bob", at: t0.addingTimeInterval(60))
            try check(resolved?.status == .resolved && resolved?.resolution == "warned bob" && resolved?.resolvedAt == t0.addingTimeInterval(60), "\(String(describing: resolved))")
            let again = try await store.resolveReport(first.id, resolution: "something else", at: t0.addingTimeInterval(90))
            try check(again == resolved, "resolved once: \(String(describing: again))")
            try check(try await store.resolveReport(.make(), resolution: nil, at: t0) == nil, "an unknown report")
            open = try await store.reports(status: .open, after: nil, limit: 10_000).filter { mine.contains($0.id) }
            try check(open.map(\.id) == [aboutUser.report.id, byCat.report.id], "the resolved one is no longer open")
            let closed = try await store.reports(status: .resolved, after: nil, limit: 10_000).filter { mine.contains($0.id) }
            try check(closed == [again!], "listed as resolved")
            try check(try await store.reports(status: nil, after: nil, limit: 10_000).filter { mine.contains($0.id) }.count == 3, "any status")
            // Resolved, the same target may be reported again.
            try check(try await store.fileReport(report(ann, bob, seq: 3, at: 4)).created, "a new report after the old one was resolved")
        },
        Case(name: "an erasure keeps a message's seq, sender and time, empties the rest, fenced; a member's resume finds it; erasing again erases nothing") { store in
            let (me, other) = (UserID.make(), UserID.make())
            let (id, epoch) = try await owned(store, members: [me, other])
            let photo = Attachment(media: Media(id: .make(), contentType: "image/png", size: 10, sha256: String(repeating: "ab", count: 32), createdAt: t0), caption: "me")
            var withPhoto = append(id, epoch: epoch, "two", from: other, at: 2)
            withPhoto.attachments = [photo]
            _ = try await store.commit([append(id, epoch: epoch, "one", from: me, at: 1), withPhoto, append(id, epoch: epoch, "three", from: other, at: 3)])
            try await store.annotate(Annotation(conversationId: id, seq: 2, key: "summary", value: "2", authorId: me, at: t0.addingTimeInterval(4)), epoch: epoch)
            let before = try await store.messages(in: id, after: 0, limit: 10)
            let erased = try await store.eraseMessages(in: id, seqs: [2, 3, 9], epoch: epoch, at: t0.addingTimeInterval(20))
            try check(erased == Array(before[1...2]), "the messages as they were, in seq order, none that does not exist: \(erased.map(\.seq))")
            let after = try await store.messages(in: id, after: 0, limit: 10)
            try check(after[0] == before[0], "another message is untouched")
            try check(after[1] == before[1].tombstone && after[2] == before[2].tombstone, "tombstones: \(after[1...2])")
            try check(after[1].erased == true && after[1].text.isEmpty && after[1].attachments == nil && after[1].senderId == other && after[1].sentAt == before[1].sentAt,
                      "seq, sender and time kept, the rest gone")
            try check(try await store.messages(in: id, before: 4, limit: 10) == after, "read back before")
            try check(try await store.message(in: id, clientMessageId: before[1].clientMessageId) == after[1], "found by clientMessageId, erased")
            try check(try await store.lastMessages(in: [id])[id] == after[2], "the last message, erased")
            try check(try await store.annotations(in: id, seqs: 1...3).isEmpty, "its annotations are gone")
            let resumed = try await store.durableChanges(for: me, since: t0.addingTimeInterval(10)).erasures
            try check(resumed == [Erasure(message: before[1], at: t0.addingTimeInterval(20)), Erasure(message: before[2], at: t0.addingTimeInterval(20))],
                      "a member's resume finds them, oldest first: \(resumed)")
            try check(try await store.durableChanges(for: me, since: t0.addingTimeInterval(20)).erasures.isEmpty, "none after")
            try check(try await store.durableChanges(for: UserID.make(), since: t0).erasures.isEmpty, "a stranger's resume")
            try check(try await store.erasures(in: id, since: t0.addingTimeInterval(10), limit: 10) == resumed, "the conversation's, for a new owner")
            try check(try await store.erasures(in: id, since: t0.addingTimeInterval(10), limit: 1) == [resumed[1]], "the latest, at most the limit")
            try check(try await store.erasures(in: id, since: t0.addingTimeInterval(20), limit: 10).isEmpty, "none after")
            try check(try await store.eraseMessages(in: id, seqs: [2], epoch: epoch, at: t0.addingTimeInterval(30)).isEmpty, "erasing again erases nothing")
            try check(try await store.durableChanges(for: me, since: t0.addingTimeInterval(25)).erasures.isEmpty, "and records nothing")
            let outcome = try await store.commit([append(id, epoch: epoch, "retry", from: other, cmid: before[1].clientMessageId, at: 5)])
            guard case .duplicate(let retried) = outcome.first else { throw ContractViolation(description: "a retry of an erased message: \(outcome)") }
            try check(retried.seq == 2 && retried.text.isEmpty, "a retry of an erased message finds it erased: \(retried)")
            _ = try await store.acquireOwnership(of: id)
            do {
                _ = try await store.eraseMessages(in: id, seqs: [1], epoch: epoch, at: t0.addingTimeInterval(40))
                throw ContractViolation(description: "a stale owner erased a message")
            } catch let error as ChatStoreError where error.kind == .staleEpoch {}
            try check(try await store.messages(in: id, after: 0, limit: 1) == [before[0]], "the fenced erasure changed nothing")
        },
        Case(name: "changes to messages: numbered one by one, fenced; an edit keeps the text it replaced; reactions counted per emoji and held once per member") { store in
            let (me, other) = (UserID.make(), UserID.make())
            let (id, epoch) = try await owned(store, members: [me, other])
            _ = try await store.commit([append(id, epoch: epoch, "one", from: me, at: 1), append(id, epoch: epoch, "two", from: other, at: 2)])
            let sent = try await store.messages(in: id, after: 0, limit: 10)
            func change(_ number: Int64, _ kind: MessageChange.Kind, seq: Int64 = 1, by user: UserID, text: String? = nil, emoji: String? = nil, key: String? = nil) -> MessageChange {
                MessageChange(
                    conversationId: id, changeSeq: number, afterSeq: 2, seq: seq, kind: kind, userId: user, at: t0.addingTimeInterval(Double(10 + number)),
                    text: text, emoji: emoji, clientChangeId: key)
            }
            let key = UUID().uuidString.lowercased()
            let edit = try require2(try await store.commitChange(change(1, .edited, by: me, text: "one, edited", key: key), epoch: epoch))
            try check(edit.message.text == "one, edited" && edit.message.editedAt == t0.addingTimeInterval(11) && edit.message.seq == 1, "the edited message: \(edit.message)")
            try check(try await store.messages(in: id, after: 0, limit: 1) == [edit.message], "read back edited")
            try check(try await store.conversation(id)?.lastChangeSeq == 1, "the conversation's last change number")
            try check(try await store.messageChange(in: id, clientChangeId: key) == edit.change, "the edit is found by its client change ID")
            try check(try await store.messageChange(in: id, clientChangeId: UUID().uuidString.lowercased()) == nil, "an unknown client change ID")
            _ = try await store.commitChange(change(2, .edited, by: me, text: "one, again"), epoch: epoch)
            try check(try await store.messageVersions(in: id, seq: 1) == [MessageVersion(text: "one", at: sent[0].sentAt), MessageVersion(text: "one, edited", at: t0.addingTimeInterval(11))],
                      "the texts replaced, oldest first")
            do {
                _ = try await store.commitChange(change(2, .edited, by: me, text: "reused number"), epoch: epoch)
                throw ContractViolation(description: "a change number was used twice")
            } catch let error as ChatStoreError where error.kind == .conflict {}
            do {
                _ = try await store.commitChange(change(3, .edited, by: me, text: "reused key", key: key), epoch: epoch)
                throw ContractViolation(description: "a client change ID was used twice")
            } catch let error as ChatStoreError where error.kind == .conflict {}
            try check(try await store.messages(in: id, after: 0, limit: 1).first?.text == "one, again", "refused changes changed nothing")

            let thumbs = "👍", heart = "❤️"
            let first = try require2(try await store.commitChange(change(3, .reactionAdded, seq: 2, by: me, emoji: thumbs), epoch: epoch))
            try check(first.change.count == 1, "one holds it: \(first.change)")
            try check(try await store.commitChange(change(4, .reactionAdded, seq: 2, by: me, emoji: thumbs), epoch: epoch) == nil, "held already: no change")
            let second = try require2(try await store.commitChange(change(4, .reactionAdded, seq: 2, by: other, emoji: thumbs), epoch: epoch))
            try check(second.change.count == 2, "two hold it")
            _ = try await store.commitChange(change(5, .reactionAdded, seq: 2, by: other, emoji: heart), epoch: epoch)
            let reacted = try await store.messages(in: id, after: 1, limit: 1)
            try check(reacted.first?.reactions == [Reaction(emoji: thumbs, count: 2), Reaction(emoji: heart, count: 1)], "the most held first: \(String(describing: reacted.first?.reactions))")
            try check(try await store.reactions(of: other, in: id, seqs: 1...2) == [HeldReaction(seq: 2, emoji: heart), HeldReaction(seq: 2, emoji: thumbs)].sorted { Array($0.emoji.utf8).lexicographicallyPrecedes(Array($1.emoji.utf8)) },
                      "what a member holds")
            let removed = try require2(try await store.commitChange(change(6, .reactionRemoved, seq: 2, by: me, emoji: thumbs), epoch: epoch))
            try check(removed.change.count == 1 && removed.message.reactions == [Reaction(emoji: heart, count: 1), Reaction(emoji: thumbs, count: 1)], "taken back: \(removed)")
            try check(try await store.commitChange(change(7, .reactionRemoved, seq: 2, by: me, emoji: thumbs), epoch: epoch) == nil, "not held: no change")
            try check(try await store.commitChange(change(7, .edited, seq: 9, by: me, text: "x"), epoch: epoch) == nil, "no such message: no change")

            let deleted = try require2(try await store.commitChange(change(7, .deleted, seq: 2, by: me), epoch: epoch))
            try check(deleted.message == sent[1].deletedTombstone(by: me) && deleted.message.deleted == true && deleted.message.deletedBy == me && deleted.message.erased == nil,
                      "the tombstone says who deleted it: \(deleted.message)")
            let lastMessage = try await store.lastMessages(in: [id])[id]
            try check(try await store.messages(in: id, after: 1, limit: 1) == [deleted.message] && lastMessage == deleted.message, "read back deleted, and as the last message")
            try check(try await store.reactions(of: other, in: id, seqs: 1...2).isEmpty, "its reactions are gone")
            try check(try await store.commitChange(change(8, .reactionAdded, seq: 2, by: me, emoji: heart), epoch: epoch) == nil, "a tombstone takes no reaction")
            try check(try await store.eraseMessages(in: id, seqs: [2], epoch: epoch, at: t0.addingTimeInterval(30)).isEmpty, "nor an erasure")
            _ = try await store.commitChange(change(8, .deleted, seq: 1, by: me), epoch: epoch)
            try check(try await store.messageVersions(in: id, seq: 1).isEmpty, "a deleted message's earlier texts are gone")
            try check(try await store.messages(in: id, after: 0, limit: 1) == [sent[0].deletedTombstone(by: me)], "an edited message deleted says nothing of its edits")

            let all = try await store.messageChanges(in: id, after: 0, limit: 100)
            try check(all.map(\.changeSeq) == Array(1...8) && all.map(\.kind) == [.edited, .edited, .reactionAdded, .reactionAdded, .reactionAdded, .reactionRemoved, .deleted, .deleted],
                      "the log, in order: \(all.map(\.kind))")
            try check(all[0] == edit.change && all[0].clientChangeId == key, "a change reads back as committed")
            try check(try await store.messageChanges(in: id, after: 6, limit: 1).map(\.changeSeq) == [7], "paged")
            try check(try await store.messageChanges(in: id, since: t0.addingTimeInterval(15), limit: 2).map(\.changeSeq) == [7, 8], "the latest since an instant, oldest first")
            try check(try await store.messageChanges(for: other, since: t0.addingTimeInterval(16), after: nil, limit: 10).map(\.changeSeq) == [7, 8], "a member's, since an instant")
            try check(try await store.messageChanges(for: other, since: t0, after: ChangePosition(all[5]), limit: 1).map(\.changeSeq) == [7], "from a position")
            try check(try await store.messageChanges(for: UserID.make(), since: t0, after: nil, limit: 10).isEmpty, "a stranger's")
            try check(try await store.recentlyChangedConversations(since: t0.addingTimeInterval(17), limit: 10000).contains(id), "a change makes the conversation recently changed")

            _ = try await store.acquireOwnership(of: id)
            do {
                _ = try await store.commitChange(change(9, .reactionAdded, seq: 1, by: me, emoji: heart), epoch: epoch)
                throw ContractViolation(description: "a stale owner committed a change")
            } catch let error as ChatStoreError where error.kind == .staleEpoch {}
            try check(try await store.conversation(id)?.lastChangeSeq == 8, "the fenced change changed nothing")
        },
        Case(name: "replies keep their quote current through edits, deletions and erasures; mentions are found per member; pins move with their changes") { store in
            let (me, other, third) = (UserID.make(), UserID.make(), UserID.make())
            let (id, epoch) = try await owned(store, members: [me, other, third])
            let long = String(repeating: "é", count: 150)
            _ = try await store.commit([append(id, epoch: epoch, long, from: me, at: 1), append(id, epoch: epoch, "second", from: other, at: 2)])
            let originals = try await store.messages(in: id, after: 0, limit: 2)
            let quote = MessageQuote(of: originals[0])
            try check(quote.text == String(repeating: "é", count: 100) && quote.senderId == me && !quote.attachments && quote.deleted == nil, "a quote: \(quote)")
            var reply = append(id, epoch: epoch, "a reply", from: other, at: 3)
            reply.replyTo = quote
            reply.mentions = [me, third]
            var plain = append(id, epoch: epoch, "mentions one", from: third, at: 4)
            plain.mentions = [me]
            var second = append(id, epoch: epoch, "replies to two", from: me, at: 5)
            second.replyTo = MessageQuote(of: originals[1])
            let outcomes = try await store.commit([reply, plain, second])
            let sent = outcomes.compactMap(\.message)
            try check(sent.count == 3 && sent[0].replyTo == quote && sent[0].mentions == [me, third] && sent[1].replyTo == nil, "committed: \(sent)")
            try check(try await store.messages(in: id, after: 2, limit: 3) == sent, "read back with quote and mentions")
            try check(try await store.commit([reply]).first == .duplicate(sent[0]), "a retry answers the reply with its quote and mentions")
            try check(try await store.replies(in: id, to: 1, after: 0, limit: 10) == [sent[0]], "the replies to message 1")
            try check(try await store.replies(in: id, to: 1, after: 3, limit: 10).isEmpty, "paged")
            try check(try await store.replies(in: id, to: 3, after: 0, limit: 10).isEmpty, "none to a message without replies")

            let mentions = try await store.mentions(of: me, before: nil, limit: 10)
            try check(mentions == [sent[1], sent[0]], "the caller's mentions, newest first: \(mentions.map(\.seq))")
            try check(try await store.mentions(of: me, before: MentionPosition(sentAt: sent[1].sentAt.millisecondsSince1970, seq: 4, conversationId: id), limit: 10) == [sent[0]],
                      "from before a position")
            try check(try await store.mentions(of: third, before: nil, limit: 10) == [sent[0]], "another member's")
            try check(try await store.mentions(of: other, before: nil, limit: 10).isEmpty, "one never mentioned")

            func change(_ number: Int64, _ kind: MessageChange.Kind, seq: Int64, text: String? = nil) -> MessageChange {
                MessageChange(conversationId: id, changeSeq: number, afterSeq: 5, seq: seq, kind: kind, userId: me, at: t0.addingTimeInterval(Double(10 + number)), text: text)
            }
            _ = try await store.commitChange(change(1, .edited, seq: 1, text: "short now"), epoch: epoch)
            try check(try await store.messages(in: id, after: 2, limit: 1).first?.replyTo?.text == "short now", "an edit requotes the reply")
            let pinned = try require2(try await store.commitChange(change(2, .pinned, seq: 1), epoch: epoch))
            try check(pinned.change.kind == .pinned && pinned.message.seq == 1, "a pin is a change: \(pinned.change)")
            try check(try await store.commitChange(change(3, .pinned, seq: 1), epoch: epoch) == nil, "pinned already: no change")
            _ = try await store.commitChange(change(3, .pinned, seq: 2), epoch: epoch)
            _ = try await store.commitChange(change(4, .pinned, seq: 4), epoch: epoch)
            try check(try await store.conversation(id)?.pinned == [4, 2, 1], "the most recently pinned first")
            _ = try await store.commitChange(change(5, .unpinned, seq: 2), epoch: epoch)
            try check(try await store.commitChange(change(6, .unpinned, seq: 2), epoch: epoch) == nil, "not pinned: no change")
            try check(try await store.conversation(id)?.pinned == [4, 1], "unpinned")

            _ = try await store.commitChange(change(6, .deleted, seq: 1), epoch: epoch)
            let requoted = try await store.messages(in: id, after: 2, limit: 1).first
            try check(requoted?.replyTo == MessageQuote(seq: 1, senderId: me, text: "", attachments: false, deleted: true), "a deletion empties the quote: \(String(describing: requoted?.replyTo))")
            try check(try await store.conversation(id)?.pinned == [4], "a deletion unpins")
            _ = try await store.eraseMessages(in: id, seqs: [2, 4], epoch: epoch, at: t0.addingTimeInterval(40))
            try check(try await store.messages(in: id, after: 4, limit: 1).first?.replyTo?.deleted == true, "an erasure empties the quote of a reply to it")
            try check(try await store.conversation(id)?.pinned == [], "an erasure unpins")
            try check(try await store.mentions(of: me, before: nil, limit: 10) == [sent[0]].map { var m = $0; m.replyTo = m.replyTo?.erased; return m },
                      "an erased message's mention is gone")
            _ = try await store.commitChange(change(7, .deleted, seq: 3, text: nil), epoch: epoch)
            let tombstone = try await store.messages(in: id, after: 2, limit: 1).first
            try check(tombstone?.replyTo == nil && tombstone?.mentions == nil, "a tombstone neither quotes nor mentions: \(String(describing: tombstone))")
            try check(try await store.replies(in: id, to: 1, after: 0, limit: 10).isEmpty, "nor is it a reply")
            try check(try await store.mentions(of: third, before: nil, limit: 10).isEmpty, "and its mentions are gone")
            try await store.removeMember(me, from: id, epoch: epoch, at: t0.addingTimeInterval(50))
            try check(try await store.mentions(of: me, before: nil, limit: 10).isEmpty, "a former member's mentions there are not listed")

            // Mentions in every message of a batch that fills more than one block of 64: each
            // message is still found by its seq, its mentions with it.
            let (busy, busyEpoch) = try await owned(store, members: [me, other])
            let batch = (1...130).map { number in
                var mentioning = append(busy, epoch: busyEpoch, "m\(number)", from: me, at: Int64(number))
                mentioning.mentions = [other]
                return mentioning
            }
            _ = try await store.commit(batch)
            for seq in [Int64(1), 63, 64, 65, 100, 128, 129, 130] {
                let found = try await store.messages(in: busy, after: seq - 1, limit: 1).first
                try check(found?.seq == seq && found?.text == "m\(seq)" && found?.mentions == [other], "message \(seq) of a mentioning batch: \(String(describing: found))")
            }
            try check(try await store.messages(in: busy, before: 131, limit: 200).map(\.seq) == Array(1...130), "the whole batch, paged back")
            try check(try await store.mentions(of: other, before: nil, limit: 200).count == 130, "every mention listed")
        },
        Case(name: "a member's changes across conversations page by conversation, then number") { store in
            let member = UserID.make()
            var ids: [ConversationID] = []
            for _ in 0..<3 {
                let (id, epoch) = try await owned(store, members: [member, UserID.make()])
                _ = try await store.commit([append(id, epoch: epoch, "m", from: member, at: 1)])
                for number in Int64(1)...2 {
                    _ = try await store.commitChange(
                        MessageChange(conversationId: id, changeSeq: number, afterSeq: 1, seq: 1, kind: .edited, userId: member, at: t0.addingTimeInterval(Double(number)), text: "e\(number)"),
                        epoch: epoch)
                }
                ids.append(id)
            }
            var seen: [ChangePosition] = []
            var position: ChangePosition?
            while true {
                let page = try await store.messageChanges(for: member, since: t0, after: position, limit: 4)
                seen += page.map(ChangePosition.init)
                guard page.count == 4 else { break }
                position = page.last.map(ChangePosition.init)
            }
            let expected = ids.sorted { Array($0.rawValue.utf8).lexicographicallyPrecedes(Array($1.rawValue.utf8)) }.flatMap { id in
                [ChangePosition(conversationId: id, changeSeq: 1), ChangePosition(conversationId: id, changeSeq: 2)]
            }
            try check(seen == expected, "every change once, by conversation then number: \(seen)")
        },
        Case(name: "released uploads are attached nowhere and due to the sweeper") { store in
            let uploader = UserID.make()
            let (conversation, _) = try await owned(store)
            let media = StoredMedia(
                media: Media(id: .make(), contentType: "image/png", size: 5, sha256: String(repeating: "cd", count: 32), createdAt: t0.addingTimeInterval(1_000_000)),
                uploaderId: uploader)
            try await store.recordMedia(media)
            try await store.referenceMedia([media.media.id], in: conversation)
            try await store.releaseMedia([media.media.id])
            try check(try await store.conversationsReferencing(media.media.id).isEmpty, "referenced nowhere")
            let removed = try await store.removeUnattachedMedia(uploadedBefore: t0, limit: 10_000)
            try check(removed.contains { $0.media.id == media.media.id }, "the next sweep removes it, however young it was")
        },
        Case(name: "messages are found by their words, in the searcher's conversations only, as they are now: edited, deleted, erased") { store in
            let run = UUID().uuidString.prefix(6).lowercased()
            let (me, other) = (UserID.make(), UserID.make())
            let (group, epoch) = try await owned(store, members: [me, other, .make()])
            let (direct, directEpoch) = try await owned(store, members: [other, me])
            let (elsewhere, elsewhereEpoch) = try await owned(store, members: [other, .make()])
            func send(_ text: String, in id: ConversationID, _ epoch: Int64, caption: String? = nil) async throws -> Message {
                var request = append(id, epoch: epoch, text, from: other)
                if let caption {
                    request.attachments = [Attachment(media: Media(id: .make(), contentType: "image/jpeg", size: 1, sha256: String(repeating: "ab", count: 32), createdAt: t0), caption: caption)]
                }
                guard case .appended(let message) = try await store.commit([request]).first else { throw ContractViolation(description: "not appended") }
                return message
            }
            let hello = try await send("Hello world zq\(run)", in: group, epoch)
            let again = try await send("hello again Élodie zq\(run)", in: group, epoch)
            let tokyo = try await send("東京タワーに行った zq\(run)", in: group, epoch)
            let photo = try await send("", in: direct, directEpoch, caption: "sunset over the bay zq\(run)")
            let private1 = try await send("hello from elsewhere zq\(run)", in: elsewhere, elsewhereEpoch)
            func found(_ query: String, in conversation: ConversationID? = nil, window: Int = 1_000, offset: Int = 0, limit: Int = 50) async throws -> [Message] {
                try await store.searchMessages(of: me, terms: SearchText.terms(of: query), in: conversation, window: window, offset: offset, limit: limit)
            }
            try check(Set(try await found("HELLO zq\(run)").map(\.seq)) == [hello.seq, again.seq], "case aside, in both of a word's messages, not elsewhere")
            try check(try await found("hello world zq\(run)").map(\.id) == [hello.id], "every word must be found")
            try check(try await found("elodie zq\(run)").map(\.id) == [again.id], "accents aside")
            try check(try await found("elo zq\(run)").map(\.id) == [again.id], "a word found by its beginning")
            try check(try await found("東京 zq\(run)").map(\.id) == [tokyo.id], "a run of Japanese found inside a sentence")
            try check(try await found("京東 zq\(run)").isEmpty, "not the same characters in another order")
            try check(try await found("sunset zq\(run)").map(\.id) == [photo.id], "a caption's words")
            try check(try await found("sunset zq\(run)", in: group).isEmpty, "within one conversation only")
            let (inElsewhere, anywhere) = (try await found("hello zq\(run)", in: elsewhere), try await found("elsewhere zq\(run)"))
            try check(inElsewhere.isEmpty && !anywhere.contains { $0.id == private1.id }, "never a conversation the searcher is not in")
            let firstPage = try await found("zq\(run)", limit: 2), secondPage = try await found("zq\(run)", offset: 2, limit: 2)
            try check(firstPage.count == 2 && secondPage.count == 2 && Set(firstPage.map(\.id) + secondPage.map(\.id)).count == 4, "pages do not overlap")
            let windowed = try await found("zq\(run)", in: group, window: 2)
            try check(Set(windowed.map(\.id)) == [again.id, tokyo.id], "only the newest matches, as many as the window, are ranked: \(windowed.map(\.seq))")
            let twice = try await send("lantern lantern zq\(run)", in: direct, directEpoch)
            let once = try await send("lantern and many more words around it than the other has zq\(run)", in: direct, directEpoch)
            let ranked = try await found("lantern zq\(run)")
            try check(ranked.map(\.id) == [twice.id, once.id], "the better match first, though older: \(ranked.map(\.seq)) for \([twice.seq, once.seq])")

            _ = try await store.commitChange(
                MessageChange(conversationId: group, changeSeq: 1, afterSeq: again.seq, seq: again.seq, kind: .edited, userId: other, at: t0, text: "goodbye zq\(run)"),
                epoch: epoch)
            let (oldWords, newWords) = (try await found("again zq\(run)"), try await found("goodbye zq\(run)"))
            try check(oldWords.isEmpty && newWords.map(\.id) == [again.id], "an edit is found by its new words only")
            _ = try await store.commitChange(
                MessageChange(conversationId: group, changeSeq: 2, afterSeq: again.seq, seq: hello.seq, kind: .deleted, userId: other, at: t0), epoch: epoch)
            try check(try await found("world zq\(run)").isEmpty, "a deleted message is never found")
            _ = try await store.eraseMessages(in: group, seqs: [tokyo.seq], epoch: epoch, at: t0)
            try check(try await found("東京 zq\(run)").isEmpty, "nor an erased one")
            try await store.removeMember(me, from: direct, epoch: directEpoch, at: t0)
            try check(try await found("sunset zq\(run)").isEmpty, "nor one of a conversation the searcher left")
            let (empty, punctuation) = (try await found(""), try await found("!!!"))
            try check(empty.isEmpty && punctuation.isEmpty, "a query of no words finds nothing")
        },
        Case(name: "a message as long as a text may be, or of as many different characters, is stored and found by its last word") { store in
            let me = UserID.make()
            let (id, epoch) = try await owned(store, members: [me, .make()])
            func scalars(from first: UInt32, count: Int) -> String {
                String(String.UnicodeScalarView((0..<UInt32(count)).compactMap { Unicode.Scalar(first + $0) }))
            }
            let numbered: [String] = (0..<570).map { (number: Int) -> String in "w" + String(format: "%05d", number) }
            let letters: [Character] = Array("abcdefghijklmnopqrstuvwxyz")
            let pairs: [String] = (0..<100).map { (number: Int) -> String in String([letters[number / 26], letters[number % 26]]) }
            let texts: [String] = [
                numbered.joined(separator: " "),  // 3,989 scalars, every word different
                scalars(from: 0x4E00, count: 4_000),  // 4,000 different Chinese characters, each a word
                scalars(from: 0x20000, count: 150),  // characters of four bytes each
                pairs.joined(separator: " "),  // 100 different words of two letters
            ]
            for text in texts {
                guard case .appended(let message) = try await store.commit([append(id, epoch: epoch, text, from: me)]).first else {
                    throw ContractViolation(description: "a text of \(text.unicodeScalars.count) scalars was not appended")
                }
                let lastWord = String(text.split(separator: " ").last ?? "")
                let unspaced = lastWord.unicodeScalars.count > 1 && lastWord.unicodeScalars.allSatisfy(\.properties.isIdeographic)
                let last = unspaced ? String(lastWord.suffix(2)) : lastWord
                let found = try await store.searchMessages(of: me, terms: SearchText.terms(of: last), in: id, window: 1_000, offset: 0, limit: 5)
                try check(found.map(\.id) == [message.id], "\(text.unicodeScalars.count) scalars found by \(last): \(found.map(\.seq))")
            }
        },
        Case(name: "apps' fields on users (public and private apart), conversations, members and messages are kept as given, replaced and removed") { store in
            let run = UUID().uuidString.prefix(8).lowercased()
            let me = UserID.make()
            try await store.createUser(StoredUser(user: User(id: me, handle: "meta-\(run)", displayName: "Meta", createdAt: t0), passwordHash: "h"))
            let public1 = Metadata(["bio": .string("hi 👋"), "tier": .string("pro"), "aiUsage": .integer(9_007_199_254_740_993), "ratio": .number(0.25)])
            let private1 = Metadata(["learning": .array([.string("fr"), .null]), "nested": .object(["deep": .bool(true)])])
            let changed = try await store.updateProfile(of: me, displayName: nil, avatarURL: nil, metadata: public1, privateMetadata: private1, at: t0)
            try check(changed?.metadata == public1 && changed?.privateMetadata == nil, "public fields on the user, private ones apart: \(String(describing: changed))")
            try check(try await store.user(id: me)?.user.metadata == public1, "read back, an integer past 2^53 exactly")
            let looked = try await store.users([me]).first
            try check(looked?.metadata == public1 && looked?.privateMetadata == nil, "a lookup has no private fields")
            try check(try await store.privateMetadata(of: me) == private1, "the private ones read apart")
            let before = try await store.untoldProfiles(limit: 10_000).first { $0.user.id == me }?.version
            _ = try await store.updateProfile(of: me, displayName: nil, avatarURL: nil, metadata: nil, privateMetadata: Metadata([:]), at: t0)
            let (privateNow, publicNow) = (try await store.privateMetadata(of: me), try await store.user(id: me)?.user.metadata)
            try check(privateNow == nil && publicNow == public1, "an empty object removes them; the rest stays")
            try check(try await store.untoldProfiles(limit: 10_000).first { $0.user.id == me }?.version == before, "a change of private fields alone is told to nobody")
            _ = try await store.updateProfile(of: me, displayName: nil, avatarURL: nil, metadata: Metadata([:]), privateMetadata: nil, at: t0)
            try check(try await store.user(id: me)?.user.metadata == nil, "public ones removed")

            let other = UserID.make()
            let (group, epoch) = try await owned(store, members: [me, other, .make()])
            let fields = Metadata(["theme": .string("dark"), "pinnedTopic": .object(["id": .integer(7)])])
            try await store.updateConversation(group, name: nil, metadata: fields, epoch: epoch, at: t0)
            var record = try require2(try await store.conversation(group))
            try check(record.metadata == fields && record.name == "team", "a conversation's fields, its name untouched: \(record)")
            try await store.updateConversation(group, name: "renamed", metadata: nil, epoch: epoch, at: t0)
            record = try require2(try await store.conversation(group))
            try check(record.metadata == fields && record.name == "renamed", "a rename leaves the fields")
            let language = Metadata(["translateTo": .string("ja")])
            try check(try await store.setMemberMetadata(language, for: other, in: group, epoch: epoch), "a member's own fields")
            try check(!(try await store.setMemberMetadata(language, for: .make(), in: group, epoch: epoch)), "a stranger has none to set")
            record = try require2(try await store.conversation(group))
            try check(record.member(other)?.metadata == language && record.member(me)?.metadata == nil, "each member's own: \(record.members)")
            do {
                _ = try await store.setMemberMetadata(language, for: me, in: group, epoch: epoch - 1)
                try check(false, "a stale epoch must be refused")
            } catch let error as ChatStoreError {
                try check(error.kind == .staleEpoch, "threw \(error)")
            }
            _ = try await store.setMemberMetadata(nil, for: other, in: group, epoch: epoch)
            try await store.updateConversation(group, name: nil, metadata: Metadata([:]), epoch: epoch, at: t0)
            record = try require2(try await store.conversation(group))
            try check(record.metadata == nil && record.member(other)?.metadata == nil, "both removed")

            let voice = Metadata(["durationMs": .integer(3_250), "kind": .string("voice")])
            var append = append(group, epoch: epoch, "a voice note", from: me)
            append.metadata = voice
            guard case .appended(let sent) = try await store.commit([append]).first else { throw ContractViolation(description: "not appended") }
            try check(sent.metadata == voice, "a message carries its fields")
            try check(try await store.messages(in: group, after: sent.seq - 1, limit: 1).first?.metadata == voice, "read back")
            guard case .duplicate(let again) = try await store.commit([append]).first else { throw ContractViolation(description: "not a duplicate") }
            try check(again.metadata == voice, "a retry's answer carries them too")
            _ = try await store.commitChange(
                MessageChange(conversationId: group, changeSeq: record.lastChangeSeq + 1, afterSeq: sent.seq, seq: sent.seq, kind: .deleted, userId: me, at: t0), epoch: epoch)
            try check(try await store.messages(in: group, after: sent.seq - 1, limit: 1).first?.metadata == nil, "a tombstone carries none")

            _ = try await store.updateProfile(of: me, displayName: nil, avatarURL: nil, metadata: public1, privateMetadata: private1, at: t0)
            _ = try await store.beginDeletion(of: me, erase: false, at: t0)
            let (publicLeft, privateLeft) = (try await store.user(id: me)?.user.metadata, try await store.privateMetadata(of: me))
            try check(publicLeft == nil && privateLeft == nil, "a deleted account keeps none")
        },
        Case(name: "profile photos: set, replaced, removed, one of avatar and avatarURL; the photo before goes to the sweeper unless something uses it") { store in
            let run = UUID().uuidString.prefix(8).lowercased()
            let me = UserID.make()
            try await store.createUser(StoredUser(user: User(id: me, handle: "pic-\(run)", displayName: "Pic", createdAt: t0), passwordHash: "h"))
            let (a, b, c, d) = (photoUpload(by: me), photoUpload(by: me), photoUpload(by: me), photoUpload(by: me))
            for upload in [a, b, c, d] { try await store.recordMedia(upload) }
            func swept() async throws -> Set<MediaID> { Set(try await store.removeUnattachedMedia(uploadedBefore: t0, limit: 10_000).map(\.media.id)) }

            let first = try await store.setAvatar(of: me, to: a.media.id, at: t0)
            try check(first?.avatar == a.media && first?.avatarURL == nil, "the avatar set: \(String(describing: first))")
            try check(try await store.user(id: me)?.user.avatar == a.media, "and read back")
            try check(try await store.users([me]).first?.avatar == a.media, "by a lookup too")
            try check(!(try await swept().contains(a.media.id)), "a profile photo is kept from the sweeper")

            _ = try await store.setAvatar(of: me, to: b.media.id, at: t0)
            try check(try await swept().contains(a.media.id), "the photo replaced goes to the sweeper's next pass")
            try await store.referenceMedia([c.media.id], in: try await owned(store, members: [me, .make()]).0)
            _ = try await store.setAvatar(of: me, to: c.media.id, at: t0)
            try check(try await swept().contains(b.media.id), "and the next one replaced")
            let urlOnly = try await store.updateProfile(of: me, displayName: nil, avatarURL: "https://example.com/p.png", metadata: nil, privateMetadata: nil, at: t0)
            try check(urlOnly?.avatar == nil && urlOnly?.avatarURL == "https://example.com/p.png", "an avatarURL removes the avatar: \(String(describing: urlOnly))")
            try check(!(try await swept().contains(c.media.id)), "a photo also attached to a message stays")
            let photoAgain = try await store.setAvatar(of: me, to: d.media.id, at: t0)
            try check(photoAgain?.avatar == d.media && photoAgain?.avatarURL == nil, "an avatar removes the avatarURL: \(String(describing: photoAgain))")
            let none = try await store.setAvatar(of: me, to: nil, at: t0)
            try check(none?.avatar == nil && none?.avatarURL == nil, "removed")
            try check(try await swept().contains(d.media.id), "and swept")
            try check(try await store.setAvatar(of: .make(), to: nil, at: t0) == nil, "an unknown user")
            do {
                _ = try await store.setAvatar(of: me, to: a.media.id, at: t0)
                try check(false, "an upload the sweeper removed cannot be an avatar")
            } catch let error as ChatStoreError {
                try check(error.kind == .notFound, "threw \(error)")
            }
            try check(try await store.user(id: me)?.user.avatar == nil, "nothing changed by the refusal")
        },
        Case(name: "profile changes are counted until webhooks are told of them, and a deleted account's photo goes unless a group uses it") { store in
            let run = UUID().uuidString.prefix(8).lowercased()
            let me = UserID.make()
            try await store.createUser(StoredUser(user: User(id: me, handle: "told-\(run)", displayName: "Told", createdAt: t0), passwordHash: "h"))
            func untold() async throws -> UntoldProfile? { try await store.untoldProfiles(limit: 10_000).first { $0.user.id == me } }
            try check(try await untold() == nil, "a new user has told nothing")
            _ = try await store.updateProfile(of: me, displayName: "Told 2", avatarURL: nil, metadata: nil, privateMetadata: nil, at: t0.addingTimeInterval(1))
            let photo = photoUpload(by: me)
            try await store.recordMedia(photo)
            _ = try await store.setAvatar(of: me, to: photo.media.id, at: t0.addingTimeInterval(2))
            _ = try await store.setAvatar(of: me, to: photo.media.id, at: t0.addingTimeInterval(3))
            let owed = try require2(try await untold())
            try check(owed.version == 2 && owed.user.displayName == "Told 2" && owed.user.avatar == photo.media, "two changes (setting the same photo again is none): \(owed)")
            try check(owed.changedAt == t0.addingTimeInterval(2), "when the last was made: \(owed.changedAt)")
            try await store.profileTold(me, through: 1)
            try check(try await untold()?.version == 2, "told through the first: the second still owed")
            try await store.profileTold(me, through: 2)
            try check(try await untold() == nil, "told through both")
            try await store.profileTold(me, through: 1)
            try check(try await untold() == nil, "telling an older one moves nothing back")

            let (group, epoch) = try await owned(store, members: [me, .make(), .make()])
            _ = try await store.setConversationPhoto(group, to: photo.media.id, epoch: epoch, at: t0)
            _ = try await store.beginDeletion(of: me, erase: false, at: t0)
            try check(try await store.user(id: me)?.user.avatar == nil, "a deleted account shows no photo")
            try check(try await store.setAvatar(of: me, to: nil, at: t0) == nil, "nor can it be given one")
            try check(!(try await store.removeUnattachedMedia(uploadedBefore: t0, limit: 10_000).contains { $0.media.id == photo.media.id }),
                      "the group's photo it also was stays")
        },
        Case(name: "group photos: set under the owner's epoch, downloadable by the group, replaced and removed to the sweeper") { store in
            let owner = UserID.make()
            let (group, epoch) = try await owned(store, members: [owner, .make(), .make()])
            let (p, q) = (photoUpload(by: owner), photoUpload(by: owner))
            for upload in [p, q] { try await store.recordMedia(upload) }
            func swept() async throws -> Set<MediaID> { Set(try await store.removeUnattachedMedia(uploadedBefore: t0, limit: 10_000).map(\.media.id)) }

            try check(try await store.setConversationPhoto(group, to: p.media.id, epoch: epoch, at: t0) == p.media, "set")
            try check(try await store.conversation(group)?.photo == p.media, "read back")
            try check(try await store.conversationsReferencing(p.media.id) == [group], "its members may download it")
            try check(!(try await swept().contains(p.media.id)), "kept from the sweeper")
            do {
                _ = try await store.setConversationPhoto(group, to: q.media.id, epoch: epoch - 1, at: t0)
                try check(false, "a stale epoch must be refused")
            } catch let error as ChatStoreError {
                try check(error.kind == .staleEpoch, "threw \(error)")
            }
            try check(try await store.conversation(group)?.photo == p.media, "unchanged by a stale owner")
            _ = try await store.setConversationPhoto(group, to: q.media.id, epoch: epoch, at: t0)
            try check(try await store.conversationsReferencing(p.media.id).isEmpty, "the photo replaced is no longer the group's to download")
            try check(try await swept().contains(p.media.id), "and goes to the sweeper")
            do {
                _ = try await store.setConversationPhoto(group, to: p.media.id, epoch: epoch, at: t0)
                try check(false, "a removed upload cannot be a photo")
            } catch let error as ChatStoreError {
                try check(error.kind == .notFound, "threw \(error)")
            }
            try check(try await store.conversation(group)?.photo == q.media, "nothing changed by the refusal")
            try check(try await store.setConversationPhoto(group, to: nil, epoch: epoch, at: t0) == nil, "removed")
            try check(try await store.conversation(group)?.photo == nil, "read back removed")
            try check(try await swept().contains(q.media.id), "and swept")
        },
        Case(name: "users are looked up by ID in one read, in the order asked, each once, deleted accounts as deleted") { store in
            let run = UUID().uuidString.prefix(8).lowercased()
            let (ann, ben, gone) = (UserID.make(), UserID.make(), UserID.make())
            for (id, handle) in [(ann, "lookann-\(run)"), (ben, "lookben-\(run)"), (gone, "lookgone-\(run)")] {
                try await store.createUser(StoredUser(user: User(id: id, handle: handle, displayName: handle.uppercased(), createdAt: t0), passwordHash: "h"))
            }
            _ = try await store.beginDeletion(of: gone, erase: false, at: t0.addingTimeInterval(1))
            let found = try await store.users([ben, .make(), ann, gone, ben])
            try check(found.map(\.id) == [ben, ann, gone], "in the order asked, each once, an unknown ID left out: \(found.map(\.id))")
            try check(found[0].handle == "lookben-\(run)" && found[1].displayName == "LOOKANN-\(run.uppercased())", "as stored: \(found)")
            try check(found[2] == (try await store.user(id: gone))?.user && found[2].deleted == true, "a deleted account as it reads alone: \(found[2])")
            try check(try await store.users([]).isEmpty, "none asked")
            try check(try await store.users([.make()]).isEmpty, "none found")
        },
        Case(name: "an account deletion empties the profile and removes sessions, devices and blocks at once; begun and finished once; found until then") { store in
            let run = UUID().uuidString.prefix(8).lowercased()
            let (me, friend) = (UserID.make(), UserID.make())
            try await store.createUser(StoredUser(user: User(id: me, handle: "del-\(run)", displayName: "Me", avatarURL: "https://a.example/me.png", createdAt: t0), passwordHash: "h"))
            try await store.createUser(StoredUser(user: User(id: friend, handle: "delf-\(run)", displayName: "F", createdAt: t0), passwordHash: "h"))
            let session = StoredSession(
                tokenId: UUID().uuidString.lowercased(), userId: me, createdAt: t0, lastUsedAt: t0, expiresAt: t0.addingTimeInterval(3600), userAgent: nil)
            try await store.openSession(session)
            _ = try await store.registerDevice(
                StoredDevice(device: Device(id: .make(), platform: .fcm, token: "fcm-del-\(run)", createdAt: t0), userId: me, tokenId: session.tokenId), keepingAtMost: 10)
            _ = try await store.block(Block(blocker: friend, blocked: me), at: t0)
            let unattached = StoredMedia(
                media: Media(id: .make(), contentType: "image/png", size: 5, sha256: String(repeating: "ef", count: 32), createdAt: t0.addingTimeInterval(1_000_000)),
                uploaderId: me)
            try await store.recordMedia(unattached)

            let begun = try await store.beginDeletion(of: me, erase: false, at: t0.addingTimeInterval(10))
            try check(begun == AccountDeletion(userId: me, requestedAt: t0.addingTimeInterval(10), erase: false), "begun: \(String(describing: begun))")
            let stored = try await store.user(id: me)
            try check(stored?.deletion == begun && stored?.user == User.deletedAccount(me, createdAt: t0, bot: false), "reads as deleted: \(String(describing: stored))")
            try check(try await store.user(handle: "del-\(run)") == nil, "cannot sign in")
            try check(try await store.searchUsers(prefix: "del-\(run)", limit: 10).isEmpty, "never found")
            try check(try await store.existingUsers([me, friend]) == [friend], "not a user one may add")
            try check(try await store.session(session.tokenId) == nil, "its session is gone")
            try check(try await store.devices(of: me).isEmpty, "its devices are gone")
            try check(try await store.blocks(involving: friend).isEmpty, "its blocks are gone")
            let removed = try await store.removeUnattachedMedia(uploadedBefore: t0, limit: 10_000)
            try check(removed.contains { $0.media.id == unattached.media.id }, "its unattached upload is due to the sweeper at once")
            try check(try await store.unfinishedDeletions(limit: 10_000).contains(begun!), "found unfinished")

            let again = try await store.beginDeletion(of: me, erase: true, at: t0.addingTimeInterval(20))
            try check(again == AccountDeletion(userId: me, requestedAt: t0.addingTimeInterval(10), erase: true), "the first time stays, erasure asked stays: \(String(describing: again))")
            try check(try await store.deletionsOwingWebhooks(limit: 10_000).allSatisfy { $0.userId != me }, "no webhook before it is finished")
            try await store.finishDeletion(of: me, at: t0.addingTimeInterval(30))
            try await store.finishDeletion(of: me, at: t0.addingTimeInterval(40))
            let finished = AccountDeletion(userId: me, requestedAt: t0.addingTimeInterval(10), erase: true, finishedAt: t0.addingTimeInterval(30))
            try check(try await store.user(id: me)?.deletion == finished, "finished once")
            try check(try await store.unfinishedDeletions(limit: 10_000).allSatisfy { $0.userId != me }, "not unfinished any more")
            try check(try await store.deletionsOwingWebhooks(limit: 10_000).contains(finished), "its webhook is owed")
            try await store.deletionWebhooksDone(me)
            try check(try await store.deletionsOwingWebhooks(limit: 10_000).allSatisfy { $0.userId != me }, "delivered")
            try check(try await store.beginDeletion(of: me, erase: true, at: t0.addingTimeInterval(50)) == finished, "asked again: as it was")
            try check(try await store.deletionsOwingWebhooks(limit: 10_000).allSatisfy { $0.userId != me }, "and owes nothing again")
            try check(try await store.beginDeletion(of: .make(), erase: false, at: t0) == nil, "an unknown user")
            try await store.finishDeletion(of: friend, at: t0)
            try check(try await store.user(id: friend)?.deletion == nil, "finishing what was never begun does nothing")
        },
        Case(name: "a deleted account's handle is taken until its quarantine ends, then free") { store in
            let run = UUID().uuidString.prefix(8).lowercased()
            let handle = "q-\(run)"
            let gone = UserID.make()
            try await store.createUser(StoredUser(user: User(id: gone, handle: handle, displayName: "Gone", createdAt: t0), passwordHash: "h"))
            _ = try await store.beginDeletion(of: gone, erase: false, at: t0.addingTimeInterval(100))
            let next = StoredUser(user: User(id: .make(), handle: handle, displayName: "Next", createdAt: t0.addingTimeInterval(200)), passwordHash: "h")
            do {
                try await store.createUser(next, reclaimingHandlesDeletedBefore: t0.addingTimeInterval(100))
                throw ContractViolation(description: "a quarantined handle was registered")
            } catch let error as ChatStoreError where error.kind == .conflict {}
            try await store.createUser(next, reclaimingHandlesDeletedBefore: t0.addingTimeInterval(101))
            try check(try await store.user(handle: handle)?.user.id == next.user.id, "the handle is the new user's")
            try check(try await store.user(id: gone)?.user == User.deletedAccount(gone, createdAt: t0, bot: false), "the deleted account still reads as deleted")
            let live = StoredUser(user: User(id: .make(), handle: handle, displayName: "Third", createdAt: t0), passwordHash: "h")
            do {
                try await store.createUser(live, reclaimingHandlesDeletedBefore: .distantFuture)
                throw ContractViolation(description: "a live user's handle was taken")
            } catch let error as ChatStoreError where error.kind == .conflict {}
        },
        Case(name: "a suspension is kept with the user and lifted") { store in
            let user = UserID.make()
            try await store.createUser(StoredUser(user: User(id: user, handle: "s-\(UUID().uuidString.prefix(8).lowercased())", displayName: "S", createdAt: t0), passwordHash: "h"))
            try check(try await store.setSuspended(user, since: t0.addingTimeInterval(5)), "suspended")
            try check(try await store.user(id: user)?.suspendedAt == t0.addingTimeInterval(5), "read back")
            try check(try await store.setSuspended(user, since: nil), "lifted")
            try check(try await store.user(id: user)?.suspendedAt == nil, "lifted, read back")
            try check(!(try await store.setSuspended(.make(), since: t0)), "an unknown user")
        },
        Case(name: "a password change revokes every other session of the user at once, with their devices, and only if the hash was the one read") { store in
            let run = UUID().uuidString.prefix(8).lowercased()
            let me = UserID.make()
            let other = UserID.make()
            try await store.createUser(StoredUser(user: User(id: me, handle: "pw-\(run)", displayName: "Me", createdAt: t0), passwordHash: "old"))
            try check(try await store.user(id: me)?.passwordChangedAt == nil, "never changed")
            func session(_ user: UserID, at offset: Double) -> StoredSession {
                StoredSession(
                    tokenId: UUID().uuidString.lowercased(), userId: user, createdAt: t0.addingTimeInterval(offset), lastUsedAt: t0.addingTimeInterval(offset),
                    expiresAt: t0.addingTimeInterval(offset + 3600), userAgent: nil)
            }
            let kept = session(me, at: 0)
            let phone = session(me, at: 1)
            let laptop = session(me, at: 2)
            let theirs = session(other, at: 3)
            for s in [kept, phone, laptop, theirs] { try await store.openSession(s) }
            let device = StoredDevice(
                device: Device(id: .make(), platform: .fcm, token: "fcm-\(run)", createdAt: t0), userId: me, tokenId: phone.tokenId)
            _ = try await store.registerDevice(device, keepingAtMost: 10)
            let keptDevice = StoredDevice(
                device: Device(id: .make(), platform: .fcm, token: "fcm-kept-\(run)", createdAt: t0), userId: me, tokenId: kept.tokenId)
            _ = try await store.registerDevice(keptDevice, keepingAtMost: 10)
            // Registered by a token no session names (issued before sessions were recorded).
            let unrecorded = StoredDevice(
                device: Device(id: .make(), platform: .apns, token: "apns-\(run)", createdAt: t0), userId: me, tokenId: "unrecorded-\(run)")
            _ = try await store.registerDevice(unrecorded, keepingAtMost: 10)
            let theirDevice = StoredDevice(
                device: Device(id: .make(), platform: .fcm, token: "fcm-theirs-\(run)", createdAt: t0), userId: other, tokenId: theirs.tokenId)
            _ = try await store.registerDevice(theirDevice, keepingAtMost: 10)

            let stale = try await store.changePassword(of: me, from: "not-the-hash", to: "new", keeping: kept.tokenId, at: t0.addingTimeInterval(10))
            try check(stale == nil, "a change from a hash that is not the user's went through")
            try check(try await store.user(id: me)?.passwordHash == "old", "the refused change left the hash")
            try check(try await store.changePassword(of: .make(), from: "old", to: "new", keeping: kept.tokenId, at: t0) == nil, "an unknown user")

            let revoked = try await store.changePassword(of: me, from: "old", to: "new", keeping: kept.tokenId, at: t0.addingTimeInterval(10))
            try check(revoked == [phone, laptop].sorted { $0.tokenId < $1.tokenId }, "revoked: \(String(describing: revoked?.map(\.tokenId)))")
            let stored = try await store.user(id: me)
            try check(stored?.passwordHash == "new" && stored?.passwordChangedAt == t0.addingTimeInterval(10), "changed: \(String(describing: stored))")
            try check(try await store.user(handle: "pw-\(run)")?.passwordChangedAt == t0.addingTimeInterval(10), "read by handle too")
            for token in [phone.tokenId, laptop.tokenId] {
                try check(try await store.isTokenRevoked(token), "another session's token is revoked")
                try check(try await store.session(token) == nil, "another session is gone")
            }
            try check(!(try await store.isTokenRevoked(kept.tokenId)), "the session that changed it is not revoked")
            try check(try await store.session(kept.tokenId) == kept, "the session that changed it stays")
            try check(try await store.session(theirs.tokenId) == theirs, "another user's session stays")
            let devices = try await store.devices(of: me).map(\.device.token)
            try check(devices == ["fcm-kept-\(run)"], "every other login's device went, the kept one's stayed: \(devices)")
            try check(try await store.devices(of: other).count == 1, "another user's device stayed")
            // The same change again (a retry after a lost answer) finds the hash moved on.
            try check(try await store.changePassword(of: me, from: "old", to: "new", keeping: kept.tokenId, at: t0.addingTimeInterval(11)) == nil, "changed twice")
        },
        Case(name: "a user's conversations page newest activity first") { store in
            let me = UserID.make()
            var ids: [ConversationID] = []
            for i in 0..<5 {
                let record = conversation(members: [me, .make()])
                try await store.createConversation(record)
                let epoch = try await store.acquireOwnership(of: record.id)
                // Activity: 0 → oldest … 4 → newest; 2 and 3 at the same instant (ties break by ID).
                _ = try await store.commit([append(record.id, epoch: epoch, "m", from: me, at: Int64([10, 20, 30, 30, 40][i]))])
                ids.append(record.id)
            }
            try await store.createConversation(conversation(members: [.make(), .make()]))  // not mine
            let tie = [ids[2], ids[3]].sorted(by: >)
            let expected = [ids[4]] + tie + [ids[1], ids[0]]
            let firstPage = try await store.conversations(of: me, after: nil, limit: 2)
            try check(firstPage.map(\.id) == Array(expected.prefix(2)), "first page \(firstPage.map(\.id)), expected \(expected)")
            let last = try require2(firstPage.last)
            let secondPage = try await store.conversations(of: me, after: ConversationPageCursor(lastActivityAt: last.lastActivityAt, id: last.id), limit: 10)
            try check(secondPage.map(\.id) == Array(expected.dropFirst(2)), "second page \(secondPage.map(\.id)), expected \(expected)")
            try check(secondPage.allSatisfy { $0.member(me) != nil && $0.members.count == 2 }, "records come with their members")
        },
        Case(name: "durable changes after an instant: conversation changes, moved receipts, removals") { store in
            let me: UserID = .make(), other: UserID = .make(), third: UserID = .make()
            let at = { (offset: Int64) in Date(millisecondsSince1970: t0.millisecondsSince1970 + offset) }
            let old = conversation(members: [me, other])
            try await store.createConversation(old)  // created at t0
            let (group, epoch) = try await owned(store, members: [me, other, third])
            _ = try await store.commit([append(group, epoch: epoch, "m1", from: third), append(group, epoch: epoch, "m2", from: third)])
            let (leftGroup, leftEpoch) = try await owned(store, members: [third, me, other])

            try check(try await store.durableChanges(for: me, since: at(-1)).conversations.count == 3, "three conversations created at t0")
            try check(try await store.durableChanges(for: me, since: at(0)) == DurableChanges(), "nothing after t0")

            try await store.updateConversation(group, name: "renamed", metadata: nil, epoch: epoch, at: at(10))
            _ = try await store.advanceReceipts(in: group, user: other, deliveredSeq: 2, readSeq: 1, at: at(20))
            _ = try await store.advanceReceipts(in: group, user: me, deliveredSeq: 1, readSeq: 0, at: at(30))
            _ = try await store.advanceReceipts(in: group, user: me, deliveredSeq: 1, readSeq: 0, at: at(35))  // moves nothing
            try await store.removeMember(me, from: leftGroup, epoch: leftEpoch, at: at(40))
            try await store.removeMember(me, from: leftGroup, epoch: leftEpoch, at: at(45))  // not a member any more

            let changes = try await store.durableChanges(for: me, since: at(5))
            try check(changes.conversations.map(\.conversation.id) == [group], "changed: \(changes.conversations)")
            try check(changes.conversations.first?.change == .updated && changes.conversations.first?.conversation.name == "renamed"
                && changes.conversations.first?.at == at(10), "the rename: \(changes.conversations)")
            let receipts = changes.receipts.map { "\($0.member.userId.rawValue == me.rawValue ? "me" : "other") \($0.member.deliveredSeq)/\($0.member.readSeq)" }
            try check(receipts == ["other 2/1", "me 1/0"], "receipts: \(receipts)")
            try check(changes.receipts.map(\.at) == [at(20), at(30)], "a receipt that moved nothing keeps its stamp: \(changes.receipts.map(\.at))")
            try check(changes.removals.map(\.conversation.id) == [leftGroup] && changes.removals.first?.at == at(40)
                && changes.removals.first?.conversation.member(me) == nil, "removal: \(changes.removals)")
            let later = try await store.durableChanges(for: me, since: at(30))
            try check(later.conversations.isEmpty && later.receipts.isEmpty && later.removals.count == 1, "after 30: \(later)")
            try check(try await store.durableChanges(for: third, since: at(30)).conversations.map(\.change) == [.memberRemoved],
                "the others see the removal as the conversation's last change")
        },
        Case(name: "a message's attachments are kept with it: appended, found again by a retry, read back, last; uploads referenced per conversation") { store in
            let (id, epoch) = try await owned(store)
            func attachment(_ type: String, caption: String?) -> Attachment {
                Attachment(
                    media: Media(id: .make(), contentType: type, size: 123_456, sha256: String(repeating: "c3", count: 32), width: type == "image/jpeg" ? 4032 : nil,
                                 height: type == "image/jpeg" ? 3024 : nil, createdAt: t0),
                    caption: caption)
            }
            let album = [attachment("image/jpeg", caption: "la tour 🗼, \"quoted\"\nnew line"), attachment("application/pdf", caption: nil)]
            var withFiles = append(id, epoch: epoch, "", at: 1)
            withFiles.attachments = album
            var again = withFiles
            again.attachments = nil  // a retry carries what it carries: the stored message answers
            var twiceInBatch = append(id, epoch: epoch, "caption only in the file", at: 2)
            twiceInBatch.attachments = [attachment("video/mp4", caption: nil)]
            let outcomes = try await store.commit([withFiles, again, twiceInBatch, twiceInBatch, append(id, epoch: epoch, "plain", at: 3)])
            guard case .appended(let first) = outcomes[0], case .duplicate(let retried) = outcomes[1],
                  case .appended(let second) = outcomes[2], case .duplicate(let inBatch) = outcomes[3], case .appended(let plain) = outcomes[4]
            else { throw ContractViolation(description: "outcomes: \(outcomes)") }
            try check(first.attachments == album && first.text.isEmpty, "appended with its files: \(String(describing: first.attachments))")
            try check(retried.attachments == album && retried.seq == first.seq, "a retry finds the original's files: \(String(describing: retried.attachments))")
            try check(second.attachments == twiceInBatch.attachments && inBatch.attachments == twiceInBatch.attachments, "twice in a batch: one message, its files")
            try check(plain.attachments == nil, "a message without files has none: \(String(describing: plain.attachments))")
            let read = try await store.messages(in: id, after: 0, limit: 10)
            try check(read.map(\.attachments) == [album, twiceInBatch.attachments, nil], "read back: \(read.map(\.attachments))")
            try check(try await store.messages(in: id, before: 3, limit: 10).map(\.attachments) == [album, twiceInBatch.attachments], "read back before")
            let stored = try await store.message(in: id, clientMessageId: withFiles.clientMessageId)
            try check(stored?.attachments == album, "found by clientMessageId")
            var last = append(id, epoch: epoch, "", at: 4)
            last.attachments = [attachment("audio/mp4", caption: nil)]
            _ = try await store.commit([last])
            try check(try await store.lastMessages(in: [id])[id]?.attachments == last.attachments, "the conversation's last message, with its file")

            let (other, _) = try await owned(store)
            let photo = album[0].media.id
            for attachment in album { try await store.recordMedia(StoredMedia(media: attachment.media, uploaderId: UserID.make())) }
            let neverUploaded = MediaID.make()
            let found = try await store.referenceMedia([photo, album[1].media.id, neverUploaded], in: id)
            try check(found == [photo, album[1].media.id], "an upload that is not there is not referenced: \(found)")
            try await store.referenceMedia([photo], in: other)
            try await store.referenceMedia([photo], in: other)
            try check(try await store.conversationsReferencing(neverUploaded) == [], "nothing recorded for the missing upload")
            try check(try await store.conversationsReferencing(photo) == [id, other].sorted(), "a photo in two conversations")
            try check(try await store.conversationsReferencing(album[1].media.id) == [id], "the document in one")
            try check(try await store.conversationsReferencing(.make()) == [], "an upload attached nowhere")
        },
        Case(name: "uploads never attached are removed once old, oldest first; an attached one stays; an attach after the removal finds nothing") { store in
            // Long before t0: whatever else a shared store holds from other cases is younger.
            let past = Date(millisecondsSince1970: 1_000_000_000_000 + Int64.random(in: 0..<1_000_000))
            let uploader = UserID.make()
            let sharedBytes = (0..<32).map { _ in String(format: "%02x", Int.random(in: 0...255)) }.joined()
            func upload(_ offset: Int64, sha256: String? = nil) -> StoredMedia {
                StoredMedia(
                    media: Media(id: .make(), contentType: "image/png", size: 1000 + offset,
                                 sha256: sha256 ?? (0..<32).map { _ in String(format: "%02x", Int.random(in: 0...255)) }.joined(),
                                 width: 10, height: 10, createdAt: Date(millisecondsSince1970: past.millisecondsSince1970 + offset)),
                    uploaderId: uploader)
            }
            let (conversation, _) = try await owned(store)
            let oldest = upload(0), attached = upload(1), second = upload(2, sha256: sharedBytes), young = upload(10_000, sha256: sharedBytes)
            for media in [young, second, attached, oldest] { try await store.recordMedia(media) }
            try await store.referenceMedia([attached.media.id], in: conversation)
            let cutoff = Date(millisecondsSince1970: past.millisecondsSince1970 + 5_000)
            var removed: [StoredMedia] = []
            while true {
                let batch = try await store.removeUnattachedMedia(uploadedBefore: cutoff, limit: 1)
                try check(batch.count <= 1, "a limit of 1 removes at most 1: \(batch.count)")
                guard let first = batch.first else { break }
                removed.append(first)
            }
            let mine = removed.filter { $0.uploaderId == uploader }
            try check(mine == [oldest, second], "the two old unattached uploads, oldest first: \(mine.map(\.media.id))")
            let (oldestNow, secondNow) = (try await store.media(oldest.media.id), try await store.media(second.media.id))
            try check(oldestNow == nil && secondNow == nil, "removed uploads are gone")
            try check(try await store.media(attached.media.id) == attached, "the attached one stays")
            try check(try await store.media(young.media.id) == young, "the young one stays")
            try check(try await store.hasMedia(withSHA256: sharedBytes), "the young upload still has the bytes the removed one shared")
            try check(!(try await store.hasMedia(withSHA256: oldest.media.sha256)), "nothing has the oldest upload's bytes any more")
            try check(try await store.referenceMedia([oldest.media.id], in: conversation).isEmpty, "attaching a removed upload finds nothing")
            try check(try await store.conversationsReferencing(oldest.media.id).isEmpty, "and references nothing")
            try check(try await store.mediaBytes(of: uploader) == attached.media.size + young.media.size, "the quota counts what stays")
            try check(try await store.removeUnattachedMedia(uploadedBefore: cutoff, limit: 0).isEmpty, "a limit of 0 removes nothing")
        },
        Case(name: "attaches racing the sweeper: each upload ends attached and kept, or removed and attached nowhere") { store in
            let past = Date(millisecondsSince1970: 1_000_000_000_000 + Int64.random(in: 0..<1_000_000))
            let uploader = UserID.make()
            let (conversation, _) = try await owned(store)
            var uploads: [MediaID] = []
            for offset in 0..<60 {
                let media = Media(id: .make(), contentType: "image/png", size: 100, sha256: String(repeating: "5a", count: 32),
                                  createdAt: Date(millisecondsSince1970: past.millisecondsSince1970 + Int64(offset)))
                try await store.recordMedia(StoredMedia(media: media, uploaderId: uploader))
                uploads.append(media.id)
            }
            let cutoff = Date(millisecondsSince1970: past.millisecondsSince1970 + 1_000)
            let (attached, removed) = try await withThrowingTaskGroup(of: (Set<MediaID>, Set<MediaID>).self) { group in
                for (index, id) in uploads.enumerated() {
                    group.addTask { (try await store.referenceMedia([id], in: conversation), []) }
                    // A sweep beside every fourth attach: the same shape on every run and node.
                    if index % 4 == 0 {
                        group.addTask { ([], Set(try await store.removeUnattachedMedia(uploadedBefore: cutoff, limit: 3).map(\.media.id))) }
                    }
                }
                var attached: Set<MediaID> = [], removed: Set<MediaID> = []
                for try await (found, gone) in group {
                    attached.formUnion(found)
                    removed.formUnion(gone)
                }
                return (attached, removed)
            }
            let rest = Set(try await store.removeUnattachedMedia(uploadedBefore: cutoff, limit: 1_000).map(\.media.id))
            for id in uploads {
                let kept = try await store.media(id) != nil
                let referencing = try await store.conversationsReferencing(id)
                if attached.contains(id) {
                    try check(kept && referencing == [conversation] && !removed.contains(id) && !rest.contains(id), "\(id) attached, then removed")
                } else {
                    try check(!kept && referencing.isEmpty && (removed.contains(id) || rest.contains(id)), "\(id) neither attached nor removed")
                }
            }
        },
        Case(name: "an upload's description is kept as given, once per ID") { store in
            let uploader = UserID.make()
            let photo = StoredMedia(
                media: Media(id: .make(), contentType: "image/jpeg", size: 1_234_567, sha256: String(repeating: "ab", count: 32),
                             width: 4032, height: 3024, createdAt: Date(millisecondsSince1970: t0.millisecondsSince1970 + 1)),
                uploaderId: uploader)
            let note = StoredMedia(
                media: Media(id: .make(), contentType: "audio/mp4", size: 5 << 30, sha256: String(repeating: "0f", count: 32), createdAt: t0),
                uploaderId: uploader)
            try await store.recordMedia(photo)
            try await store.recordMedia(note)
            let readPhoto = try await store.media(photo.media.id)
            try check(readPhoto == photo, "the photo: \(String(describing: readPhoto))")
            try check(try await store.media(note.media.id) == note, "the voice note, over 4 GiB, no size in pixels")
            try check(try await store.media(.make()) == nil, "an unknown ID")
            do {
                try await store.recordMedia(StoredMedia(media: photo.media, uploaderId: UserID.make()))
                try check(false, "a second upload under the same ID was kept")
            } catch let error as ChatStoreError {
                try check(error.kind == .conflict, "the same ID again: \(error)")
            }
            try check(try await store.media(photo.media.id)?.uploaderId == uploader, "the first stays")
            try check(try await store.mediaBytes(of: uploader) == 1_234_567 + 5 << 30, "the uploader's bytes together")
            try check(try await store.mediaBytes(of: UserID.make()) == 0, "someone who uploaded nothing")
        },
        Case(name: "a device token belongs to one user; registering it again keeps its ID; the oldest make room") { store in
            // Fresh users and tokens: a shared store (the PostgreSQL suite's) keeps earlier runs' devices.
            let (me, other) = (UserID.make(), UserID.make())
            let run = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
            func device(_ user: UserID, _ token: String, login: String = "login-1", platform: PushPlatform = .apns, at offset: Int64 = 0) -> StoredDevice {
                StoredDevice(
                    device: Device(id: .make(), platform: platform, token: token, topic: "app.parley.example", environment: platform == .apns ? .sandbox : nil,
                                   createdAt: Date(millisecondsSince1970: t0.millisecondsSince1970 + offset)),
                    userId: user, tokenId: login)
            }
            let phone = device(me, "aa\(run)")
            let first = try await store.registerDevice(phone, keepingAtMost: 3)
            try check(first.created && first.device == phone && first.takenFrom == nil, "registered: \(first)")
            let listed = try await store.devices(of: me)
            try check(listed == [phone], "listed: \(listed)")
            // The app registers again at its next launch, from a new login.
            let again = try await store.registerDevice(device(me, "aa\(run)", login: "login-2", at: 5_000), keepingAtMost: 3)
            try check(!again.created && again.device.device.id == phone.device.id && again.device.device.createdAt == phone.device.createdAt
                && again.device.tokenId == "login-2" && again.takenFrom == nil, "registered again: \(again)")
            try check(try await store.devices(of: me).map(\.tokenId) == ["login-2"], "one row per token")
            // The same string on the other platform is another device.
            let android = try await store.registerDevice(device(me, "aa\(run)", platform: .fcm, at: 10), keepingAtMost: 3)
            try check(android.created, "an FCM token equal to an APNs one is a device of its own")
            // Another user signs in on the phone: it leaves the first user.
            let taken = try await store.registerDevice(device(other, "aa\(run)", login: "login-3", at: 20), keepingAtMost: 3)
            try check(taken.created && taken.device.device.id != phone.device.id && taken.takenFrom == me, "taken over, from the first user: \(taken)")
            try check(try await store.devices(of: me).map(\.device.platform) == [.fcm], "the phone stayed with its first user")
            try check(try await store.devices(of: other).map(\.device.id) == [taken.device.device.id], "the phone did not move")
            // Past the limit the oldest go.
            for index in 0..<3 { _ = try await store.registerDevice(device(me, "b\(index)\(run)", at: 100 + Int64(index)), keepingAtMost: 3) }
            let kept = try await store.devices(of: me).map(\.device.token)
            try check(kept == ["b0\(run)", "b1\(run)", "b2\(run)"], "after the limit: \(kept)")
            // Removing: only one's own, and a login's logout removes what it registered.
            let mine = try await store.devices(of: me)
            try check(!(try await store.removeDevice(mine[0].device.id, of: other)), "removed another user's device")
            try check(try await store.removeDevice(mine[0].device.id, of: me), "could not remove my device")
            try check(!(try await store.removeDevice(mine[0].device.id, of: me)), "removed a device twice")
            _ = try await store.registerDevice(device(me, "c\(run)", login: "login-9", at: 200), keepingAtMost: 3)
            try await store.removeDevices(registeredWith: "login-1")
            let left = try await store.devices(of: me).map(\.device.token)
            try check(left == ["c\(run)"], "logout left: \(left)")
            try check(try await store.devices(of: other).count == 1, "another user's login was logged out")
        },
        Case(name: "pushes owed are found by the owner after a failover, from their first seq; a stale owner cannot say so") { store in
            let (first, firstEpoch) = try await owned(store)
            let (second, secondEpoch) = try await owned(store)
            try await store.setPushesOwed(from: 7, in: first, epoch: firstEpoch)
            try await store.setPushesOwed(from: 3, in: second, epoch: secondEpoch)
            try await store.setPushesOwed(from: 9, in: second, epoch: secondEpoch)
            let mine = Set([first, second])
            var owing = try await store.conversationsOwingPushes(limit: 10_000).filter { mine.contains($0.conversation) }
            try check(Dictionary(uniqueKeysWithValues: owing.map { ($0.conversation, $0.from) }) == [first: 7, second: 9], "owing: \(owing)")
            let newEpoch = try await store.acquireOwnership(of: second)
            do {
                try await store.setPushesOwed(from: nil, in: second, epoch: secondEpoch)
                try check(false, "a stale owner cleared what is owed")
            } catch let error as ChatStoreError {
                try check(error.kind == .staleEpoch, "a stale epoch threw \(error)")
            }
            try await store.setPushesOwed(from: nil, in: second, epoch: newEpoch)
            try await store.setPushesOwed(from: nil, in: first, epoch: firstEpoch)
            owing = try await store.conversationsOwingPushes(limit: 10_000).filter { mine.contains($0.conversation) }
            try check(owing.isEmpty, "after both owed nothing: \(owing)")
            try check(try await store.conversationsOwingPushes(limit: 0).isEmpty, "the limit")
        },
        Case(name: "webhook cursors: an endpoint is first seen once; cursors are kept per endpoint, fenced, and owing ones are found") { store in
            let name = "endpoint-\(UUID().uuidString)"
            let firstSeen = try await store.webhookEndpointFirstSeen(name, at: Date(millisecondsSince1970: 1_000_000))
            let again = try await store.webhookEndpointFirstSeen(name, at: Date(millisecondsSince1970: 2_000_000))
            try check(firstSeen == Date(millisecondsSince1970: 1_000_000) && again == firstSeen, "first seen: \(firstSeen), then \(again)")
            let (first, firstEpoch) = try await owned(store)
            let (second, secondEpoch) = try await owned(store)
            try check(try await store.webhookCursors(in: first).isEmpty, "cursors before any was stored")
            try await store.saveWebhookCursor(WebhookCursorRecord(endpoint: "b", state: "{\"seq\":1}", pending: true), in: first, epoch: firstEpoch)
            try await store.saveWebhookCursor(WebhookCursorRecord(endpoint: "a", state: "{\"seq\":2}", pending: false), in: first, epoch: firstEpoch)
            try await store.saveWebhookCursor(WebhookCursorRecord(endpoint: "b", state: "{\"seq\":3}", pending: true), in: first, epoch: firstEpoch)
            try await store.saveWebhookCursor(WebhookCursorRecord(endpoint: "a", state: "{}", pending: false), in: second, epoch: secondEpoch)
            let cursors = try await store.webhookCursors(in: first)
            try check(
                cursors == [WebhookCursorRecord(endpoint: "a", state: "{\"seq\":2}", pending: false), WebhookCursorRecord(endpoint: "b", state: "{\"seq\":3}", pending: true)],
                "cursors: \(cursors)")
            let mine = Set([first, second])
            var owing = try await store.conversationsOwingWebhooks(limit: 10_000).filter { mine.contains($0) }
            try check(owing == [first], "owing: \(owing)")
            let newEpoch = try await store.acquireOwnership(of: first)
            do {
                try await store.saveWebhookCursor(WebhookCursorRecord(endpoint: "b", state: "{}", pending: false), in: first, epoch: firstEpoch)
                try check(false, "a stale owner stored a cursor")
            } catch let error as ChatStoreError {
                try check(error.kind == .staleEpoch, "a stale epoch threw \(error)")
            }
            try await store.saveWebhookCursor(WebhookCursorRecord(endpoint: "b", state: "{\"seq\":4}", pending: false), in: first, epoch: newEpoch)
            owing = try await store.conversationsOwingWebhooks(limit: 10_000).filter { mine.contains($0) }
            try check(owing.isEmpty, "after every endpoint was told everything: \(owing)")
            try check(try await store.conversationsOwingWebhooks(limit: 0).isEmpty, "the limit")
        },
        Case(name: "conversations whose members, name or receipts changed lately are found") { store in
            let (me, other, third) = (UserID.make(), UserID.make(), UserID.make())
            let (renamed, renamedEpoch) = try await owned(store, members: [me, other])
            let (read, readEpoch) = try await owned(store, members: [me, other])
            let (quiet, _) = try await owned(store, members: [me, other])
            let (added, addedEpoch) = try await owned(store, members: [me, other])
            let later = Date().addingTimeInterval(3600)
            try await store.updateConversation(renamed, name: "renamed", metadata: nil, epoch: renamedEpoch, at: later.addingTimeInterval(1))
            _ = try await store.commit([append(read, epoch: readEpoch, "1", from: other)])
            _ = try await store.advanceReceipts(in: read, user: me, deliveredSeq: 1, readSeq: 1, at: later.addingTimeInterval(1))
            try await store.addMembers([ConversationMember(userId: third, role: .member)], to: added, epoch: addedEpoch, at: later.addingTimeInterval(1))
            let mine = Set([renamed, read, quiet, added])
            let changed = Set(try await store.recentlyChangedConversations(since: later, limit: 10_000).filter { mine.contains($0) })
            try check(changed == [renamed, read, added], "changed: \(changed), quiet is \(quiet)")
            try check(try await store.recentlyChangedConversations(since: later.addingTimeInterval(2), limit: 10_000).filter { mine.contains($0) }.isEmpty, "since later still")
        },
        Case(name: "a user's unread count is what they have not read in all their conversations, and in how many") { store in
            let (me, other) = (UserID.make(), UserID.make())
            try check(try await store.unread(of: me) == UnreadCount(messages: 0, conversations: 0), "a user without conversations")
            let (first, firstEpoch) = try await owned(store, members: [me, other])
            let (second, secondEpoch) = try await owned(store, members: [other, me])
            _ = try await store.commit([append(first, epoch: firstEpoch, "1", from: other), append(first, epoch: firstEpoch, "2", from: other)])
            _ = try await store.commit([append(second, epoch: secondEpoch, "3", from: other), append(second, epoch: secondEpoch, "4", from: me)])
            let before = try await store.unread(of: me)
            // A sender has read up to their own message.
            try check(before == UnreadCount(messages: 2, conversations: 1), "before reading: \(before)")
            _ = try await store.advanceReceipts(in: first, user: me, deliveredSeq: 2, readSeq: 1, at: t0)
            _ = try await store.advanceReceipts(in: second, user: me, deliveredSeq: 2, readSeq: 2, at: t0)
            let after = try await store.unread(of: me), others = try await store.unread(of: other)
            try check(after == UnreadCount(messages: 1, conversations: 1), "after reading: \(after)")
            try check(others == UnreadCount(messages: 1, conversations: 1), "the other member's count: \(others)")
            // A tombstone past the read seq is not unread; one before it changes nothing.
            _ = try await store.commitChange(
                MessageChange(conversationId: first, changeSeq: 1, afterSeq: 2, seq: 2, kind: .deleted, userId: other, at: t0), epoch: firstEpoch)
            try check(try await store.unread(of: me) == UnreadCount(messages: 0, conversations: 0), "a deleted message is not unread")
            _ = try await store.eraseMessages(in: first, seqs: [1], epoch: firstEpoch, at: t0)
            let (mine, theirs) = (try await store.unread(of: me).messages, try await store.unread(of: other).messages)
            try check(mine == 0 && theirs == 1, "an erasure before the read seq changes nothing: \(mine), \(theirs)")
            _ = try await store.commit([append(first, epoch: firstEpoch, "5", from: other)])
            // What a push to a user reads: nothing more without a device; with one, the same count.
            try check(try await store.pushRecipient(me, sender: other) == PushRecipient(devices: [], unread: 0, senderName: nil), "without devices")
            try await store.createUser(StoredUser(user: User(id: other, handle: "o\(other.rawValue.suffix(8).lowercased())", displayName: "Olive", createdAt: t0), passwordHash: "!"))
            let phone = StoredDevice(
                device: Device(id: .make(), platform: .apns, token: "ee\(me.rawValue.lowercased())", topic: nil, environment: .production, createdAt: t0),
                userId: me, tokenId: "login-1")
            _ = try await store.registerDevice(phone, keepingAtMost: 3)
            let recipient = try await store.pushRecipient(me, sender: other)
            try check(recipient == PushRecipient(devices: [phone], unread: 1, senderName: "Olive"), "a push's reads: \(recipient)")
            try check(try await store.unread(of: me) == UnreadCount(messages: recipient.unread, conversations: 1), "the badge is the unread count")
            try check(try await store.pushRecipient(me, sender: nil).senderName == nil, "no sender asked for")
            try check(try await store.pushRecipient(me, sender: .make()).senderName == nil, "an unknown sender")
        },
        Case(name: "a conversation's recent changes: each member removed, and its last other change; erasures make it recently changed") { store in
            let (me, other, third) = (UserID.make(), UserID.make(), UserID.make())
            let (id, epoch) = try await owned(store, members: [me, other, third])
            try await store.removeMember(third, from: id, epoch: epoch, at: t0.addingTimeInterval(10))
            try await store.updateConversation(id, name: "renamed", metadata: nil, epoch: epoch, at: t0.addingTimeInterval(11))
            try await store.removeMember(other, from: id, epoch: epoch, at: t0.addingTimeInterval(12))
            let changes = try await store.recentChanges(in: id, since: t0.addingTimeInterval(5))
            try check(changes == [
                RecentChange(change: .memberRemoved, at: t0.addingTimeInterval(10), removed: third),
                RecentChange(change: .memberRemoved, at: t0.addingTimeInterval(12), removed: other),
            ], "each removal; the last change is one of them: \(changes)")
            try await store.updateConversation(id, name: "again", metadata: nil, epoch: epoch, at: t0.addingTimeInterval(13))
            let later = try await store.recentChanges(in: id, since: t0.addingTimeInterval(11))
            try check(later == [
                RecentChange(change: .memberRemoved, at: t0.addingTimeInterval(12), removed: other), RecentChange(change: .updated, at: t0.addingTimeInterval(13)),
            ], "after an instant, oldest first: \(later)")
            try check(try await store.recentChanges(in: id, since: t0.addingTimeInterval(13)).isEmpty, "none after")
            try check(try await store.recentChanges(in: .make(), since: t0).isEmpty, "an unknown conversation")
            let far = Date(millisecondsSince1970: 4_000_000_000_000 + Int64.random(in: 0..<1_000_000))
            let (erasedIn, erasedEpoch) = try await owned(store)
            _ = try await store.commit([append(erasedIn, epoch: erasedEpoch, "soon gone")])
            _ = try await store.eraseMessages(in: erasedIn, seqs: [1], epoch: erasedEpoch, at: far)
            try check(try await store.recentlyChangedConversations(since: far.addingTimeInterval(-1), limit: 10_000).contains(erasedIn),
                      "a conversation with an erasure since is recently changed")
        },
        Case(name: "a member mutes a conversation for themself only, fenced by the epoch; leaving drops the setting") { store in
            let (me, other, third) = (UserID.make(), UserID.make(), UserID.make())
            let (group, epoch) = try await owned(store, members: [me, other, third])
            let before = try await store.durableChanges(for: other, since: t0)
            try check(try await store.setMuted(true, for: me, in: group, epoch: epoch), "a member could not mute")
            try check(try await store.setMuted(true, for: third, in: group, epoch: epoch), "a second member could not mute")
            try check(try await store.setMuted(true, for: me, in: group, epoch: epoch), "muting twice must succeed")
            try check(!(try await store.setMuted(true, for: .make(), in: group, epoch: epoch)), "a stranger muted the conversation")
            var read = try await store.conversation(group)
            try check(read?.mutedBy == [me, third].sorted(), "muted by \(String(describing: read?.mutedBy))")
            try check(try await store.conversations(of: other, after: nil, limit: 10).first?.mutedBy == [me, third].sorted(), "the list's record differs")
            try check(try await store.durableChanges(for: other, since: t0) == before, "muting is not a change the others hear of")
            try check(try await store.setMuted(false, for: third, in: group, epoch: epoch), "could not unmute")
            try await store.removeMember(me, from: group, epoch: epoch, at: Date(millisecondsSince1970: t0.millisecondsSince1970 + 10))
            read = try await store.conversation(group)
            try check(read?.mutedBy == [], "after unmuting and leaving: \(String(describing: read?.mutedBy))")
            do {
                _ = try await store.setMuted(true, for: other, in: group, epoch: epoch - 1)
                try check(false, "a stale epoch must not mute")
            } catch let error as ChatStoreError {
                try check(error.kind == .staleEpoch, "a stale epoch threw \(error)")
            }
        },
    ]
}

/// Unwraps or fails the contract.
func require2<T>(_ value: T?, line: Int = #line) throws -> T {
    guard let value else { throw ContractViolation(description: "ChatStoreContract.swift:\(line): unexpected nil") }
    return value
}
