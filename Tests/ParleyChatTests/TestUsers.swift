import Foundation
import ParleyModel
import ParleyStore

/// Conversations accept only registered users as members: tests register the IDs they use.
func registerUsers(_ ids: [UserID], in store: any ChatStore) async throws {
    for id in ids {
        let user = User(id: id, handle: "h\(id.rawValue.lowercased().filter { $0.isLetter || $0.isNumber })", displayName: id.rawValue, createdAt: Date())
        try await store.createUser(StoredUser(user: user, passwordHash: "not-a-hash"))
    }
}
