import Distributed
import Foundation
import ParleyCluster
import ParleyModel
import ParleyStore

/// Finding users by handle: logins (the handle's password hash) and prefix search. Virtual and
/// stateless: keyed by the handle for a login, so lookups spread over the workers.
public distributed actor AccountDirectory {
    public typealias ActorSystem = ClusterSystem

    public static let kind = "accounts"

    /// What a login needs: the user and its password hash (never leaves the cluster).
    public struct Login: Codable, Sendable, Hashable {
        public var user: User
        public var passwordHash: String
    }

    private let services: ChatServices

    public static func resolve(handle: String, using system: ClusterSystem) throws -> AccountDirectory {
        try resolve(id: ClusterActorID(kind: kind, key: handle.isEmpty ? "_" : handle), using: system)
    }

    public static func register(on system: ClusterSystem, services: ChatServices) {
        system.register(kind: kind) { _, system in AccountDirectory(services: services, actorSystem: system) }
    }

    init(services: ChatServices, actorSystem: ClusterSystem) {
        self.actorSystem = actorSystem
        self.services = services
    }

    /// The user with this handle and its password hash, or nil.
    public distributed func login(handle: String) async throws -> Login? {
        let stored = try await services.withStore { try await $0.user(handle: handle) }
        return stored.map { Login(user: $0.user, passwordHash: $0.passwordHash) }
    }

    /// The users with these IDs (1–100), in the order asked; IDs that name nobody left out.
    public distributed func users(_ ids: [UserID]) async throws -> [User] {
        guard (1...100).contains(ids.count) else { throw ChatError(.invalidRequest, "ids: 1–100 user IDs, not \(ids.count)") }
        return try await services.withStore { try await $0.users(ids) }
    }

    /// Users whose handle starts with `prefix`, by handle, then those whose display name (or a
    /// later word of it) starts with it, case and accents aside (``ChatStore/searchUsers(prefix:limit:)``).
    public distributed func search(prefix: String, limit: Int) async throws -> [User] {
        guard (1...100).contains(limit) else { throw ChatError(.invalidRequest, "limit must be 1–100") }
        guard prefix.count <= 64 else { throw ChatError(.invalidRequest, "prefix must be at most 64 characters") }
        return try await services.withStore { try await $0.searchUsers(prefix: prefix, limit: limit) }
    }

}
