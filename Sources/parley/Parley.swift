import ArgumentParser
import Foundation
import ParleyClient
import ParleyModel

/// `parley`: Parley from a terminal. It keeps the server and the token in a config file, prints
/// readable output, and `--json` for scripts.
@main
struct Parley: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley",
        abstract: "Chat through a Parley cluster from a terminal.",
        discussion: """
            Start with `parley register HANDLE --server https://localhost:8443 --ca PATH/ca.pem` \
            (or `login`); the server, CA and token are then kept in the config file \
            (~/.config/parley/config.json, or PARLEY_CONFIG). PARLEY_URL / PARLEY_URLS and PARLEY_CA \
            (as `Scripts/cluster env` prints them) are used when no --server / --ca is given.
            """,
        subcommands: [Register.self, Login.self, Logout.self, Sessions.self, Password.self, Export.self, DeleteAccount.self, Block.self, Unblock.self, Blocked.self, ReportCommand.self, Admin.self, Users.self, Unread.self, Avatar.self, Conversations.self, GroupPhoto.self, New.self, Send.self, Edit.self, DeleteMessage.self, React.self, Pin.self, Versions.self, Replies.self, Mentions.self, Search.self, History.self, Tail.self, Read.self, Devices.self])
}

/// Options every command takes.
struct Connection: ParsableArguments {
    @Option(help: "Gateway URL(s), comma-separated (env PARLEY_URLS or PARLEY_URL; else the config file).")
    var server: String?

    @Option(help: "PEM file of the CA that signed the gateways' certificates (env PARLEY_CA; else the config file).")
    var ca: String?

    @Flag(help: "Print JSON (one object per line for tail) instead of text.")
    var json = false

    /// The client, from flags, then environment, then the config file.
    /// - Parameter token: used instead of the kept one (the admin token).
    func client(requireToken: Bool = true, token: String? = nil) throws -> (ParleyClient, StoredConfig) {
        let environment = ProcessInfo.processInfo.environment
        var stored = StoredConfig.load()
        if let servers = server ?? environment["PARLEY_URLS"] ?? environment["PARLEY_URL"] {
            stored.servers = servers.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) }
        }
        if let ca = ca ?? environment["PARLEY_CA"] { stored.ca = ca }
        guard !stored.servers.isEmpty else {
            throw ValidationError("no server: give --server https://HOST:PORT (or set PARLEY_URL), once; it is remembered")
        }
        var urls: [URL] = []
        for text in stored.servers {
            guard let url = URL(string: text), url.scheme == "https" || url.scheme == "http", url.host != nil else {
                throw ValidationError("'\(text)' is not a gateway URL like https://localhost:8443")
            }
            urls.append(url)
        }
        if requireToken, stored.token == nil { throw ValidationError("not signed in: run `parley login HANDLE` first") }
        var configuration = ParleyClient.Configuration(gateways: urls, caCertificatePath: stored.ca)
        configuration.userAgent = "parley-cli"
        let client = try ParleyClient(configuration: configuration, token: token ?? stored.token)
        return (client, stored)
    }

    func print(_ value: some Encodable, text: () -> String) {
        if json {
            let encoder = API.makeEncoder()
            Swift.print(String(decoding: (try? encoder.encode(value)) ?? Data("{}".utf8), as: UTF8.self))
        } else {
            Swift.print(text())
        }
    }
}

/// What `parley` remembers between runs.
struct StoredConfig: Codable {
    var servers: [String] = []
    var ca: String?
    var token: String?
    var userId: String?
    var handle: String?

    static var path: URL {
        if let path = ProcessInfo.processInfo.environment["PARLEY_CONFIG"] { return URL(fileURLWithPath: path) }
        let home = ProcessInfo.processInfo.environment["HOME"] ?? FileManager.default.currentDirectoryPath
        return URL(fileURLWithPath: home).appendingPathComponent(".config/parley/config.json")
    }

    static func load() -> StoredConfig {
        guard let data = try? Data(contentsOf: path) else { return StoredConfig() }
        return (try? JSONDecoder().decode(StoredConfig.self, from: data)) ?? StoredConfig()
    }

    /// Keeps the signed-in user and token.
    mutating func signedIn(_ user: User, token: String?) throws {
        self.token = token
        userId = user.id.rawValue
        handle = user.handle
        try save()
    }

    func save() throws {
        try FileManager.default.createDirectory(at: Self.path.deletingLastPathComponent(), withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: Self.path, options: .atomic)
        // The token is a credential: only the owner may read it.
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: Self.path.path)
    }
}

/// Runs `body` with a client and shuts it down afterwards; API errors become one clear line.
func withClient<T>(
    _ connection: Connection, requireToken: Bool = true, token: String? = nil, _ body: (ParleyClient, inout StoredConfig) async throws -> T
) async throws -> T {
    let (client, stored) = try connection.client(requireToken: requireToken, token: token)
    var config = stored
    do {
        let result = try await body(client, &config)
        try? await client.shutdown()
        return result
    } catch let error as ParleyError {
        try? await client.shutdown()
        throw ValidationError(error.description)
    } catch {
        try? await client.shutdown()
        throw error
    }
}

func readPassword(_ given: String?, environment: String = "PARLEY_PASSWORD", prompt: String = "password: ") throws -> String {
    if let given { return given }
    if let fromEnvironment = ProcessInfo.processInfo.environment[environment] { return fromEnvironment }
    guard let typed = getpass(prompt).map({ String(cString: $0) }), !typed.isEmpty else {
        throw ValidationError("a password is required (an option, \(environment), or typed)")
    }
    return typed
}

