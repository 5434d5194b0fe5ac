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
final class ConversationPushes: Sendable {
    /// Asks a member's actor to send a notice; nil when the call failed.
    typealias Notify = @Sendable (UserID, PushNotice) async -> PushNoticeResult?

    private struct State {
        var planner: PushPlanner
        var kind: ConversationKind
        var name: String?
        var ticking = false
    }

    private let state: Mutex<State>
    private let clock: any ClusterClock
    private let logger: Logger
    private let notify: Notify

    init(record: ConversationRecord, policy: PushPlanner.Policy, clock: any ClusterClock, logger: Logger, notify: @escaping Notify) {
        let read = Dictionary(record.members.map { ($0.userId, $0.readSeq) }, uniquingKeysWith: max)
        self.state = Mutex(State(planner: PushPlanner(policy: policy, read: read), kind: record.kind, name: record.name))
        self.clock = clock
        self.logger = logger
        self.notify = notify
    }

    /// `message` reached the gateways of `online`'s streams; `offline` (not its sender, not muted)
    /// hold none.
    func committed(_ message: Message, offline: [UserID], online: [UserID]) {
        guard !offline.isEmpty || !online.isEmpty else { return }
        perform(state.withLock { $0.planner.committed(message, offline: offline, online: online, now: clock.now) })
    }

    func read(_ member: UserID, through seq: Int64) {
        state.withLock { $0.planner.read(member, through: seq) }
    }

    func renamed(_ name: String) {
        state.withLock { $0.name = name }
    }

    /// Members owed a notice (for tests).
    var owedCount: Int { state.withLock { $0.planner.owedCount } }

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
                if !directives.isEmpty { perform(directives) }
            }
        }
    }

    static let tickEvery: Duration = .milliseconds(250)
    static let failedNotices = Counter(label: "parley.push.failed_notices")
    static let droppedNotices = Counter(label: "parley.push.dropped_notices")
}
