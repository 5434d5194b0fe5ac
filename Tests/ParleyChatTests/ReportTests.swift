import Foundation
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyStore
import ParleyTestKit
import Synchronization
import Testing

@Suite(.serialized) struct ReportTests {
    static let (ann, bob, cat): (UserID, UserID, UserID) = ("u_ann", "u_bob", "u_cat")

    func startCluster(_ endpoint: RecordingWebhookEndpoint, store: InMemoryChatStore) async throws -> LoopbackCluster {
        try await startSafetyCluster(users: [Self.ann, Self.bob, Self.cat], store: store, endpoint: endpoint, types: [.reportCreated])
    }

    /// A report names a message of the reported user in a conversation the reporter is in, keeps
    /// the message as it was, is filed once however often it is retried while open, and reaches
    /// the webhook endpoint once it is up (under one ID); what is refused says why.
    @Test func aReportIsCheckedKeptOnceAndToldToTheEndpoint() async throws {
        let endpoint = RecordingWebhookEndpoint()
        endpoint.down.withLock { $0 = true }
        let store = InMemoryChatStore()
        let cluster = try await startCluster(endpoint, store: store)
        defer { Task { await cluster.stopAll() } }
        let system = cluster["node-a"]
        let group = ConversationID.make()
        _ = try await ConversationActor.resolve(group, using: system).create(CreateConversation(creatorId: Self.ann, memberIds: [Self.bob], name: "two"))
        let sent = try await ConversationActor.resolve(group, using: system)
            .send(SendMessage(senderId: Self.bob, clientMessageId: UUID().uuidString, text: "buy now")).message
        let desk = try SafetyDesk.resolve(using: system)

        let request = API.NewReport(userId: Self.bob, conversationId: group, seq: sent.seq, reason: "spam", note: "third time today")
        let filed = try await desk.file(request, by: Self.ann)
        #expect(filed.created && filed.report.message?.text == "buy now" && filed.report.status == .open && filed.report.reason == .spam)
        let retried = try await desk.file(request, by: Self.ann)
        #expect(!retried.created && retried.report.id == filed.report.id, "a retry is the same report")

        func refusal(_ request: API.NewReport, by reporter: UserID = Self.ann) async -> String? {
            do {
                _ = try await desk.file(request, by: reporter)
                return nil
            } catch let error as ClusterCallError {
                return error.code.rawValue
            } catch {
                return "\(error)"
            }
        }
        #expect(await refusal(request, by: Self.cat) == "not_found", "a reporter outside the conversation")
        #expect(await refusal(API.NewReport(userId: Self.bob, conversationId: group, seq: 2, reason: "spam")) == "not_found", "a message that does not exist")
        #expect(await refusal(API.NewReport(userId: Self.cat, conversationId: group, seq: 1, reason: "spam")) == "invalid_request", "not the sender")
        #expect(await refusal(API.NewReport(userId: Self.cat, conversationId: group, reason: "spam")) == "invalid_request", "not a member")
        #expect(await refusal(API.NewReport(userId: Self.bob, reason: "rude")) == "invalid_request", "an unknown reason")
        #expect(await refusal(API.NewReport(userId: Self.ann, reason: "spam")) == "invalid_request", "oneself")
        #expect(await refusal(API.NewReport(userId: "u_nobody", reason: "spam")) == "not_found", "an unknown user")
        #expect(await refusal(API.NewReport(userId: Self.bob, seq: 1, reason: "spam")) == "invalid_request", "a seq without its conversation")
        let aboutUser = try await desk.file(API.NewReport(userId: Self.bob, reason: "harassment"), by: Self.cat)
        #expect(aboutUser.created && aboutUser.report.message == nil)

        // The endpoint comes back: each report reaches it, each under its one ID.
        endpoint.down.withLock { $0 = false }
        try await eventually(timeout: .seconds(5), "both reports reach the endpoint") { endpoint.received.withLock { Set($0.map(\.id)).count } == 2 }
        let received = endpoint.received.withLock { $0 }
        #expect(received.allSatisfy { $0.type == .reportCreated && $0.conversation == nil })
        try await eventually(timeout: .seconds(5), "nothing is owed once delivered") { try await store.reportsOwingWebhooks(limit: 10).isEmpty }

        // What the store says is owed (a desk that died before it delivered) goes out on resume.
        let orphan = Report(
            id: .make(), reporterId: Self.cat, userId: Self.ann, conversationId: nil, seq: nil, reason: .other, note: nil, message: nil, createdAt: Date())
        _ = try await store.fileReport(orphan)
        try await desk.resume()
        try await eventually(timeout: .seconds(5), "the orphan report reaches the endpoint") { endpoint.received.withLock { Set($0.map(\.id)).count } == 3 }

        // Operators list and resolve.
        #expect(try await desk.reports(status: .open, after: nil, limit: 10).map(\.id) == [filed.report.id, aboutUser.report.id, orphan.id])
        let resolved = try await desk.resolve(filed.report.id, resolution: "bob warned")
        #expect(resolved.status == .resolved && resolved.resolution == "bob warned")
        #expect(try await desk.reports(status: .open, after: nil, limit: 10).map(\.id) == [aboutUser.report.id, orphan.id])
        #expect(try await desk.reports(status: nil, after: filed.report.id, limit: 1).map(\.id) == [aboutUser.report.id], "a page after")
        await #expect(throws: ClusterCallError.self) { try await desk.resolve(.make(), resolution: nil) }
    }
}