struct Register: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Create an account and sign in.")
    @Argument(help: "3–32 characters of a-z 0-9 _ . -") var handle: String
    @Option(help: "The name others see (default: the handle).") var displayName: String?
    @Option(help: "8 characters to 72 bytes, no U+0000 (or PARLEY_PASSWORD, or typed at the prompt).") var password: String?
    @OptionGroup var connection: Connection

    func run() async throws {
        let secret = try readPassword(password)
        try await withClient(connection, requireToken: false) { client, config in
            let user = try await client.register(handle: handle, password: secret, displayName: displayName ?? handle)
            try config.signedIn(user, token: client.token)
            connection.print(user) { "registered and signed in as \(user.handle) (\(user.id))" }
        }
    }
}

struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Sign in; the token is kept in the config file.")
    @Argument var handle: String
    @Option(help: "(or PARLEY_PASSWORD, or typed at the prompt)") var password: String?
    @OptionGroup var connection: Connection

    func run() async throws {
        let secret = try readPassword(password)
        try await withClient(connection, requireToken: false) { client, config in
            let user = try await client.login(handle: handle, password: secret)
            try config.signedIn(user, token: client.token)
            connection.print(user) { "signed in as \(user.handle) (\(user.id))" }
        }
    }
}

struct Logout: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Revoke the kept token on every gateway and forget it.")
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, config in
            try await client.logout()
            config.token = nil
            try config.save()
            connection.print(["signedOut": true]) { "signed out" }
        }
    }
}

struct Sessions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Your sessions (each a login or registration): list them, revoke one.",
        discussion: "A revoked session's token stops working on every gateway at once, its devices are removed and its event streams end.",
        subcommands: [List.self, Revoke.self], defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Your sessions neither revoked nor expired, newest first (* is this one).")
        @OptionGroup var connection: Connection

        func run() async throws {
            try await withClient(connection) { client, _ in
                let sessions = try await client.sessions()
                connection.print(API.Sessions(sessions: sessions)) {
                    sessions.map { session in
                        let dates = "created \(session.createdAt.formatted(.iso8601))\tlast used \(session.lastUsedAt.formatted(.iso8601))"
                        return "\(session.current ? "*" : " ") \(session.id)\t\(dates)\t\(session.userAgent ?? "-")"
                    }.joined(separator: "\n")
                }
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke one of your sessions on every gateway.")
        @Argument(help: "The session's ID, from `parley sessions list`.") var id: String
        @OptionGroup var connection: Connection

        func run() async throws {
            try await withClient(connection) { client, _ in
                try await client.revokeSession(id)
                connection.print(["revoked": id]) { "revoked \(id)" }
            }
        }
    }
}

struct Export: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Download your data: profile, devices, blocks, conversations and every message you sent, as JSON.",
        discussion: "A few a day: the server allows 3, then one every 8 hours.")
    @Option(help: "Where to write it.") var output = "parley-export.json"
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let destination = URL(fileURLWithPath: output)
            try await client.exportData(to: destination)
            connection.print(["written": output]) { "written to \(output)" }
        }
    }
}

struct Password: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Change your password; every other session of yours is revoked.",
        discussion: "This terminal stays signed in. The passwords are read from --current / --new, else PARLEY_PASSWORD / PARLEY_NEW_PASSWORD, else typed at the prompt.")
    @Option(help: "The password now.") var current: String?
    @Option(help: "8 characters to 72 bytes, no U+0000.") var new: String?
    @OptionGroup var connection: Connection

    func run() async throws {
        let now = try readPassword(current)
        let next = try readPassword(new, environment: "PARLEY_NEW_PASSWORD", prompt: "new password: ")
        try await withClient(connection) { client, _ in
            try await client.changePassword(current: now, new: next)
            connection.print(["changed": true]) { "password changed; your other sessions are revoked" }
        }
    }
}

struct DeleteAccount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-account",
        abstract: "Delete your account: you leave every conversation and no token of yours works again. It cannot be undone.",
        discussion: """
            What you sent stays for the others, from a deleted account; with --erase each of your messages is erased too. \
            Your handle is free for others after the server's quarantine (30 days by default). `parley export` first if you want a copy. \
            The password is read from --password, else PARLEY_PASSWORD, else typed at the prompt.
            """)
    @Flag(help: "Erase every message you sent, for everyone.") var erase = false
    @Flag(help: "Yes, delete it: required, as nothing brings it back.") var yes = false
    @Option(help: "Your password.") var password: String?
    @OptionGroup var connection: Connection

    func run() async throws {
        guard yes else { throw ValidationError("deleting an account cannot be undone: add --yes to delete it") }
        let secret = try readPassword(password)
        try await withClient(connection) { client, config in
            try await client.deleteAccount(password: secret, erase: erase)
            config.token = nil
            try config.save()
            connection.print(["deleted": true, "erased": erase]) { erase ? "account deleted, and your messages erased" : "account deleted" }
        }
    }
}

