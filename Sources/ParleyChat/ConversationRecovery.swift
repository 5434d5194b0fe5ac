import Foundation
import Logging
import ParleyCluster
import ParleyModel
import ParleyStore

/// The messages an owner acknowledged but never handed to the gateways.
///
/// An owner that dies (or is cut off) between committing a message and publishing it leaves it
/// durable and acknowledged, but off its members' live streams until the conversation's next
/// message (the streams fill the gap) or a reconnect (the resume replays it). When the ring loses
/// workers, each node takes the conversations it now owns that one of them owned and that were
/// active within ``window``, activates them, and has them publish their recent messages again;
/// streams drop a seq they already sent.
///
/// A worker that comes onto the ring — started, restarted, or back as a new incarnation after it
/// was declared down — does the same for every recently active conversation it owns: a worker
/// killed and started again before failure detection noticed keeps its name on the ring, so no
/// other node sees an owner depart, and its new process holds none of what the old one had not
/// handed on.
///
/// So does a worker that formed a cluster of its own (restarted while every other worker was down,
/// it met no seed) when it meets the cluster that was there all along and its gateways, and one
/// up in a cluster with no gateway (every worker restarted while the gateways lived on) when it
/// meets the gateways: what it published meanwhile went to no stream (cluster simulation seeds
/// 677 and 8999).
public enum ConversationRecovery {
    /// How far back a departed owner's commits may still be unpublished: failure detection (~2 s)
    /// and the ring change, with room to spare.
    static let window: Duration = .seconds(10)
    /// The most conversations one ring change looks at.
    static let conversationsMax = 10_000

    static func register(on system: ClusterSystem, store: any ChatStore, window: Duration = ConversationRecovery.window, webhooks: Bool = false) {
        system.onRingChange { ring, previous in
            let departed = takenOver(ring: ring.workers, previous: previous.workers)
            let me = system.settings.name
            let joined = ring.workers.contains(me) && !previous.workers.contains(me)
            guard joined || !departed.isEmpty else { return }
            let now = system.clock.wallNow
            Task {
                await republishTakenOver(
                    from: departed, joined: joined, ring: ring, previous: previous, system: system, store: store, now: now, window: window)
                if webhooks {
                    await resumeWebhooks(from: departed, joined: joined, ring: ring, previous: previous, system: system, store: store, now: now, window: window)
                }
            }
        }
        system.onMerge { members in
            let gateways = members.filter { $0.roles.contains(.gateway) }.map(\.id.name)
            guard !gateways.isEmpty else { return }
            let ring = system.ring
            let now = system.clock.wallNow
            Task {
                await republishTakenOver(
                    from: [], joined: true, ring: ring, previous: ring, system: system, store: store, now: now, window: window,
                    metGateways: gateways)
            }
        }
    }

    /// Has the conversations this node took over (as in ``republishTakenOver``) whose owner owed
    /// push notifications when it last said so owe them again: an owner that died while a
    /// provider kept failing may have owed them for longer than ``window``. Returns how many.
    static func resumePushes(
        from departed: Set<String>, joined: Bool, ring: HashRing, previous: HashRing, system: ClusterSystem, store: any ChatStore, anyOwner: Bool
    ) async -> Int {
        let owing: [(conversation: ConversationID, from: Int64)]
        do {
            owing = try await store.conversationsOwingPushes(limit: conversationsMax)
        } catch {
            system.logger.warning("cannot find the conversations owing push notifications after the ring changed: \(error)")
            return 0
        }
        var resumed = 0
        for (conversation, from) in owing {
            guard anyOwner || tookOver(conversation, from: departed, joined: joined, ring: ring, previous: previous, system: system) else { continue }
            do {
                if try await ConversationActor.resolve(conversation, using: system).resumePushes(from: from) > 0 { resumed += 1 }
            } catch {
                system.logger.warning("cannot resume the push notifications owed in \(conversation): \(error)")
            }
        }
        return resumed
    }

    /// Activates the conversations this node took over whose owner owed webhook endpoints events
    /// when it last stored their cursors, or that changed within ``window`` (an owner that died
    /// may not have stored that yet): each starts delivering from its cursors. Returns how many
    /// owe something.
    @discardableResult
    static func resumeWebhooks(
        from departed: Set<String>, joined: Bool, ring: HashRing, previous: HashRing, system: ClusterSystem, store: any ChatStore, now: Date,
        window: Duration
    ) async -> Int {
        var candidates: Set<ConversationID> = []
        do {
            candidates.formUnion(try await store.conversationsOwingWebhooks(limit: conversationsMax))
            let since = now.addingTimeInterval(-Double(window.components.seconds))
            candidates.formUnion(try await store.recentlyChangedConversations(since: since, limit: conversationsMax))
            candidates.formUnion(try await store.recentlyActiveConversations(since: since, limit: conversationsMax))
        } catch {
            system.logger.warning("cannot find the conversations owing webhooks after the ring changed: \(error)")
            return 0
        }
        var owing = 0
        for conversation in candidates.sorted() {
            guard tookOver(conversation, from: departed, joined: joined, ring: ring, previous: previous, system: system) else { continue }
            do {
                if try await ConversationActor.resolve(conversation, using: system).resumeWebhooks() > 0 { owing += 1 }
            } catch {
                system.logger.warning("cannot resume the webhooks of \(conversation): \(error)")
            }
        }
        if owing > 0 {
            system.logger.info("resumed the webhooks owed in conversations taken over", metadata: [
                "ring.departed": "\(departed.sorted())", "joined": "\(joined)", "conversations": "\(owing)",
            ])
        }
        return owing
    }

