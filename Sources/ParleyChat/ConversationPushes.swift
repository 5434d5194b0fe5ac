import Foundation
import Logging
import Metrics
import ParleyCluster
import ParleyModel
import Synchronization

/// A conversation's push notifications at its owner: the shell around its ``PushPlanner``, which
/// decides who is owed a notice and when. This asks each member's ``UserActor`` to notify its
/// devices (``UserActor/notify(_:)``), reports the outcome to the planner, and ticks it while a
/// notice waits for its window or its retry.
///
/// What is owed is also kept in the store, as the first seq owed (``ChatStore/setPushesOwed(from:in:epoch:)``):
/// written as soon as something is owed, moved forward at most once a window while notices go,
/// cleared once nothing is. A node that takes the conversation over after this one died owes
/// from there (``ConversationRecovery``), however long the notices had been failing.
final class ConversationPushes: Sendable {
    /// Asks a member's actor to send a notice; nil when the call failed.
    typealias Notify = @Sendable (UserID, PushNotice) async -> PushNoticeResult?
    /// Stores the first seq owed (nil: none); false when the store did not take it.
    typealias Persist = @Sendable (Int64?) async -> Bool

    private struct State {
        var planner: PushPlanner
        var kind: ConversationKind
        var name: String?
        var ticking = false
        /// The first seq owed as the store has it.
        var persisted: Int64?
        var persisting = false
        var persistedAt: ContinuousClock.Instant?
        /// After a write the store refused (it is down, or another node owns the conversation
        /// now), the next waits a window.
        var persistFailedAt: ContinuousClock.Instant?
    }

    private let state: Mutex<State>
    private let clock: any ClusterClock
    private let logger: Logger
    private let notify: Notify
    private let persist: Persist?

    init(
        record: ConversationRecord, policy: PushPlanner.Policy, clock: any ClusterClock, logger: Logger, persist: Persist? = nil,
        notify: @escaping Notify
    ) {
        let read = Dictionary(record.members.map { ($0.userId, $0.readSeq) }, uniquingKeysWith: max)
        self.state = Mutex(State(planner: PushPlanner(policy: policy, read: read), kind: record.kind, name: record.name))
        self.clock = clock
        self.logger = logger
        self.notify = notify
        self.persist = persist
    }

    /// `message` reached the gateways of `online`'s streams; `offline` (not its sender, not muted)
    /// hold none.
    func committed(_ message: Message, offline: [UserID], online: [UserID]) {
        let directives = state.withLock { $0.planner.committed(message, offline: offline, online: online, now: clock.now) }
        syncOwed()
        perform(directives)
    }

    func read(_ member: UserID, through seq: Int64) {
        state.withLock { $0.planner.read(member, through: seq) }
        syncOwed()
    }

    /// The store said an earlier owner owed from `seq` on: what this owner decides about those
    /// messages settles it.
    func owedByAnEarlierOwner(from seq: Int64) {
        state.withLock { state in state.persisted = state.persisted.map { min($0, seq) } ?? seq }
    }

    func erased(_ tombstone: Message) {
        state.withLock { $0.planner.erased(tombstone) }
    }

    /// A message was deleted for everyone: its notice is replaced where one showed it.
    func deleted(_ tombstone: Message) {
        let directives = state.withLock { $0.planner.deleted(tombstone, now: clock.now) }
        syncOwed()
        perform(directives)
    }

    func renamed(_ name: String) {
        state.withLock { $0.name = name }
    }

    private func perform(_ directives: [PushPlanner.Directive]) {
        for directive in directives {
            switch directive {
            case .notify(let member, let latest, let count):
                let notice = state.withLock { PushNotice(kind: $0.kind, conversationName: $0.name, latest: latest, count: count) }
                Task { [self] in
                    let result = await notify(member, notice)
                    let now = clock.now
                    let next = state.withLock { state -> PushPlanner.Directive? in
                        switch result?.retryAfterMilliseconds {
                        case .none where result != nil:
                            state.planner.notified(member, through: latest.seq, now: now)
                            return nil
                        case .some(let milliseconds):
                            return state.planner.failed(member, retryAfter: .milliseconds(milliseconds), now: now)
                        case .none:
                            return state.planner.failed(member, now: now)
                        }
                    }
                    if result == nil || result?.retryAfterMilliseconds != nil { Self.failedNotices.increment() }
                    syncOwed()
                    perform(next.map { [$0] } ?? [])
                }
            case .gaveUp(let member, let seq):
                Self.droppedNotices.increment()
                logger.warning("a push notification kept failing and is dropped", metadata: [
                    "user.id": "\(member)", "seq": "\(seq)",
                ])
            }
        }
        startTicking()
    }

    /// Ticks the planner while a notice waits (its window, its retry).
    private func startTicking() {
        let start = state.withLock { state -> Bool in
            guard !state.ticking, state.planner.isWaiting else { return false }
            state.ticking = true
            return true
        }
        guard start else { return }
        Task { [self] in
            while true {
                try? await clock.sleep(for: Self.tickEvery)
                let directives = state.withLock { state -> [PushPlanner.Directive]? in
                    guard state.planner.isWaiting else {
                        state.ticking = false
                        return nil
                    }
                    return state.planner.tick(now: clock.now)
                }
                guard let directives else { return }
                syncOwed()
                if !directives.isEmpty { perform(directives) }
            }
        }
    }

    /// Brings the store's word on what is owed up to date: at once when something became owed or
    /// nothing is any more, else (moving it forward) at most once a window. One write at a time.
    func syncOwed() {
        guard let persist else { return }
        let write = state.withLock { state -> Int64?? in
            let now = clock.now
            guard !state.persisting, state.persistFailedAt.map({ now - $0 >= state.planner.policy.window }) ?? true else { return .none }
            let owes = state.planner.owedCount > 0
            if owes == (state.persisted != nil) {
                // Only a move forward is left: looked at once a window at most.
                guard owes, state.persistedAt.map({ now - $0 >= state.planner.policy.window }) ?? true else { return .none }
                state.persistedAt = now
            }
            let first = state.planner.firstOwed
            guard first != state.persisted else { return .none }
            state.persisting = true
            return .some(first)
        }
        guard case .some(let first) = write else { return }
        Task { [self] in
            let stored = await persist(first)
            state.withLock { state in
                state.persisting = false
                state.persistedAt = clock.now
                state.persistFailedAt = stored ? nil : clock.now
                if stored { state.persisted = first }
            }
            // What changed meanwhile; after a failure the next event or tick tries again.
            if stored { syncOwed() }
        }
    }

    static let tickEvery: Duration = .milliseconds(250)
    static let failedNotices = Counter(label: "parley.push.failed_notices")
    static let droppedNotices = Counter(label: "parley.push.dropped_notices")
}