struct Block: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Block a user: no direct messages either way, no pushes of their messages, neither sees the other's presence.",
        discussion: "Groups you share stay as they are. `parley unblock` undoes it.")
    @Argument(help: "The user's handle, or ID (u_…).") var user: String
    @OptionGroup var connection: Connection

    func run() async throws { try await Block.set(user, blocked: true, connection: connection) }

    /// Blocks or unblocks `user` (a handle or an ID), and says so.
    static func set(_ user: String, blocked: Bool, connection: Connection) async throws {
        try await withClient(connection) { client, _ in
            guard let id = try await resolveUsers([user], client: client).first else { return }
            if blocked { try await client.block(id) } else { try await client.unblock(id) }
            let done = blocked ? "blocked" : "unblocked"
            connection.print([done: id.rawValue]) { "\(done) \(user)" }
        }
    }
}

struct Unblock: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Unblock a user.")
    @Argument(help: "The user's handle, or ID (u_…).") var user: String
    @OptionGroup var connection: Connection

    func run() async throws { try await Block.set(user, blocked: false, connection: connection) }
}

struct Blocked: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "blocks", abstract: "The users you blocked, newest first.")
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let blocked = try await client.blocked()
            connection.print(API.Blocks(blocks: blocked)) {
                blocked.isEmpty ? "nobody blocked" : blocked.map { "\($0.userId)\tsince \($0.blockedAt.formatted(.iso8601))" }.joined(separator: "\n")
            }
        }
    }
}

struct ReportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report", abstract: "Report a user, or one of their messages, to the operator.",
        discussion: "A message is named by its conversation and seq: `parley report bob --conversation c_… --seq 12 --reason spam`.")
    @Argument(help: "The user's handle, or ID (u_…).") var user: String
    @Option(help: "spam, harassment, inappropriate or other.") var reason: String
    @Option(help: "The conversation the reported message is in (or where the user is).") var conversation: String?
    @Option(help: "The reported message's seq (needs --conversation).") var seq: Int64?
    @Option(help: "What the operator should know (at most 1,000 characters).") var note: String?
    @OptionGroup var connection: Connection

    func validate() throws {
        guard ReportReason(rawValue: reason) != nil else {
            throw ValidationError("the reason is one of \(ReportReason.allCases.map(\.rawValue).joined(separator: ", ")) (got '\(reason)')")
        }
        if seq != nil && conversation == nil { throw ValidationError("--seq needs --conversation") }
    }

    func run() async throws {
        try await withClient(connection) { client, _ in
            guard let id = try await resolveUsers([user], client: client).first else { return }
            let report = try await client.report(
                id, in: conversation.map { ConversationID(rawValue: $0) }, seq: seq, reason: ReportReason(rawValue: reason) ?? .other, note: note)
            connection.print(API.ReportBody(report: report)) { "reported (\(report.id))" }
        }
    }
}

struct Admin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Operators' commands, with the admin token: reports, suspensions, erasing a message.",
        discussion: "The admin token comes from --admin-token or PARLEY_ADMIN_TOKEN (it is never kept in the config file). Users are named by ID (u_…).",
        subcommands: [Reports.self, Resolve.self, Suspend.self, Unsuspend.self, Erase.self])

    struct Token: ParsableArguments {
        @Option(help: "The cluster's admin token (env PARLEY_ADMIN_TOKEN).") var adminToken: String?

        /// Runs `body` with a client that authenticates with the admin token.
        func withAdminClient<T>(_ connection: Connection, _ body: (ParleyClient) async throws -> T) async throws -> T {
            guard let token = adminToken ?? ProcessInfo.processInfo.environment["PARLEY_ADMIN_TOKEN"] else {
                throw ValidationError("the admin token is required: --admin-token or PARLEY_ADMIN_TOKEN")
            }
            return try await withClient(connection, requireToken: false, token: token) { client, _ in try await body(client) }
        }
    }

    struct Reports: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Reports, oldest first.")
        @Option(help: "open, resolved or any.") var status = "open"

        func validate() throws {
            guard status == "any" || ReportStatus(rawValue: status) != nil else { throw ValidationError("--status is open, resolved or any") }
        }
        @Option(help: "At most this many.") var limit = 100
        @Option(help: "Start after this report (a page's `next`).") var after: String?
        @OptionGroup var token: Token
        @OptionGroup var connection: Connection

        func run() async throws {
            try await token.withAdminClient(connection) { client in
                let page = try await client.reports(
                    status: ReportStatus(rawValue: status), after: after.map { ReportID(rawValue: $0) }, limit: limit)
                connection.print(page) {
                    page.reports.isEmpty ? "no reports" : page.reports.map { report in
                        let place = report.conversationId.map { " in \($0)\(report.seq.map { " #\($0)" } ?? "")" } ?? ""
                        let text = report.message.map { ": \"\($0.text.prefix(60))\"" } ?? ""
                        return "\(report.id)\t\(report.status.rawValue)\t\(report.reason.rawValue)\t\(report.userId)\(place)\(text)"
                    }.joined(separator: "\n")
                }
            }
        }
    }

    struct Resolve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Mark a report resolved.")
        @Argument(help: "The report's ID (r_…).") var id: String
        @Option(help: "What was done.") var resolution: String?
        @OptionGroup var token: Token
        @OptionGroup var connection: Connection

        func run() async throws {
            try await token.withAdminClient(connection) { client in
                let report = try await client.resolveReport(ReportID(rawValue: id), resolution: resolution)
                connection.print(API.ReportBody(report: report)) { "resolved \(report.id)" }
            }
        }
    }

    static func setSuspended(_ user: String, _ suspended: Bool, token: Token, connection: Connection) async throws {
        try await token.withAdminClient(connection) { client in
            try await client.setSuspended(UserID(rawValue: user), suspended)
            let done = suspended ? "suspended" : "unsuspended"
            connection.print([done: user]) { "\(done) \(user)" }
        }
    }

    struct Suspend: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Suspend a user: their tokens stop working and they cannot sign in; their data stays.")
        @Argument(help: "The user's ID (u_…).") var user: String
        @OptionGroup var token: Token
        @OptionGroup var connection: Connection

        func run() async throws { try await Admin.setSuspended(user, true, token: token, connection: connection) }
    }

    struct Erase: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Erase a message for everyone: it stays a tombstone (its seq, sender and time), and the files only it carried are removed.")
        @Argument(help: "The conversation's ID (c_… or d_…).") var conversation: String
        @Argument(help: "The message's seq.") var seq: Int64
        @OptionGroup var token: Token
        @OptionGroup var connection: Connection

        func run() async throws {
            try await token.withAdminClient(connection) { client in
                try await client.eraseMessage(seq, in: ConversationID(rawValue: conversation))
                connection.print(["erased": "\(conversation):\(seq)"]) { "erased \(conversation) #\(seq)" }
            }
        }
    }

    struct Unsuspend: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Lift a user's suspension.")
        @Argument(help: "The user's ID (u_…).") var user: String
        @OptionGroup var token: Token
        @OptionGroup var connection: Connection

        func run() async throws { try await Admin.setSuspended(user, false, token: token, connection: connection) }
    }
}

