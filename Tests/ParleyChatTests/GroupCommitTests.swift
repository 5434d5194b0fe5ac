import Foundation
import ParleyChat
import ParleyModel
import ParleyStore
import Synchronization
import Testing

@Suite struct GroupCommitStateMachineTests {
    typealias Machine = GroupCommitStateMachine<Int>

    static func batch(_ action: Machine.Action) -> [Int]? {
        if case .commit(let items) = action { return items }
        return nil
    }

    @Test func idleAppendsGoAtOnceAndAppendsDuringACommitGoTogetherNext() {
        var machine = Machine(maxBatch: 100, maxWait: .zero)
        #expect(Self.batch(machine.enqueue(1)) == [1])
        for i in 2...5 { #expect(Self.batch(machine.enqueue(i)) == nil, "a commit is running: \(i) waits") }
        #expect(Self.batch(machine.commitFinished()) == [2, 3, 4, 5])
        #expect(Self.batch(machine.commitFinished()) == nil)
        #expect(!machine.isCommitting)
    }

    @Test func withAWaitAnIdleAppendWaitsForCompanyUntilTheTimer() {
        var machine = Machine(maxBatch: 3, maxWait: .milliseconds(2))
        guard case .armTimer = machine.enqueue(1) else {
            Issue.record("the first idle append arms the timer")
            return
        }
        #expect(Self.batch(machine.enqueue(2)) == nil)
        #expect(Self.batch(machine.enqueue(3)) == [1, 2, 3], "a full batch goes before the timer")
        #expect(Self.batch(machine.timerFired()) == nil, "nothing left, and a commit is running")
        _ = machine.enqueue(4)
        #expect(Self.batch(machine.commitFinished()) == [4])
    }

    @Test func batchesNeverExceedTheMaximum() {
        var machine = Machine(maxBatch: 2, maxWait: .zero)
        _ = machine.enqueue(0)
        for i in 1...5 { _ = machine.enqueue(i) }
        #expect(Self.batch(machine.commitFinished()) == [1, 2])
        #expect(Self.batch(machine.commitFinished()) == [3, 4])
        #expect(Self.batch(machine.commitFinished()) == [5])
    }
}

/// The in-memory store behind a commit that records each batch's size and can be slowed or failed.
final class RecordingStore: Sendable {
    let inner = InMemoryChatStore()
    let commitSizes = Mutex<[Int]>([])
    let delay: Duration
    let failing = Mutex(false)

    init(delay: Duration) { self.delay = delay }

    func commit(_ appends: [AppendRequest]) async throws -> [AppendOutcome] {
        commitSizes.withLock { $0.append(appends.count) }
        try await Task.sleep(for: delay)
        if failing.withLock({ $0 }) { throw ChatStoreError(.unavailable, "disk on fire") }
        return try await inner.commit(appends)
    }

    func committer() -> GroupCommitter {
        GroupCommitter { try await self.commit($0) }
    }
}

@Suite struct GroupCommitterTests {
    static func setUp(conversations: Int, store: RecordingStore) async throws -> [(ConversationID, Int64)] {
        var owned: [(ConversationID, Int64)] = []
        for _ in 0..<conversations {
            let id = ConversationID.make()
            try await store.inner.createConversation(ConversationRecord(
                id: id, kind: .direct, name: nil, ownerId: "u_a", createdAt: Date(),
                members: [ConversationMember(userId: "u_a", role: .owner), ConversationMember(userId: "u_b", role: .member)]))
            owned.append((id, try await store.inner.acquireOwnership(of: id)))
        }
        return owned
    }

    @Test func concurrentAppendsFromManyConversationsShareCommits() async throws {
        let store = RecordingStore(delay: .milliseconds(5))
        let committer = store.committer()
        let owned = try await Self.setUp(conversations: 20, store: store)
        let outcomes = try await withThrowingTaskGroup(of: AppendOutcome.self) { group in
            for i in 0..<200 {
                let (id, epoch) = owned[i % owned.count]
                group.addTask {
                    try await committer.append(AppendRequest(
                        conversationId: id, epoch: epoch, senderId: "u_a", clientMessageId: UUID().uuidString.lowercased(), text: "m\(i)", sentAt: Date()))
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(outcomes.allSatisfy { if case .appended = $0 { true } else { false } })
        let sizes = store.commitSizes.withLock { $0 }
        #expect(sizes.reduce(0, +) == 200)
        #expect(sizes.count < 200, "appends waiting on a running commit go together: \(sizes)")
        #expect(sizes.max() ?? 0 > 1)
        for (id, _) in owned {
            #expect(try await store.inner.messages(in: id, after: 0, limit: 100).map(\.seq) == Array(1...10))
        }
    }

    @Test func aFailedCommitFailsEveryAppendInItAndTheNextOneWorks() async throws {
        let store = RecordingStore(delay: .milliseconds(1))
        let committer = store.committer()
        let (id, epoch) = try await Self.setUp(conversations: 1, store: store)[0]
        let request = AppendRequest(conversationId: id, epoch: epoch, senderId: "u_a", clientMessageId: UUID().uuidString, text: "x", sentAt: Date())
        store.failing.withLock { $0 = true }
        await #expect(throws: ChatStoreError(.unavailable, "disk on fire")) { try await committer.append(request) }
        store.failing.withLock { $0 = false }
        #expect(try await committer.append(request).message?.seq == 1)
    }
}
