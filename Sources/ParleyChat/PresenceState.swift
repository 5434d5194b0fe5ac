import Foundation
import ParleyModel

/// One presence shard's sessions and statuses, with no IO and no clock of its own.
///
/// A session is one open event stream: a gateway node and a session ID, held under a lease the
/// gateway renews. A user is online (or away, if it said so) while it has a session; when the last
/// one closes, or its lease runs out because its gateway died, the user goes offline with
/// `lastSeenAt`. The sessions are also the directory fan-out uses: which gateways hold whose
/// streams.
public struct PresenceState: Sendable {
    public struct Session: Hashable, Sendable {
        public var gateway: String
        public var sessionID: String
        public var leaseExpiresAt: ContinuousClock.Instant
    }

    /// How long a session lives without renewal.
    public let lease: Duration
    private var sessions: [UserID: [String: Session]] = [:]
    private var preferences: [UserID: PresenceStatus] = [:]
    private var lastSeen: [UserID: Date] = [:]
    /// Sessions closed explicitly, until their lease would have run out: a renewal already on its
    /// way when the stream closed must not open them again.
    private var closed: [String: ContinuousClock.Instant] = [:]
    /// No lease runs out before this instant (it may be earlier than the true first expiry, never
    /// later), so most calls to ``expireLeases(now:wallClock:)`` need not look at any session.
    private var noExpiryBefore: ContinuousClock.Instant?

    /// Nodes that remember this shard's answer about a user (``GatewayDirectory``), each until its
    /// lease ends.
    private var holders: [UserID: [String: ContinuousClock.Instant]] = [:]
    /// Holders being told to forget a user, until they have been (or their lease ended): a stream
    /// that opens while an earlier invalidation of its user is still under way (a node that cannot
    /// be reached, waited out) waits for it too, or it would count as open while that node still
    /// uses an answer that lacks it (cluster simulation seed 6135: a cut link and a close under way).
    private var telling: [UserID: [String: ContinuousClock.Instant]] = [:]
    /// How long a node may use an answer.
    public let directoryLease: Duration
    /// When this shard started on this node, if an earlier owner may have answered directory
    /// questions and held sessions. For one directory lease after it, that owner's answers may
    /// still be in use anywhere. For one session lease after it, streams that were open may not
    /// have been renewed here yet: a shard that moved (or restarted) begins with no sessions and
    /// learns them from the gateways' renewals, so it cannot say where a user's streams are not,
    /// and the directory names every live gateway (an event that reaches a gateway without the
    /// user's stream is dropped there; one that reaches no gateway would be missing from the live
    /// stream until the next message of its conversation or a reconnect).
    private let startedAt: ContinuousClock.Instant?

    /// - Parameter startedAt: when this shard started on this node, if an earlier owner may have
    ///   answered directory questions and held sessions (nil: nobody has asked before, no stream
    ///   was open).
    public init(lease: Duration = .seconds(6), directoryLease: Duration = GatewayDirectory.lease, startedAt: ContinuousClock.Instant? = nil) {
        self.lease = lease
        self.directoryLease = directoryLease
        self.startedAt = startedAt
    }

    public func presence(of user: UserID) -> Presence {
        guard sessions[user]?.isEmpty == false else {
            return Presence(userId: user, status: .offline, lastSeenAt: lastSeen[user])
        }
        return Presence(userId: user, status: preferences[user] == .away ? .away : .online)
    }

    /// A stream opened. Returns the user's new presence if it changed (it came online).
    public mutating func sessionOpened(_ user: UserID, gateway: String, sessionID: String, now: ContinuousClock.Instant) -> Presence? {
        let before = presence(of: user).status
        let expiry = now.advanced(by: lease)
        sessions[user, default: [:]][sessionID] = Session(gateway: gateway, sessionID: sessionID, leaseExpiresAt: expiry)
        noExpiryBefore = min(noExpiryBefore ?? expiry, expiry)
        return changed(user, from: before)
    }

