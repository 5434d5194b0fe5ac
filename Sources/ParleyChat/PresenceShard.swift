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
/// of users offline at the move is not carried over. Until every renewal has had its chance (one
/// lease), the fan-out directory names every live gateway, so no event misses a stream the shard
/// has not heard of yet.
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

    /// The ID of `user`'s shard.
    public static func id(for user: UserID) -> ClusterActorID {
        ClusterActorID(kind: kind, key: "\(shard(of: user))")
    }

    public static func resolve(for user: UserID, using system: ClusterSystem) throws -> PresenceShard {
        try resolve(id: id(for: user), using: system)
    }

    /// How long a session lives without its gateway's renewal.
    public static let sessionLease: Duration = .seconds(6)

    /// Makes `system` activate presence shards on their owners.
    public static func register(on system: ClusterSystem, lease: Duration = sessionLease) {
        system.register(kind: kind) { _, system in PresenceShard(lease: lease, actorSystem: system) }
        // The fan-out's directory questions, on the path of most messages, run without the
        // runtime's lookup of the method.
        system.registerDirect(gatewaysHeldByTarget, of: PresenceShard.self) { shard, users, holder in
            try await shard.gateways(of: users, heldBy: holder)
        }
        // So do a gateway's calls for the streams it holds: a renewal every 2 s for each shard
        // that holds some, one call for each stream that opens or closes. On the general path
        // the lookup of the renewal's parameter types cost 45,000 instructions a call.
        system.registerDirect(openSessionTarget, of: PresenceShard.self) { shard, session, gateway in
            try await shard.openSession(session, gateway: gateway)
        }
        system.registerDirect(renewSessionsTarget, of: PresenceShard.self) { shard, sessions, gateway in
            try await shard.renewSessions(sessions, gateway: gateway)
        }
        system.registerDirect(closeSessionTarget, of: PresenceShard.self) { shard, session in
            try await shard.closeSession(session)
        }
    }

    /// The names on the cluster of ``openSession(_:gateway:)``, ``renewSessions(_:gateway:)`` and
    /// ``closeSession(_:)`` (their distributed thunks' mangled names; a test checks them against
    /// real calls).
    public static let openSessionTarget = "$s10ParleyChat13PresenceShardC11openSession_7gateway0A5Model0C0VAC0F3RefV_SStYaKFTE"
    public static let renewSessionsTarget = "$s10ParleyChat13PresenceShardC13renewSessions_7gatewaySaySSGSayAC10SessionRefVG_SStYaKFTE"
    public static let closeSessionTarget = "$s10ParleyChat13PresenceShardC12closeSessiony0A5Model0C0VAC0F3RefVYaKFTE"

    /// ``gateways(of:heldBy:)``'s name on the cluster (its distributed thunk's mangled name; a
    /// test checks it against real calls).
    public static let gatewaysHeldByTarget =
        "$s10ParleyChat13PresenceShardC8gateways2of6heldBySDySSSay0A5Model10IdentifierVyAG10UserIDKindOGGGAM_SStYaKFTE"

    init(lease: Duration, actorSystem: ClusterSystem) {
        self.actorSystem = actorSystem
        // An earlier owner (before the ring moved) may have answered directory questions.
        self.state = PresenceState(lease: lease, startedAt: actorSystem.clock.now)
    }

    deinit {
        sweeper?.cancel()
    }

    /// A stream of `user` opened on `gateway`; returns the user's presence. Returns once every
    /// node's directory answer names the gateway (so an event that happens after this reaches
    /// the stream live, and one that happened before is in the store for its replay).
    public distributed func openSession(_ session: SessionRef, gateway: String) async -> Presence {
        expire()
        let newGateway = !state.hasSession(of: session.userId, on: gateway)
        actorSystem.logger.trace("session opened", metadata: [
            "user.id": "\(session.userId)", "gateway": "\(gateway)", "gateway.new": "\(newGateway)",
        ])
        announce(state.sessionOpened(session.userId, gateway: gateway, sessionID: session.sessionID, now: actorSystem.clock.now))
        if newGateway { await invalidateDirectories(of: [session.userId]) }
        return state.presence(of: session.userId)
    }

    /// `gateway` still holds these streams. Returns the IDs of those whose sessions had lapsed
    /// here (``PresenceState/Renewal/lapsed``): events may have passed them by, so the gateway
    /// ends them, and their clients resume by cursor.
    public distributed func renewSessions(_ sessions: [SessionRef], gateway: String) async -> [String] {
        expire()
        // A renewal opens a session this shard did not know (it moved here, or the lease ran out).
        let newGateway = Set(sessions.map(\.userId).filter { !state.hasSession(of: $0, on: gateway) })
        let renewal = state.renew(gateway: gateway, sessions: sessions.map { ($0.userId, $0.sessionID) }, now: actorSystem.clock.now)
        for change in renewal.changes { announce(change) }
        await invalidateDirectories(of: newGateway.filter { state.hasSession(of: $0, on: gateway) }.sorted())
        return renewal.lapsed
    }

    /// A stream closed; returns the user's presence (offline with `lastSeenAt` if it was the last).
    /// When it was the last, this answers once the nodes that remembered the stream have
    /// forgotten it: a message committed after the gateway heard this answer finds the user
    /// offline and owes them a push notification (with nothing waiting, the next message after an
    /// app closed could still go to the closed stream, and no notification to the phone).
    public distributed func closeSession(_ session: SessionRef) async -> Presence {
        expire()
        let change = state.sessionClosed(session.userId, sessionID: session.sessionID, now: actorSystem.clock.now, wallClock: actorSystem.clock.wallNow)
        announce(change)
        if let change, change.status == .offline { await invalidateDirectories(of: [change.userId]) }
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
        return state.gateways(of: users, now: actorSystem.clock.now, liveGateways: liveGateways).mapValues { $0.sorted() }
    }

    /// ``gateways(of:)`` for a node's ``GatewayDirectory``, which remembers the answer for one
    /// directory lease: the shard tells it when one of the users' streams opens elsewhere.
    public distributed func gateways(of users: [UserID], heldBy node: String) -> [String: [UserID]] {
        expire()
        let answer = state.gateways(of: users, heldBy: node, now: actorSystem.clock.now, liveGateways: liveGateways).mapValues { $0.sorted() }
        actorSystem.logger.trace("directory question answered", metadata: [
            "users": "\(users)", "holder": "\(node)", "answer": "\(answer)", "gateways.live": "\(liveGateways)",
            "members": "\(actorSystem.members.map { "\($0.id):\($0.status)" })",
        ])
        return answer
    }

    /// The gateway nodes the cluster has not declared down.
    private var liveGateways: [String] {
        actorSystem.members.filter { $0.roles.contains(.gateway) && !$0.status.isTerminal }.map(\.id.name)
    }

    /// Tells the nodes that remember an answer about `users` to forget it; a node that cannot be
    /// told (and is not known dead) is waited for until its lease has run out, and no answer is
    /// waited for past that (the gateway opening the stream hears back within its call timeout).
    private func invalidateDirectories(of users: [UserID]) async {
        guard !users.isEmpty else { return }
        let invalidation = state.directoryInvalidation(for: users, now: actorSystem.clock.now)
        guard !invalidation.isEmpty else { return }
        let system = actorSystem
        var targets = invalidation.holders
        if let until = invalidation.everyNodeUntil {
            for member in system.members where member.roles.contains(.worker) && !member.status.isTerminal {
                targets[member.id.name] = .init(users: users, leaseEnd: max(targets[member.id.name]?.leaseEnd ?? until, until))
            }
        }
        system.logger.trace("directories told to forget", metadata: [
            "users": "\(users)", "nodes": "\(targets.keys.sorted())", "every.node": "\(invalidation.everyNodeUntil != nil)",
        ])
        let waitUntil = await withTaskGroup(of: ContinuousClock.Instant?.self) { group in
            for (node, holder) in targets {
                group.addTask {
                    // No answer by the end of its lease: it uses nothing it remembered any more.
                    let wait = await untilDeadline(holder.leaseEnd, on: system.clock) { () -> ContinuousClock.Instant? in
                        do {
                            try await DirectoryCache.resolve(id: DirectoryCache.id(node: node), using: system).forget(holder.users)
                            return nil
                        } catch {
                            // A node without a directory, or known dead, uses nothing it remembered.
                            if let error = error as? ClusterCallError, error.code == .actorNotFound { return nil }
                            guard let member = system.members.first(where: { $0.id.name == node }), !member.status.isTerminal else { return nil }
                            system.logger.info("a node was not told that streams moved; waiting for its directory lease to run out", metadata: [
                                "node": "\(node)", "users.count": "\(holder.users.count)", "error": "\(error)",
                            ])
                            return holder.leaseEnd
                        }
                    }
                    return wait ?? nil
                }
            }
            return await group.reduce(nil) { latest, next in [latest, next].compactMap { $0 }.max() }
        }
        if let waitUntil { try? await system.clock.sleep(until: waitUntil) }
        for (node, holder) in targets { state.forgotten(holder.users, by: node, leaseEnd: holder.leaseEnd) }
    }

    /// Leases are checked on every call and every second, so a dead gateway's users read as
    /// offline once their lease has run out.
    private func expire() {
        // Leases of a dead gateway's sessions run out with nobody calling: sweep them, so its users
        // go offline (and their contacts hear of it) within a second of the lease.
        if sweeper == nil {
            let clock = actorSystem.clock
            sweeper = Task { [weak self] in
                while !Task.isCancelled {
                    try? await clock.sleep(for: .seconds(1))
                    guard let self else { return }
                    await self.whenLocal { $0.expire() }
                }
            }
        }
        let changes = state.expireLeases(now: actorSystem.clock.now, wallClock: actorSystem.clock.wallNow)
        for change in changes { announce(change) }
        forgetWentOffline(changes)
    }

    /// Users whose leases ran out: the nodes that remember where their streams were forget it, so
    /// that a conversation's owner sees them offline at once and owes them push notifications,
    /// instead of delivering to a gateway that no longer holds their stream for the rest of a
    /// directory lease. Nothing waits for it.
    private func forgetWentOffline(_ changes: [Presence]) {
        let users = changes.filter { $0.status == .offline }.map(\.userId)
        guard !users.isEmpty else { return }
        actorSystem.logger.debug("presence leases ran out: users offline", metadata: ["users": "\(users)"])
        Task { await invalidateDirectories(of: users) }
    }

    /// Tells the streams of everyone who shares a conversation with the user (live only, best effort).
    private func announce(_ change: Presence?) {
        guard let change else { return }
        let system = actorSystem
        Task {
            do {
                let contacts = try await UserActor.resolve(change.userId, using: system).contacts()
                await Self.tell(contacts, .presence(change), using: system)
            } catch {
                system.logger.debug("presence change not announced", metadata: ["user.id": "\(change.userId)", "error": "\(error)"])
            }
        }
    }

    /// Hands a live event to the streams of `users`, wherever their presence shards say they
    /// are: one delivery per gateway (best effort; a stream that misses it is not told again).
    static func tell(_ users: [UserID], _ event: ChatEvent, using system: ClusterSystem) async {
        var shares: [String: [UserID]] = [:]
        for (user, userGateways) in await gateways(of: users, using: system) {
            for gateway in userGateways { shares[gateway, default: []].append(user) }
        }
        for (gateway, users) in shares {
            try? await GatewayInbox.resolve(id: GatewayInbox.id(gateway: gateway), using: system)
                .deliver([EventDelivery(event: event, recipients: users.sorted())])
        }
    }

    /// The gateways holding streams of each of `members`, asked of their presence shards (one call
    /// per shard).
    public static func gateways(of members: [UserID], using system: ClusterSystem) async -> [UserID: [String]] {
        await gateways(of: members, holder: nil, using: system).gateways
    }

    /// The gateways holding streams of each of `members` (one call per shard), the members whose
    /// shard answered, and those of them presumed to stream everywhere only because their shard
    /// has just started (``PresenceState/presumedKey``). A `holder` will remember the answer
    /// (``GatewayDirectory``).
    static func gateways(
        of members: [UserID], holder: String?, using system: ClusterSystem
    ) async -> (gateways: [UserID: [String]], answered: [UserID], presumed: Set<UserID>) {
        let byShard = Dictionary(grouping: members, by: shard(of:))
        return await withTaskGroup(of: (users: [UserID], answer: [String: [UserID]]?).self) { group in
            for users in byShard.values {
                group.addTask {
                    guard let first = users.first else { return (users, [:]) }
                    let shard = try? resolve(for: first, using: system)
                    if let holder {
                        return (users, try? await shard?.gateways(of: users, heldBy: holder))
                    }
                    return (users, try? await shard?.gateways(of: users))
                }
            }
            return await group.reduce(into: (gateways: [UserID: [String]](), answered: [UserID](), presumed: Set<UserID>())) { result, part in
                guard let answer = part.answer else { return }
                result.answered += part.users
                for (gateway, users) in answer {
                    if gateway == PresenceState.presumedKey {
                        result.presumed.formUnion(users)
                        continue
                    }
                    for user in users { result.gateways[user, default: []].append(gateway) }
                }
            }
        }
    }
}