struct Users: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Find users by handle prefix, or look up users by ID (--ids).")
    @Argument var prefix: String = ""
    @Option(help: "User IDs to look up, comma-separated (up to 100), instead of a prefix.") var ids: String?
    @OptionGroup var connection: Connection

    func validate() throws {
        if ids != nil, !prefix.isEmpty { throw ValidationError("give a prefix or --ids, not both") }
    }

    func run() async throws {
        try await withClient(connection) { client, _ in
            let users = if let ids {
                try await client.users(ids.split(separator: ",").map { UserID(rawValue: String($0)) })
            } else {
                try await client.searchUsers(prefix: prefix, limit: 100)
            }
            connection.print(API.Users(users: users)) {
                users.isEmpty ? "no users" : users.map { "\($0.handle)\t\($0.displayName)\t\($0.id)" }.joined(separator: "\n")
            }
        }
    }
}

struct Unread: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "How many messages you have not read, and in how many conversations.")
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let unread = try await client.unread()
            connection.print(unread) { "\(unread.messages) unread in \(unread.conversations) conversation\(unread.conversations == 1 ? "" : "s")" }
        }
    }
}

struct Conversations: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Your conversations, newest activity first.")
    @Option var limit = 50
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, config in
            let page = try await client.conversations(limit: limit)
            connection.print(page) {
                page.conversations.isEmpty ? "no conversations" : page.conversations.map { conversation in
                    let title = conversation.name ?? conversation.members.map(\.userId.rawValue).filter { $0 != config.userId }.joined(separator: ", ")
                    let last = conversation.lastMessage.map { "  last: \($0.text.prefix(40))" } ?? ""
                    return "\(conversation.id)\t\(conversation.kind.rawValue)\t\(title)\tunread \(conversation.unreadCount)\(last)"
                }.joined(separator: "\n")
            }
        }
    }
}

struct Devices: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Your devices for push notifications: list them, add one, remove one.",
        discussion: "Apps register their own; these commands show what is registered and let you try it. A device belongs to the login that added it: `parley logout` removes it.",
        subcommands: [List.self, Add.self, Remove.self], defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Your devices, oldest first.")
        @OptionGroup var connection: Connection

        func run() async throws {
            try await withClient(connection) { client, _ in
                let devices = try await client.devices()
                connection.print(API.Devices(devices: devices)) {
                    devices.isEmpty ? "no devices" : devices.map { device in
                        "\(device.id)\t\(device.platform.rawValue)\(device.environment.map { " (\($0.rawValue))" } ?? "")\t\(device.topic ?? "-")\t\(device.token.prefix(16))…"
                    }.joined(separator: "\n")
                }
            }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Register a device token (the same token again keeps its device).")
        @Argument(help: "apns or fcm.") var platform: String
        @Argument(help: "The push service's token: APNs in hex, FCM as it was issued.") var token: String
        @Option(help: "APNs: the app's bundle ID.") var topic: String?
        @Flag(help: "APNs: a development build's token (the sandbox servers).") var sandbox = false
        @OptionGroup var connection: Connection

        func validate() throws {
            guard PushPlatform(rawValue: platform) != nil else { throw ValidationError("the platform is apns or fcm (got '\(platform)')") }
            if sandbox && platform != "apns" { throw ValidationError("--sandbox is for APNs tokens only") }
        }

        func run() async throws {
            try await withClient(connection) { client, _ in
                let device = try await client.registerDevice(
                    platform: PushPlatform(rawValue: platform) ?? .fcm, token: token, topic: topic, environment: sandbox ? .sandbox : nil)
                connection.print(API.DeviceBody(device: device)) { "\(device.id) (\(device.platform.rawValue))" }
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop pushes to one of your devices.")
        @Argument(help: "The device's ID (d_…), from `parley devices list`.") var id: String
        @OptionGroup var connection: Connection

        func run() async throws {
            try await withClient(connection) { client, _ in
                try await client.removeDevice(DeviceID(rawValue: id))
                connection.print(["removed": id]) { "removed \(id)" }
            }
        }
    }
}

/// Handles or user IDs → user IDs (a handle is looked up exactly).
func resolveUsers(_ names: [String], client: ParleyClient) async throws -> [UserID] {
    var ids: [UserID] = []
    for name in names {
        if name.hasPrefix("u_") {
            ids.append(UserID(rawValue: name))
        } else if let user = try await client.searchUsers(prefix: name, limit: 100).first(where: { $0.handle == name }) {
            ids.append(user.id)
        } else {
            throw ValidationError("no user with handle '\(name)'")
        }
    }
    return ids
}

struct New: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Start a conversation: one other user and no --name is a direct one.")
    @Argument(help: "Handles or user IDs of the other members.") var members: [String]
    @Option(help: "A group's name.") var name: String?
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let conversation = try await client.createConversation(with: try await resolveUsers(members, client: client), name: name)
            connection.print(conversation) { "\(conversation.id) (\(conversation.kind.rawValue), \(conversation.members.count) members)" }
        }
    }
}

struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Send a message; retried with the same clientMessageId until acknowledged.")
    @Argument var conversation: String
    @Argument(help: "The text (words are joined with spaces; none with --attach sends the files alone).") var text: [String] = []
    @Option(help: "The idempotency key (default: a new UUID).") var clientMessageId: String?
    @Option(name: .customLong("attach"), help: "A file to upload and attach (a photo, a video, a voice note, a PDF); repeat for more, up to 10. Its type is read from its first bytes.")
    var files: [String] = []
    @Option(help: "The seq of the message this one replies to (it is quoted).") var replyTo: Int64?
    @Option(name: .customLong("mention"), help: "A member's user ID to mention (notified even if they muted the conversation); repeat for more, up to 50.")
    var mentions: [String] = []
    @Option(help: "The app's own fields for the message, a JSON object of at most 4 KiB (e.g. '{\"duration\": 3.5}'); kept as they are.")
    var metadata: String?
    @Option(
        help: ArgumentHelp(
            "Write the message to the offline outbox in this folder (made if missing) before anything is sent, then send what waits there, in order, and return once nothing waits.",
            discussion: "Killed or offline, the message stays there: the next `parley send --outbox` with the same folder sends it (with the same clientMessageId, so it is stored once)."))
    var outbox: String?
    @OptionGroup var connection: Connection

    func validate() throws {
        if text.isEmpty && files.isEmpty { throw ValidationError("give a text, or --attach FILE, or both") }
        if let metadata, Metadata(json: metadata) == nil { throw ValidationError("--metadata must be a JSON object") }
        if mentions.count > 50 { throw ValidationError("at most 50 mentions, not \(mentions.count)") }
        if files.count > 10 { throw ValidationError("at most 10 files, not \(files.count)") }
    }

    func run() async throws {
        if let outbox { return try await sendThroughOutbox(URL(fileURLWithPath: outbox)) }
        try await withClient(connection) { client, _ in
            var attachments: [API.NewAttachment] = []
            for file in files {
                attachments.append(API.NewAttachment(mediaId: try await upload(file, with: client, connection: connection).id))
            }
            let message = try await client.send(
                text.joined(separator: " "), attachments: attachments.isEmpty ? nil : attachments, replyTo: replyTo,
                mentions: mentions.isEmpty ? nil : mentions.map(UserID.init(rawValue:)), metadata: metadata.flatMap(Metadata.init(json:)),
                to: ConversationID(rawValue: conversation),
                clientMessageId: clientMessageId ?? ClientMessageID.make())
            connection.print(API.SentMessage(message: message)) { "sent #\(message.seq) at \(API.timestamp(message.sentAt))" }
        }
    }
}

extension Send {
    /// The message goes to the outbox first; then the outbox is sent until nothing waits.
    func sendThroughOutbox(_ folder: URL) async throws {
        try await withClient(connection) { client, _ in
            let offline = OfflineClient(client: client, store: try ClientStore(directory: folder))
            let entry = try offline.send(
                text.joined(separator: " "), attachments: files.map { NewOutboxAttachment(file: URL(fileURLWithPath: $0)) }, replyTo: replyTo,
                mentions: mentions.isEmpty ? nil : mentions.map(UserID.init(rawValue:)), metadata: metadata.flatMap(Metadata.init(json:)),
                to: ConversationID(rawValue: conversation), clientMessageId: clientMessageId ?? ClientMessageID.make())
            connection.print(entry) { "queued \(entry.clientMessageId) in \(folder.path)" }
            fflush(nil)  // the line is out before the first send: a script may wait for it
            offline.start(streaming: false)
            var waiting = try offline.store.outbox().filter { $0.failure == nil }
            while !waiting.isEmpty {
                try await Task.sleep(for: .milliseconds(100))
                waiting = try offline.store.outbox().filter { $0.failure == nil }
            }
            await offline.close()
            let failed = try offline.store.outbox().filter { $0.failure != nil }
            for entry in failed {
                FileHandle.standardError.write(Data("not sent (\(entry.failure.map { "\($0.status) \($0.code): \($0.message)" } ?? "")): \(entry.clientMessageId)\n".utf8))
            }
            if let message = try offline.store.messages(in: entry.conversationId).first(where: { $0.clientMessageId == entry.clientMessageId }) {
                connection.print(API.SentMessage(message: message)) { "sent #\(message.seq) at \(API.timestamp(message.sentAt))" }
            }
            if !failed.isEmpty { throw ExitCode.failure }
        }
    }
}