    /// What a renewal changed.
    public struct Renewal: Sendable, Equatable {
        /// The presences that changed.
        public var changes: [Presence] = []
        /// The sessions it opened again after this shard may have answered the directory without
        /// them: their lease ran out here, or, in a shard that moved, they were not renewed within
        /// its first lease. Events may have passed their streams by.
        public var lapsed: [String] = []
    }

    /// A gateway renews the leases of its open sessions. Unknown sessions (expired meanwhile, or
    /// held by the shard before it moved) are opened again, unless they were closed here.
    public mutating func renew(gateway: String, sessions renewed: [(user: UserID, sessionID: String)], now: ContinuousClock.Instant) -> Renewal {
        closed = closed.filter { $0.value > now }
        // Within its first lease a shard that moved names every live gateway for users it knows
        // no stream of, so a session it learns of then was passed by nothing.
        let presuming = startedAt.map { now < $0.advanced(by: lease) } ?? false
        var renewal = Renewal()
        for (user, sessionID) in renewed where closed[sessionID] == nil {
            if sessions[user]?[sessionID] == nil, !presuming { renewal.lapsed.append(sessionID) }
            if let change = sessionOpened(user, gateway: gateway, sessionID: sessionID, now: now) { renewal.changes.append(change) }
        }
        return renewal
    }

    /// A stream closed. Returns the new presence if the user went offline.
    public mutating func sessionClosed(_ user: UserID, sessionID: String, now: ContinuousClock.Instant, wallClock: Date) -> Presence? {
        let before = presence(of: user).status
        if let session = sessions[user]?[sessionID] { closed[sessionID] = session.leaseExpiresAt }
        sessions[user]?[sessionID] = nil
        if sessions[user]?.isEmpty == true {
            sessions[user] = nil
            lastSeen[user] = wallClock
        }
        return changed(user, from: before)
    }

    /// Drops sessions whose lease ran out (their gateway died); returns who went offline.
    public mutating func expireLeases(now: ContinuousClock.Instant, wallClock: Date) -> [Presence] {
        guard let first = noExpiryBefore, first <= now else { return [] }
        noExpiryBefore = nil
        var changes: [Presence] = []
        for (user, userSessions) in sessions {
            let live = userSessions.filter { $0.value.leaseExpiresAt > now }
            for session in live.values { noExpiryBefore = min(noExpiryBefore ?? session.leaseExpiresAt, session.leaseExpiresAt) }
            guard live.count != userSessions.count else { continue }
            if live.isEmpty {
                sessions[user] = nil
                lastSeen[user] = wallClock
                changes.append(presence(of: user))
            } else {
                sessions[user] = live
            }
        }
        return changes.sorted { $0.userId < $1.userId }
    }

    /// The user's preference (`online` or `away`); it shows only while a stream is open.
    public mutating func setPreference(_ user: UserID, _ status: PresenceStatus) throws(ChatError) -> Presence? {
        guard status != .offline else { throw ChatError(.invalidRequest, "status must be online or away") }
        let before = presence(of: user).status
        preferences[user] = status == .online ? nil : status
        return changed(user, from: before)
    }

    /// Which gateways hold the streams this shard knows of.
    public func gateways(of users: some Sequence<UserID>) -> [String: Set<UserID>] {
        var result: [String: Set<UserID>] = [:]
        for user in users {
            for session in sessions[user]?.values ?? [:].values {
                result[session.gateway, default: []].insert(user)
            }
        }
        return result
    }

    /// The fan-out directory's answer: ``gateways(of:)``, and for one lease after the shard started
    /// every gateway of `liveGateways` as well (streams it has not heard of yet). The users of
    /// whom it knows no stream are listed under ``presumedKey`` too: whether they are online is
    /// not known yet.
    public func gateways(of users: [UserID], now: ContinuousClock.Instant, liveGateways: [String]) -> [String: Set<UserID>] {
        var result = gateways(of: users)
        guard let startedAt, now < startedAt.advanced(by: lease) else { return result }
        let unknown = users.filter { sessions[$0]?.isEmpty ?? true }
        if !unknown.isEmpty, !liveGateways.isEmpty { result[Self.presumedKey] = Set(unknown) }
        for gateway in liveGateways { result[gateway, default: []].formUnion(users) }
        return result
    }

