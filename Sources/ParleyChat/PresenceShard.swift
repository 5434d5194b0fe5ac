import Distributed
import Foundation
import ParleyCluster
import ParleyModel

/// One of a fixed number of shards users are hashed into: their sessions (the fan-out
/// directory) and presence. A thin shell over ``PresenceState``.
///
/// Presence is soft state: when the ring moves a shard, its sessions come back on the new owner
/// with the gateways' next lease renewal (a renewal of an unknown session opens it); `lastSeenAt`
/// of users offline at the move is not carried over.
public distributed actor PresenceShard {
    public typealias ActorSystem = ClusterSystem

    public static let kind = "presence"
    /// Users are spread over this many shards (a fixed number: changing it moves every user).
    public static let shardCount: UInt64 = 64

    /// A session as a gateway reports it.
    public struct SessionRef: Codable, Sendable, Hashable {
        public var userId: UserID
        public var sessionID: String

        public init(userId: UserID, sessionID: String) {
            self.userId = userId
            self.sessionID = sessionID
        }
    }

    private var state: PresenceState

    public static func shard(of user: UserID) -> UInt64 {
        StableHash.hash(user.rawValue) % shardCount
    }

    public static func resolve(for user: UserID, using system: ClusterSystem) throws -> PresenceShard {
        try resolve(id: ClusterActorID(kind: kind, key: "\(shard(of: user))"), using: system)
    }

    /// Makes `system` activate presence shards on their owners.
    public static func register(on system: ClusterSystem, lease: Duration = .seconds(6)) {
        system.register(kind: kind) { _, system in PresenceShard(lease: lease, actorSystem: system) }
    }

    init(lease: Duration, actorSystem: ClusterSystem) {
        self.actorSystem = actorSystem
        self.state = PresenceState(lease: lease)
    }

    /// A stream of `user` opened on `gateway`; returns the user's presence.
    public distributed func openSession(_ session: SessionRef, gateway: String) -> Presence {
        expire()
        _ = state.sessionOpened(session.userId, gateway: gateway, sessionID: session.sessionID, now: .now)
        return state.presence(of: session.userId)
    }

    /// `gateway` still holds these streams.
    public distributed func renewSessions(_ sessions: [SessionRef], gateway: String) {
        expire()
        _ = state.renew(gateway: gateway, sessions: sessions.map { ($0.userId, $0.sessionID) }, now: .now)
    }

    /// A stream closed; returns the user's presence (offline with `lastSeenAt` if it was the last).
    public distributed func closeSession(_ session: SessionRef) -> Presence {
        expire()
        _ = state.sessionClosed(session.userId, sessionID: session.sessionID, wallClock: Date())
        return state.presence(of: session.userId)
    }

    /// `PUT /v1/presence`: the user's preference, shown while a stream is open.
    public distributed func setPreference(_ user: UserID, _ status: PresenceStatus) throws -> Presence {
        expire()
        _ = try state.setPreference(user, status)
        return state.presence(of: user)
    }

    /// The presence of users of this shard.
    public distributed func presence(of users: [UserID]) -> [Presence] {
        expire()
        return users.map { state.presence(of: $0) }
    }

    /// Which gateways hold streams of these users (users of this shard).
    public distributed func gateways(of users: [UserID]) -> [String: [UserID]] {
        expire()
        return state.gateways(of: users).mapValues { $0.sorted() }
    }

    /// Leases are checked on every call, so a dead gateway's users read as offline once their lease
    /// has run out.
    private func expire() {
        _ = state.expireLeases(now: .now, wallClock: Date())
    }
}
