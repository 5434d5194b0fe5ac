import Distributed
import Logging
import ParleyCluster
import ParleyModel
import Synchronization

/// What one node remembers of the fan-out directory: which gateways hold whose streams, each
/// answer for one lease. No IO and no clock of its own.
///
/// The presence shard that answered records this node as holding the user's answer until the
/// lease ends, and before a user's stream opens on a gateway the answer lacks, it tells this node
/// to forget the user (or waits the lease out). So an answer used from here still names every
/// gateway whose stream opened before the event happened, as a fresh question would.
///
/// A lease counts from when the node *asked*, so it ends before the shard's. A user forgotten
/// after the question went out is not remembered from its answer (it may predate the stream).
public struct DirectoryCacheState: Sendable {
    public typealias Instant = ContinuousClock.Instant

    private struct Entry: Sendable {
        var gateways: [String]
        var leaseEnd: Instant
        /// The gateways are the shard's presumption, not what it knows (it has just started).
        var presumed = false
    }

    public let lease: Duration
    private let capacity: Int
    private var entries: [UserID: Entry] = [:]
    /// When each user was last forgotten, for one lease.
    private var forgottenAt: [UserID: Instant] = [:]
    /// When everything was last forgotten.
    private var allForgottenAt: Instant?

    public init(lease: Duration, capacity: Int = 200_000) {
        self.lease = lease
        self.capacity = capacity
    }

    /// The remembered gateways of `users` (an empty list for a user known to have no stream), and
    /// the users that must be asked.
    public func lookup(_ users: [UserID], now: Instant) -> (known: [UserID: [String]], missing: [UserID]) {
        var known: [UserID: [String]] = [:]
        var missing: [UserID] = []
        for user in users {
            if let entry = entries[user], now < entry.leaseEnd {
                known[user] = entry.gateways
            } else {
                missing.append(user)
            }
        }
        return (known, missing)
    }

    /// Which of `users`, remembered, were presumed to stream by a shard that had just started.
    public func presumed(_ users: [UserID], now: Instant) -> Set<UserID> {
        Set(users.filter { user in entries[user].map { $0.presumed && now < $0.leaseEnd } ?? false })
    }

    /// The shards' answer about `users` (asked at `askedAt`; a user without gateways in it has no
    /// stream; one in `presumed` may have none).
    public mutating func remember(_ answer: [UserID: [String]], for users: [UserID], presumed: Set<UserID> = [], askedAt: Instant, now: Instant) {
        if entries.count + users.count > capacity {
            entries = entries.filter { now < $0.value.leaseEnd }
            if entries.count + users.count > capacity { entries.removeAll() }
        }
        for user in users {
            if let forgotten = forgottenAt[user], askedAt <= forgotten { continue }
            if let allForgottenAt, askedAt <= allForgottenAt { continue }
            entries[user] = Entry(gateways: answer[user] ?? [], leaseEnd: askedAt.advanced(by: lease), presumed: presumed.contains(user))
        }
    }

    /// A shard says these users' streams moved: ask again next time.
    public mutating func forget(_ users: [UserID], now: Instant) {
        if forgottenAt.count > capacity / 4 { forgottenAt = forgottenAt.filter { now < $0.value.advanced(by: lease) } }
        for user in users {
            entries[user] = nil
            forgottenAt[user] = now
        }
    }

    /// This node rejoined as a new incarnation: the shards that recorded it as holding answers
    /// were its own actors or know it by its old incarnation, so no one would tell it to forget,
    /// and the answers came from a view of the cluster that was declared wrong.
    public mutating func forgetAll(now: Instant) {
        entries.removeAll()
        forgottenAt.removeAll()
        allForgottenAt = now
    }

    /// Users remembered (for tests).
    public var count: Int { entries.count }
}

/// A node's fan-out directory: answers from its ``DirectoryCacheState`` while their lease runs,
/// from the presence shards otherwise; the shards reach it through its ``DirectoryCache`` actor.
public final class GatewayDirectory: Sendable {
    /// How long a node may use an answer of the directory without asking again. A stream opening
    /// on a gateway a node's answer lacks waits at most this long when that node cannot be told.
    public static let lease: Duration = .seconds(3)

