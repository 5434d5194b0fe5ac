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

/// What a call refused, as `code: message`; nil when it did not throw.
func refusal(_ body: () async throws -> Void) async -> String? {
    do {
        try await body()
        return nil
    } catch let error as ClusterCallError {
        return "\(error.code.rawValue): \(error.message)"
    } catch {
        return "\(error)"
    }
}

/// Two workers, node-a and node-b, with every chat actor and the safety desk over `store`
/// (holding `users`), delivering webhooks of `types` to `endpoint`, retried within 200 ms.
func startSafetyCluster(
    users: [UserID], store: InMemoryChatStore, endpoint: RecordingWebhookEndpoint, types: Set<WebhookEventType>
) async throws -> LoopbackCluster {
    try await registerUsers(users, in: store)
    var fastRetries = WebhookPolicy()
    fastRetries.retry = Backoff(first: .milliseconds(50), max: .milliseconds(200))
    let policy = fastRetries
    let endpoints = [WebhookEndpoint(name: "bots", url: "http://127.0.0.1:1/unused", secret: Array(repeating: 7, count: 32), types: types)]
    let cluster = try LoopbackCluster { system, _ in
        guard system.settings.roles.contains(.worker) else { return }
        let sender = RecordingWebhookEndpoint.Sender(node: system.settings.name, endpoint: endpoint)
        let services = ChatServices(store: store, webhooks: WebhookSettings(endpoints: endpoints, sender: sender, policy: policy), clock: ContinuousClock())
        ConversationActor.register(on: system, services: services)
        UserActor.register(on: system, services: services)
        PresenceShard.register(on: system)
        SafetyDesk.register(on: system, services: services)
    }
    for worker in ["node-a", "node-b"] { try await cluster.start(worker) }
    try await cluster.waitForUp(["node-a", "node-b"])
    return cluster
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