/// Uploads a file, its type read from its first bytes.
func upload(_ file: String, with client: ParleyClient, connection: Connection) async throws -> Media {
    let url = URL(fileURLWithPath: file)
    let head = try FileHandle(forReadingFrom: url).read(upToCount: MediaSniffing.headLength) ?? Data()
    guard let type = MediaSniffing.contentType(of: Array(head)) else {
        throw ValidationError("\(file) is none of the types an upload may have (\(MediaSniffing.contentTypes.sorted().joined(separator: ", ")))")
    }
    let media = try await client.upload(file: url, contentType: type)
    if !connection.json { print("uploaded \(file): \(media.id) (\(type), \(media.size) bytes)") }
    return media
}

/// The image file a photo is set from, or `--remove`: one of the two.
struct PhotoSource: ParsableArguments {
    @Argument(help: "An image file (JPEG, PNG, GIF, WebP or HEIC); its location is removed when it is uploaded.") var file: String?
    @Flag(help: "Remove the photo instead.") var remove = false

    func validate() throws {
        if (file == nil) == !remove { throw ValidationError("give an image file, or --remove") }
    }

    /// The upload to set (uploaded now), or nil to remove.
    func media(with client: ParleyClient, connection: Connection) async throws -> MediaID? {
        guard let file else { return nil }
        let media = try await upload(file, with: client, connection: connection)
        guard media.isImage else { throw ValidationError("\(file) is \(media.contentType), not an image") }
        return media.id
    }
}

struct Avatar: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Set your profile photo from an image file, or remove it with --remove.",
        discussion: "Everyone signed in may see it, as a thumbnail (GET /v1/media/ID/thumbnail?size=160) or whole. It replaces an avatarURL; --remove removes either.")
    @OptionGroup var source: PhotoSource
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let user = try await client.setAvatar(try await source.media(with: client, connection: connection))
            connection.print(user) { user.avatar.map { "your profile photo is \($0.id)" } ?? "you have no profile photo" }
        }
    }
}

struct GroupPhoto: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "photo", abstract: "Set a group's photo from an image file (its owner only), or remove it with --remove.",
        discussion: "The group's members may see it; they hear of the change as of a rename.")
    @Argument(help: "The group's ID (c_…).") var conversation: String
    @OptionGroup var source: PhotoSource
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let record = try await client.setPhoto(try await source.media(with: client, connection: connection), of: ConversationID(rawValue: conversation))
            connection.print(record) { record.photo.map { "the group's photo is \($0.id)" } ?? "the group has no photo" }
        }
    }
}

struct Edit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Replace the text of a message you sent (within the server's edit window, 48 hours unless the operator set another).",
        discussion: "Retried with the same clientChangeId until acknowledged, so the edit is applied once. Its attachments stay.")
    @Argument(help: "The conversation's ID (c_… or d_…).") var conversation: String
    @Argument(help: "The message's seq.") var seq: Int64
    @Argument(help: "The new text (words are joined with spaces).") var text: [String]
    @Option(help: "The idempotency key (default: a new UUID).") var clientChangeId: String?
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let message = try await client.edit(
                seq, in: ConversationID(rawValue: conversation), text: text.joined(separator: " "), clientChangeId: clientChangeId ?? ClientMessageID.make())
            connection.print(API.SentMessage(message: message)) { "edited #\(message.seq)" }
        }
    }
}

struct DeleteMessage: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Delete a message for everyone: yours, or any in a group you own.",
        discussion: "It stays a tombstone (its seq, sender and time) that says who deleted it; its text, files and reactions are gone.")
    @Argument(help: "The conversation's ID (c_… or d_…).") var conversation: String
    @Argument(help: "The message's seq.") var seq: Int64
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let tombstone = try await client.deleteMessage(seq, in: ConversationID(rawValue: conversation))
            connection.print(API.SentMessage(message: tombstone)) { "deleted #\(tombstone.seq)" }
        }
    }
}

struct React: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Add your reaction to a message, or take it back with --remove.")
    @Argument(help: "The conversation's ID (c_… or d_…).") var conversation: String
    @Argument(help: "The message's seq.") var seq: Int64
    @Argument(help: "One emoji, e.g. 👍.") var emoji: String
    @Flag(help: "Take the reaction back.") var remove = false
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let reactions = try await client.react(emoji, to: seq, in: ConversationID(rawValue: conversation), adding: !remove)
            connection.print(API.Reactions(reactions: reactions)) { reactions.isEmpty ? "no reactions" : Tail.summary(reactions) }
        }
    }
}

struct Pin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Pin a message, or unpin it with --remove.",
        discussion: "A group's owner pins, and either member of a direct conversation; a conversation holds 50 pinned messages at most.")
    @Argument(help: "The conversation's ID (c_… or d_…).") var conversation: String
    @Argument(help: "The message's seq.") var seq: Int64
    @Flag(help: "Unpin it.") var remove = false
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let pinned = try await client.pin(seq, in: ConversationID(rawValue: conversation), pinning: !remove)
            connection.print(API.Pinned(pinned: pinned)) { pinned.isEmpty ? "nothing pinned" : "pinned: " + pinned.map { "#\($0)" }.joined(separator: " ") }
        }
    }
}

