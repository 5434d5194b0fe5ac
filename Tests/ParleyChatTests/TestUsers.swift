import Foundation
import ParleyModel
import ParleyChat
import ParleyCluster
import ParleyStore
import ParleyTestKit

/// Conversations accept only registered users as members: tests register the IDs they use.
func registerUsers(_ ids: [UserID], in store: any ChatStore) async throws {
    for id in ids {
        let user = User(id: id, handle: "h\(id.rawValue.lowercased().filter { $0.isLetter || $0.isNumber })", displayName: id.rawValue, createdAt: Date())
        try await store.createUser(StoredUser(user: user, passwordHash: "not-a-hash"))
    }
}

/// An in-process cluster for chat: conversations and presence shards on the workers (over one
/// in-memory store, `store`, holding `users`; users' actors too when it sends `pushes`), nothing
/// on the gateways (tests open their inboxes). Stop it with `stopAll()`.
func startChatCluster(
    users: [UserID], workers: [String], gateways: [String], store: InMemoryChatStore = InMemoryChatStore(), pushes: PushSettings? = nil
) async throws -> LoopbackCluster {
    try await registerUsers(users, in: store)
    let services = ChatServices(store: store, pushes: pushes, clock: ContinuousClock())
    let cluster = try LoopbackCluster { system, _ in
        guard system.settings.roles.contains(.worker) else { return }
        ConversationActor.register(on: system, services: services)
        PresenceShard.register(on: system)
        if pushes != nil { UserActor.register(on: system, services: services) }
    }
    for worker in workers { try await cluster.start(worker) }
    for gateway in gateways { try await cluster.start(gateway, roles: .gateway) }
    try await cluster.waitForUp(Set(workers + gateways))
    return cluster
}
