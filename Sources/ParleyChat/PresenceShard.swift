import Distributed
import Foundation
import Logging
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
    private var sweeper: Task<Void, Never>?

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

    deinit {
        sweeper?.cancel()
    }

    /// A stream of `user` opened on `gateway`; returns the user's presence.
    public distributed func openSession(_ session: SessionRef, gateway: String) -> Presence {
        expire()
        announce(state.sessionOpened(session.userId, gateway: gateway, sessionID: session.sessionID, now: .now))
        return state.presence(of: session.userId)
    }

    /// `gateway` still holds these streams.
    public distributed func renewSessions(_ sessions: [SessionRef], gateway: String) {
        expire()
        for change in state.renew(gateway: gateway, sessions: sessions.map { ($0.userId, $0.sessionID) }, now: .now) {
            announce(change)
        }
    }

    /// A stream closed; returns the user's presence (offline with `lastSeenAt` if it was the last).
    public distributed func closeSession(_ session: SessionRef) -> Presence {
        expire()
        announce(state.sessionClosed(session.userId, sessionID: session.sessionID, now: .now, wallClock: Date()))
        return state.presence(of: session.userId)
    }

    /// `PUT /v1/presence`: the user's preference, shown while a stream is open.
    public distributed func setPreference(_ user: UserID, _ status: PresenceStatus) throws -> Presence {
        expire()
        announce(try state.setPreference(user, status))
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

    /// Leases are checked on every call and every second, so a dead gateway's users read as
    /// offline once their lease has run out.
    private func expire() {
        // Leases of a dead gateway's sessions run out with nobody calling: sweep them, so its users
        // go offline (and their contacts hear of it) within a second of the lease.
        if sweeper == nil {
            sweeper = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    guard let self else { return }
                    await self.whenLocal { $0.expire() }
                }
            }
        }
        for change in state.expireLeases(now: .now, wallClock: Date()) { announce(change) }
    }

    /// Tells the streams of everyone who shares a conversation with the user (live only, best effort).
    private func announce(_ change: Presence?) {
        guard let change else { return }
        let system = actorSystem
        Task {
            do {
                let contacts = try await UserActor.resolve(change.userId, using: system).contacts()
                let gateways = await Self.gateways(of: contacts, using: system)
                var shares: [String: [UserID]] = [:]
                for (user, userGateways) in gateways {
                    for gateway in userGateways { shares[gateway, default: []].append(user) }
                }
                for (gateway, users) in shares {
                    try? await GatewayInbox.resolve(id: GatewayInbox.id(gateway: gateway), using: system)
                        .deliver([EventDelivery(event: .presence(change), recipients: users.sorted())])
                }
            } catch {
                system.logger.debug("presence change not announced", metadata: ["user.id": "\(change.userId)", "error": "\(error)"])
            }
        }
    }

    /// The gateways holding streams of each of `members`, asked of their presence shards (one call
    /// per shard).
    public static func gateways(of members: [UserID], using system: ClusterSystem) async -> [UserID: [String]] {
        let byShard = Dictionary(grouping: members, by: shard(of:))
        return await withTaskGroup(of: [String: [UserID]].self) { group in
            for users in byShard.values {
                group.addTask {
                    guard let first = users.first else { return [:] }
                    return (try? await resolve(for: first, using: system).gateways(of: users)) ?? [:]
                }
            }
            return await group.reduce(into: [UserID: [String]]()) { byMember, part in
                for (gateway, users) in part {
                    for user in users { byMember[user, default: []].append(gateway) }
                }
            }
        }
    }
}