    /// Whether this node owns `conversation` on `ring` and took it over: it owned nothing before
    /// (`joined`), or one of `departed` owned it on `previous`.
    private static func tookOver(
        _ conversation: ConversationID, from departed: Set<String>, joined: Bool, ring: HashRing, previous: HashRing, system: ClusterSystem
    ) -> Bool {
        let key = ConversationActor.id(conversation).placementKey
        guard ring.owner(of: key) == system.settings.name else { return false }
        return joined || previous.owner(of: key).map(departed.contains) == true
    }

    /// The workers whose conversations this node takes over: those that left the ring — unless
    /// this node kept no more than half of a ring of three or more, when it is more likely the one
    /// cut off than the survivor of the others' deaths (taking their conversations would only fence
    /// off their real owners for a retry). A lone survivor of two cannot tell, and takes over.
    public static func takenOver(ring: [String], previous: [String]) -> Set<String> {
        let departed = Set(previous).subtracting(ring)
        guard !departed.isEmpty else { return [] }
        if previous.count >= 3 && ring.count * 2 <= previous.count { return [] }
        return departed
    }

    /// Has the conversations this node took over from `departed` (owned by one of them on
    /// `previous`, by this node on `ring`) — or, when this node has just `joined` the ring, every
    /// conversation it owns; or, when it met the `metGateways` of a cluster it had formed apart
    /// from (and so owned every conversation alone), every recently active conversation, through
    /// whichever node owns it now — publish their messages of the last ``window`` again; returns
    /// how many messages went out again.
    @discardableResult
    static func republishTakenOver(
        from departed: Set<String>, joined: Bool = false, ring: HashRing, previous: HashRing, system: ClusterSystem, store: any ChatStore, now: Date,
        window: Duration = ConversationRecovery.window, metGateways: [String]? = nil
    ) async -> Int {
        guard window > .zero else { return 0 }
        let since = now.addingTimeInterval(-Double(window.components.seconds))
        let candidates: [ConversationID]
        do {
            // Active: messages; changed: members, name or erasures, which go out again too.
            let active = try await store.recentlyActiveConversations(since: since, limit: conversationsMax)
            let changed = try await store.recentlyChangedConversations(since: since, limit: conversationsMax)
            let seen = Set(active)
            candidates = active + changed.filter { !seen.contains($0) }
        } catch {
            system.logger.warning("cannot find the conversations to republish after the ring lost \(departed.sorted()): \(error)")
            return 0
        }
        var conversations = 0
        var messages = 0
        for conversation in candidates {
            guard metGateways != nil || tookOver(conversation, from: departed, joined: joined, ring: ring, previous: previous, system: system) else { continue }
            do {
                let actor = try ConversationActor.resolve(conversation, using: system)
                // A conversation taken over publishes its recent messages as it activates; one met
                // gateways were left out of was active already, and publishes them again now.
                messages += try await metGateways == nil ? actor.takenOver() : actor.republishRecent(since: since)
                conversations += 1
            } catch {
                system.logger.warning("cannot republish the recent messages of \(conversation): \(error)")
            }
        }
        let resumed = await resumePushes(from: departed, joined: joined, ring: ring, previous: previous, system: system, store: store, anyOwner: metGateways != nil)
        if resumed > 0 {
            system.logger.info("resumed the push notifications owed in conversations taken over", metadata: [
                "ring.departed": "\(departed.sorted())", "joined": "\(joined)", "conversations": "\(resumed)",
            ])
        }
        if conversations > 0, let metGateways {
            system.logger.info("republished recent messages: this node met gateways that were up all along while it decided without them", metadata: [
                "gateways": "\(metGateways)", "conversations": "\(conversations)", "messages": "\(messages)",
            ])
        } else if conversations > 0 {
            system.logger.info("republished recent messages of conversations taken over", metadata: [
                "ring.departed": "\(departed.sorted())", "joined": "\(joined)", "conversations": "\(conversations)", "messages": "\(messages)",
            ])
        }
        return messages
    }
}