    private let system: ClusterSystem
    private let state: Mutex<DirectoryCacheState>
    /// Keeps the node's ``DirectoryCache`` alive (the system holds pinned actors weakly); set
    /// right after `self` exists, since the actor refers back to it.
    private let actor: Mutex<DirectoryCache?> = Mutex(nil)

    /// Opens `system`'s directory and its ``DirectoryCache`` actor (one per node).
    public init(system: ClusterSystem, lease: Duration = GatewayDirectory.lease) {
        self.system = system
        self.state = Mutex(DirectoryCacheState(lease: lease))
        let actor = system.makePinned(kind: DirectoryCache.kind, key: DirectoryCache.key) {
            DirectoryCache(directory: self, actorSystem: system)
        }
        self.actor.withLock { $0 = actor }
        // A node declared down may have answered itself from shards that took live gateways for
        // dead (a node whose network stalled downs the peers it has not heard from yet when the
        // first one comes back): after it rejoins, those answers would hand a message to no
        // stream of a user whose gateway they left out (cluster simulation seed 895).
        system.onRejoin { [weak self] _ in self?.forgetAll() }
        // Answers given while this node was alone in a cluster of its own left every stream out.
        system.onMerge { [weak self] _ in self?.forgetAll() }
    }

    private func forgetAll() {
        state.withLock { $0.forgetAll(now: system.clock.now) }
    }

    /// The gateways holding streams of each of `members`.
    public func gateways(of members: [UserID]) async -> [UserID: [String]] {
        await gatewaysAndPresumed(of: members).gateways
    }

    /// ``gateways(of:)``, and which of `members` are named on gateways only because their shard
    /// could not tell yet (it has just started, or did not answer): whether they are online is
    /// not known.
    public func gatewaysAndPresumed(of members: [UserID]) async -> (gateways: [UserID: [String]], presumed: Set<UserID>) {
        let askedAt = system.clock.now
        var (known, missing) = state.withLock { $0.lookup(members, now: askedAt) }
        var presumed = state.withLock { $0.presumed(members, now: askedAt) }
        guard !missing.isEmpty else { return (known, presumed) }
        let answer = await PresenceShard.gateways(of: missing, holder: system.settings.name, using: system)
        state.withLock { $0.remember(answer.gateways, for: answer.answered, presumed: answer.presumed, askedAt: askedAt, now: system.clock.now) }
        presumed.formUnion(answer.presumed)
        for user in missing { known[user] = answer.gateways[user] ?? [] }
        // A shard that did not answer (its node paused, dying, or the ring moving) says nothing
        // about its users: taking that for "no stream" would hand their events to nobody, and a
        // quiet conversation would never show them missing. Every gateway not known down gets
        // them instead (one without their stream drops them), and nothing is remembered.
        let unanswered = Set(missing).subtracting(answer.answered)
        if !unanswered.isEmpty {
            let gateways = system.members.filter { $0.roles.contains(.gateway) && !$0.status.isTerminal }.map(\.id.name).sorted()
            for user in unanswered { known[user] = gateways }
            presumed.formUnion(unanswered)
        }
        return (known, presumed)
    }

    func forget(_ users: [UserID]) {
        state.withLock { $0.forget(users, now: system.clock.now) }
    }
}

/// The node's ear for its ``GatewayDirectory``: presence shards call ``forget(_:)`` on it, at the
/// well-known ID `directory-cache/gateways@<node>`.
public distributed actor DirectoryCache {
    public typealias ActorSystem = ClusterSystem

    public static let kind = "directory-cache"
    static let key = "gateways"

    // Weak: the directory owns this actor, not the other way round.
    private weak let directory: GatewayDirectory?

    public static func id(node: String) -> ClusterActorID {
        ClusterActorID(kind: kind, key: key, node: node)
    }

    init(directory: GatewayDirectory, actorSystem: ClusterSystem) {
        self.actorSystem = actorSystem
        self.directory = directory
    }

    /// These users' streams moved: the node asks the shards again before it next delivers to them.
    public distributed func forget(_ users: [UserID]) {
        directory?.forget(users)
    }
}