struct Replies: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The replies to a message, oldest first.")
    @Argument(help: "The conversation's ID (c_… or d_…).") var conversation: String
    @Argument(help: "The message's seq.") var seq: Int64
    @Option(help: "How many (1–200).") var limit = 50
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let replies = try await client.replies(to: seq, in: ConversationID(rawValue: conversation), limit: limit)
            connection.print(API.Messages(messages: replies)) { replies.isEmpty ? "no replies" : replies.map(Tail.line).joined(separator: "\n") }
        }
    }
}

struct Mentions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The messages that mention you, newest first, across your conversations.")
    @Option(help: "How many (1–100).") var limit = 20
    @Option(help: "The `next` a page before gave.") var before: String?
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let page = try await client.mentions(before: before, limit: limit)
            connection.print(page) {
                (page.mentions.isEmpty ? "no mentions" : page.mentions.map(Tail.line).joined(separator: "\n")) + (page.next.map { "\nmore: --before \($0)" } ?? "")
            }
        }
    }
}

struct Search: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Your messages that hold every word given, the best matches first.",
        discussion: "Words are found without case or accents, by their beginning (hel finds Hello); Chinese and Japanese by their characters side by side. The matched words are shown between « and ».")
    @Argument(help: "The words.") var words: [String]
    @Option(name: .customLong("in"), help: "Search this conversation only (c_… or d_…).") var conversation: String?
    @Option(help: "How many (1–50).") var limit = 20
    @Option(help: "The `next` a page before gave.") var cursor: String?
    @OptionGroup var connection: Connection

    func validate() throws {
        if words.isEmpty { throw ValidationError("give the words to search for") }
    }

    /// The snippet with its highlights between « and ».
    static func marked(_ snippet: API.Snippet) -> String {
        var scalars = Array(snippet.text.unicodeScalars)
        for pair in snippet.highlights.reversed() where pair.count == 2 && 0 <= pair[0] && pair[0] <= pair[1] && pair[1] <= scalars.count {
            scalars.insert("»", at: pair[1])
            scalars.insert("«", at: pair[0])
        }
        return String(String.UnicodeScalarView(scalars))
    }

    func run() async throws {
        try await withClient(connection) { client, _ in
            let page = try await client.search(words.joined(separator: " "), in: conversation.map(ConversationID.init(rawValue:)), limit: limit, cursor: cursor)
            connection.print(page) {
                let lines = page.results.map { "[\($0.message.conversationId)] #\($0.message.seq) \($0.message.senderId): \(Self.marked($0.snippet))" }
                return (lines.isEmpty ? "nothing found" : lines.joined(separator: "\n")) + (page.next.map { "\nmore: --cursor \($0)" } ?? "")
            }
        }
    }
}

struct Versions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The texts a message has had, oldest first, the current one last.")
    @Argument(help: "The conversation's ID (c_… or d_…).") var conversation: String
    @Argument(help: "The message's seq.") var seq: Int64
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let versions = try await client.versions(of: seq, in: ConversationID(rawValue: conversation))
            connection.print(API.MessageVersions(versions: versions)) {
                versions.isEmpty ? "none: the message was deleted" : versions.map { "[\(API.timestamp($0.at))] \($0.text)" }.joined(separator: "\n")
            }
        }
    }
}

struct History: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The last messages of a conversation.")
    @Argument var conversation: String
    @Option(help: "How many (1–200).") var limit = 20
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let id = ConversationID(rawValue: conversation)
            let lastSeq = try await client.conversation(id).lastSeq
            let messages = try await client.messages(in: id, before: lastSeq + 1, limit: limit)
            connection.print(API.Messages(messages: messages)) {
                messages.isEmpty ? "no messages" : messages.map(Tail.line).joined(separator: "\n")
            }
        }
    }
}

struct Read: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Mark a conversation read (up to SEQ, default its last message).")
    @Argument var conversation: String
    @Argument var seq: Int64?
    @OptionGroup var connection: Connection

    func run() async throws {
        try await withClient(connection) { client, _ in
            let id = ConversationID(rawValue: conversation)
            let upTo: Int64
            if let seq { upTo = seq } else { upTo = try await client.conversation(id).lastSeq }
            try await client.markRead(upTo, in: id)
            connection.print(API.Receipts(readSeq: upTo)) { "read up to #\(upTo)" }
        }
    }
}