    /// Not a gateway (no node name holds `?`): in an answer, the users presumed to stream on every
    /// gateway only because the shard has just started.
    public static let presumedKey = "?presumed"


    /// True if `user` has a stream on `gateway`: a session opening there changes no directory answer.
    public func hasSession(of user: UserID, on gateway: String) -> Bool {
        sessions[user]?.values.contains { $0.gateway == gateway } ?? false
    }

    /// ``gateways(of:)`` for a node that will remember the answer for one directory lease.
    public mutating func gateways(
        of users: [UserID], heldBy holder: String, now: ContinuousClock.Instant, liveGateways: [String]
    ) -> [String: Set<UserID>] {
        let leaseEnd = now.advanced(by: directoryLease)
        for user in users { holders[user, default: [:]][holder] = leaseEnd }
        return gateways(of: users, now: now, liveGateways: liveGateways)
    }

    /// Who must forget what it remembers of `users` (whose streams are opening on a gateway their
    /// answer lacks) before the streams may count as open: the holders, and those still being told
    /// by an earlier invalidation until ``forgotten(_:by:leaseEnd:)`` says they were. The holders
    /// are dropped: whoever asks after this is answered with the new gateway.
    public mutating func directoryInvalidation(for users: [UserID], now: ContinuousClock.Instant) -> DirectoryInvalidation {
        var invalidation = DirectoryInvalidation()
        for user in users {
            var nodes = telling[user] ?? [:]
            for (node, leaseEnd) in holders.removeValue(forKey: user) ?? [:] { nodes[node] = max(nodes[node] ?? leaseEnd, leaseEnd) }
            nodes = nodes.filter { now < $0.value }
            telling[user] = nodes.isEmpty ? nil : nodes
            for (node, leaseEnd) in nodes {
                var holder = invalidation.holders[node] ?? .init(users: [], leaseEnd: leaseEnd)
                holder.users.append(user)
                holder.leaseEnd = max(holder.leaseEnd, leaseEnd)
                invalidation.holders[node] = holder
            }
        }
        if let unknownUntil = startedAt?.advanced(by: directoryLease), now < unknownUntil { invalidation.everyNodeUntil = unknownUntil }
        // Holders whose lease ran out need no word; drop them now and then.
        if holders.count > 4 * sessions.count + 1_000 {
            holders = holders.compactMapValues { nodes in
                let live = nodes.filter { now < $0.value }
                return live.isEmpty ? nil : live
            }
        }
        return invalidation
    }

    /// `node` forgot `users` (or needs no telling any more: it is dead, or its lease on them ended),
    /// as far as answers whose lease ends by `leaseEnd` go.
    public mutating func forgotten(_ users: [UserID], by node: String, leaseEnd: ContinuousClock.Instant) {
        for user in users {
            guard let end = telling[user]?[node], end <= leaseEnd else { continue }
            telling[user]?[node] = nil
            if telling[user]?.isEmpty == true { telling[user] = nil }
        }
    }

    private func changed(_ user: UserID, from before: PresenceStatus) -> Presence? {
        let after = presence(of: user)
        return after.status == before ? nil : after
    }
}

/// Who must forget directory answers before a stream opening on a new gateway counts as open.
public struct DirectoryInvalidation: Equatable, Sendable {
    public struct Holder: Equatable, Sendable {
        public var users: [UserID]
        /// When the last of its leases on them ends: if it cannot be told, wait until then.
        public var leaseEnd: ContinuousClock.Instant

        public init(users: [UserID], leaseEnd: ContinuousClock.Instant) {
            self.users = users
            self.leaseEnd = leaseEnd
        }
    }

    /// Nodes known to remember an answer about some of the users.
    public var holders: [String: Holder] = [:]
    /// Set while an earlier owner's answers may be in use: every node must be told of every user,
    /// or this instant waited for.
    public var everyNodeUntil: ContinuousClock.Instant?

    public var isEmpty: Bool { holders.isEmpty && everyNodeUntil == nil }
}