struct Tail: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Follow your events live (reconnects across gateways and resumes by cursor).",
        discussion: "Runs until interrupted, or until --count events have come or --for has passed.")
    @Option(help: "Resume after this cursor.") var cursor: String?
    @Option(help: "Stop after this many message events.") var count: Int?
    @Option(name: [.customLong("for"), .customLong("seconds")], help: "Stop after this long, e.g. 30s or 2m (a plain number is seconds).") var stopAfter: String?
    @OptionGroup var connection: Connection

    static func line(_ message: Message) -> String {
        let head = "[\(message.conversationId) #\(message.seq) \(API.timestamp(message.sentAt))] \(message.senderId): "
        if message.isTombstone { return head + (message.deletedBy.map { "(deleted by \($0))" } ?? "(erased)") }
        let quote = message.replyTo.map { quote in
            "(↪ #\(quote.seq) \(quote.senderId): \(quote.deleted == true ? "deleted" : quote.text.isEmpty && quote.attachments ? "attachment" : quote.text)) "
        } ?? ""
        let mentions = message.mentions.map { "  @" + $0.map(\.rawValue).joined(separator: " @") } ?? ""
        return head + quote + message.text + (message.editedAt == nil ? "" : " (edited)") + mentions + (message.reactions.map { "  " + summary($0) } ?? "")
    }

    /// `👍 2  ❤️ 1*`: each emoji and how many hold it, `*` where you are one of them.
    static func summary(_ reactions: [Reaction]) -> String {
        reactions.map { "\($0.emoji) \($0.count)\($0.me ? "*" : "")" }.joined(separator: "  ")
    }

    func run() async throws {
        let (client, _) = try connection.client()
        let deadline = try stopAfter.map { text in
            guard let duration = DurationText.parse(text) else { throw ValidationError(DurationText.problem(text, source: "--for")) }
            return ContinuousClock.now.advanced(by: duration)
        }
        let consumer = Task {
            var messages = 0
            for try await event in client.events(cursor: cursor) {
                emit(event)
                if case .message = event { messages += 1 }
                if let count, messages >= count { return }
            }
        }
        if let deadline {
            let timer = Task {
                try await Task.sleep(until: deadline)
                consumer.cancel()
            }
            _ = await consumer.result
            timer.cancel()
        } else {
            _ = await consumer.result
        }
        try? await client.shutdown()
        if case .failure(let error) = await consumer.result, !(error is CancellationError) {
            throw ValidationError("\(error)")
        }
    }

    private func emit(_ event: ParleyEvent) {
        switch event {
        case .message(let message):
            connection.print(["event": "message", "conversationId": message.conversationId.rawValue, "seq": "\(message.seq)",
                              "senderId": message.senderId.rawValue, "text": message.text, "clientMessageId": message.clientMessageId]) { Self.line(message) }
        case .receipt(let receipt):
            connection.print(["event": "receipt", "conversationId": receipt.conversationId.rawValue, "userId": receipt.userId.rawValue,
                              "readSeq": "\(receipt.readSeq)", "deliveredSeq": "\(receipt.deliveredSeq)"]) {
                "[\(receipt.conversationId)] \(receipt.userId) read #\(receipt.readSeq), delivered #\(receipt.deliveredSeq)"
            }
        case .conversation(let change):
            connection.print(["event": "conversation", "conversationId": change.conversation.id.rawValue, "change": change.change.rawValue]) {
                "[\(change.conversation.id)] \(change.change.rawValue)"
            }
        case .typing(let typing):
            connection.print(["event": "typing", "conversationId": typing.conversationId.rawValue, "userId": typing.userId.rawValue, "typing": "\(typing.typing)"]) {
                "[\(typing.conversationId)] \(typing.userId) \(typing.typing ? "is typing…" : "stopped typing")"
            }
        case .user(let user):
            connection.print(["event": "user", "userId": user.id.rawValue, "displayName": user.displayName, "avatar": user.avatar?.id.rawValue ?? ""]) {
                "\(user.id) is now \(user.displayName)" + (user.avatar.map { " (photo \($0.id))" } ?? "")
            }
        case .presence(let presence):
            connection.print(["event": "presence", "userId": presence.userId.rawValue, "status": presence.status.rawValue]) {
                "\(presence.userId) is \(presence.status.rawValue)" + (presence.lastSeenAt.map { " (last seen \(API.timestamp($0)))" } ?? "")
            }
        case .annotation(let annotation):
            connection.print(["event": "message_annotated", "conversationId": annotation.conversationId.rawValue, "seq": "\(annotation.seq)",
                              "key": annotation.key, "value": annotation.value, "authorId": annotation.authorId.rawValue]) {
                "[\(annotation.conversationId)] #\(annotation.seq) \(annotation.key): \(annotation.value)"
            }
        case .erased(let tombstone):
            connection.print(["event": "message_erased", "conversationId": tombstone.conversationId.rawValue, "seq": "\(tombstone.seq)",
                              "senderId": tombstone.senderId.rawValue]) { "[\(tombstone.conversationId)] #\(tombstone.seq) from \(tombstone.senderId) was erased" }
        case .changed(let change):
            var fields = ["event": change.kind.eventName, "conversationId": change.conversationId.rawValue, "seq": "\(change.seq)",
                          "changeSeq": "\(change.changeSeq)", "userId": change.userId.rawValue]
            fields["text"] = change.text
            fields["emoji"] = change.emoji
            fields["count"] = change.count.map { "\($0)" }
            connection.print(fields) {
                let what = switch change.kind {
                case .edited: "edited it: \(change.text ?? "")"
                case .deleted: "deleted it"
                case .reactionAdded: "reacted \(change.emoji ?? "") (\(change.count ?? 0))"
                case .reactionRemoved: "took back \(change.emoji ?? "") (\(change.count ?? 0))"
                case .pinned: "pinned it"
                case .unpinned: "unpinned it"
                }
                return "[\(change.conversationId)] #\(change.seq) \(change.userId) \(what)"
            }
        case .ready(let cursor):
            connection.print(["event": "ready", "cursor": cursor]) { "— live (cursor \(cursor)) —" }
        case .cursorExpired:
            connection.print(["event": "cursor_expired"]) { "— the cursor was too old; reload with `parley conversations` and `history` —" }
        }
        fflush(nil)  // every stream: the lines go out as events come
    }
}
