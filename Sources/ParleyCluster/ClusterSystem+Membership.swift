import Logging
import Metrics
import Synchronization

extension ClusterSystem {
    /// One membership heartbeat: time passes in the state machine, then its directives are carried
    /// out, connections to live peers are kept, and seeds are dialed while this node is alone.
    func tick() {
        let (directives, peers, dialSeeds, former) = state.withLock { state -> ([MembershipDirective], [Member], Bool, [NodeAddress]) in
            guard !state.isShutDown else { return ([], [], false, []) }
            state.ticks += 1
            let directives = state.membership.tick(now: clock.now)
            let peers = state.membership.livePeers
            // Seeds are dialed while joining or alone, and every 10th tick anyway, so that two
            // groups that formed apart (seeds that started at once) find each other.
            let dialSeeds = state.membership.me.status == .joining || peers.isEmpty || state.ticks % 10 == 0
            let former = state.membership.me.status == .joining ? state.membership.formerPeerAddresses : []
            return (directives, peers, dialSeeds, former)
        }
        perform(directives)
        let connected = Set(transport.connectedPeers)
        for peer in peers where !connected.contains(peer.name) {
            transport.connect(to: peer.address, node: peer.name)
        }
        if dialSeeds {
            let myAddress = address
            for seed in settings.seeds where seed != myAddress {
                transport.connect(to: seed, node: nil)
            }
            for peer in former where !settings.seeds.contains(peer) && peer != myAddress {
                transport.connect(to: peer, node: nil)
            }
        }
    }

    /// Carries out membership directives: gossip goes out, changes are logged, the ring is rebuilt.
    func perform(_ directives: [MembershipDirective]) {
        var membershipChanged = false
        var merged: [Member] = []
        for directive in directives {
            switch directive {
            case .gossip(let gossip, to: .everyone):
                transport.broadcast(.gossip(gossip))
            case .gossip(let gossip, to: .peers(let names)):
                for name in names { try? transport.sendWithoutWaiting(.gossip(gossip), to: name) }
            case .selfUp(let formed):
                membershipChanged = true
                state.withLock { $0.mergeWatch.selfUp(formed: formed, me: $0.membership.me, view: $0.membership.view) }
                logger.info(
                    formed ? "formed the cluster: no up member answered within \(settings.membership.formClusterAfter)" : "joined the cluster",
                    metadata: ["member.status": "up"])
            case .selfPaused(let pause):
                logger.warning("this node was paused; peers' failure timers restarted", metadata: ["pause": "\(pause)"])
            case .selfDowned(let me):
                membershipChanged = true
                state.withLock { $0.mergeWatch.selfDowned() }
                rejoin(after: me)
            case .selfReplaced(let newer):
                logger.error("a newer process with this node's name exists; this one is stale", metadata: ["member.newer": "\(newer)"])
            case .memberJoined(let member):
                membershipChanged = true
                logger.info("member joined", metadata: ["member": "\(member)"])
                if state.withLock({ $0.mergeWatch.joined(member) }) { merged.append(member) }
            case .memberUp(let member):
                membershipChanged = true
                state.withLock { $0.mergeWatch.up(member) }
                logger.info("member up", metadata: ["member": "\(member)"])
            case .memberSuspected(let member, let silence):
                logger.warning("member suspected", metadata: ["member": "\(member)", "silence": "\(silence)"])
            case .memberReachable(let member):
                logger.info("member reachable again", metadata: ["member": "\(member)"])
            case .memberDowned(let member, let silence):
                membershipChanged = true
                logger.warning("member down", metadata: [
                    "member": "\(member)", "decided.by": "\(silence.map { "this node after \($0) of silence" } ?? "gossip")",
                ])
                failCalls(to: member.name, because: "node \(member.id) was declared down")
            case .memberLeft(let member):
                membershipChanged = true
                logger.info("member left", metadata: ["member": "\(member)"])
            case .memberReplaced(let old, let new):
                membershipChanged = true
                logger.info("member restarted", metadata: ["member.old": "\(old.id)", "member": "\(new)"])
                failCalls(to: new.name, because: "node \(old.id) was replaced by \(new.id)")
            }
        }
        state.withLock { $0.mergeWatch.settle() }
        if membershipChanged { updateRing() }
        if !merged.isEmpty {
            logger.warning("this node met members that were up all along while it decided things without them", metadata: [
                "members.met": "\(merged.map(\.id))",
            ])
            for handler in state.withLock({ $0.mergeHandlers }) { handler(merged) }
        }
    }

    /// Rebuilds the ring when the set of `up` workers changed, and lets go of actors it moved away.
    func updateRing() {
        // Deactivated actors are released after the lock: their deinit calls back into the system.
        let (changed, ring, previous, movedAway, handlers) = state.withLock {
            state -> (Bool, HashRing, HashRing, [LocalActor], [@Sendable (HashRing, HashRing) -> Void]) in
            let workers = state.forcedRingWorkers.map { Array(Set($0)).sorted() } ?? state.membership.ringWorkers
            guard workers != state.ring.workers else { return (false, state.ring, state.ring, [], []) }
            let previous = state.ring
            state.ring = HashRing(workers: workers, settings: settings.ring)
            let moved = state.local.keys.filter { $0.isVirtual && state.ring.owner(of: $0.placementKey) != settings.name }
            return (true, state.ring, previous, moved.compactMap { state.local.removeValue(forKey: $0) }, state.ringChangeHandlers)
        }
        guard changed else { return }
        Self.ringWorkers.record(ring.workers.count)
        logger.info("ring changed", metadata: [
            "ring.workers": "\(ring.workers)", "actors.deactivated": "\(movedAway.count)",
        ])
        _ = consume movedAway  // released before the handlers run (their deinit calls back into the system)
        for handler in handlers { handler(ring, previous) }
    }

    /// The cluster declared this incarnation down (it was paused or cut off): its actors may have
    /// moved, so it drops them all and comes back as a new incarnation.
    private func rejoin(after me: Member) {
        let incarnation = max(me.id.incarnation + 1, settings.incarnations())
        let (identity, dropped, newSelf, handlers) = state.withLock { state in
            state.membership.rejoin(incarnation: incarnation, now: clock.now)
            let dropped = state.local.filter { $0.key.isVirtual }
            state.local = state.local.filter { !$0.key.isVirtual }
            return (
                PeerIdentity(id: state.membership.me.id, roles: settings.roles, address: state.address), Array(dropped.values),
                state.membership.me, state.rejoinHandlers
            )
        }
        _ = consume dropped  // released here, outside the lock (their deinit calls resignID)
        logger.warning("this node was declared down; rejoining as a new incarnation", metadata: [
            "node.incarnation.old": "\(me.id.incarnation)", "node.incarnation": "\(incarnation)",
        ])
        transport.updateIdentity(identity)
        for handler in handlers { handler(newSelf) }
    }

    func failCalls(to peer: String, because reason: String) {
        let lost = state.withLock { $0.calls.removeAll(peer: peer) }
        for (_, slot) in lost {
            slot.complete(.error(ClusterCallError(code: .connectionLost, message: reason)))
        }
    }

    static let ringWorkers = Gauge(label: "parley.ring.workers")
}

extension ClusterSystem {
    public func transport(received message: ClusterMessage, from peer: PeerIdentity) {
        switch message {
        case .gossip(let gossip):
            let directives = state.withLock { $0.membership.gossipReceived(gossip, now: clock.now) }
            perform(directives)
        case .reply(let reply):
            state.withLock { $0.calls.complete(reply.callID) }?.complete(reply.outcome)
        case .call(let envelope):
            receiveCall(envelope, from: peer)
        }
    }

    public func transport(connectedTo peer: PeerIdentity) {
        logger.debug("connected", metadata: ["peer": "\(peer.id)", "peer.address": "\(peer.address)"])
        // Greet with our member list at once: a joining node needs it to become up.
        let gossip = state.withLock { $0.membership.gossip }
        try? transport.sendWithoutWaiting(.gossip(gossip), to: peer.id.name)
    }

    public func transport(disconnectedFrom peer: PeerIdentity) {
        logger.debug("disconnected", metadata: ["peer": "\(peer.id)"])
        failCalls(to: peer.id.name, because: "the connection to \(peer.id) closed")
    }

    private func receiveCall(_ envelope: CallEnvelope, from peer: PeerIdentity) {
        let respond: @Sendable (ReplyEnvelope.Outcome) -> Void = { [transport] outcome in
            do {
                try transport.sendWithoutWaiting(.reply(ReplyEnvelope(callID: envelope.callID, outcome: outcome)), to: peer.id.name)
            } catch ClusterTransportError.frameTooLarge(_, let bytes) {
                // The caller hears why, instead of waiting out its deadline.
                let error = ClusterCallError(code: .serialization, message: "the reply of \(envelope.recipient) encodes to \(bytes) bytes, over the cluster's frame limit")
                try? transport.sendWithoutWaiting(.reply(ReplyEnvelope(callID: envelope.callID, outcome: .error(error))), to: peer.id.name)
            } catch {
                // Not connected: the caller's connection-closed handling or deadline answers it.
            }
        }
        if envelope.recipient.isVirtual {
            let owner = state.withLock { $0.ring.owner(of: envelope.recipient.placementKey) }
            guard owner == settings.name else {
                respond(.error(ClusterCallError(
                    code: .notOwner,
                    message: "\(settings.name) does not own \(envelope.recipient); its ring says \(owner ?? "nobody")")))
                return
            }
        }
        // A call that waited past its caller's deadline (an overloaded node) is not started: the
        // caller has given up on it and may be retrying elsewhere.
        let deadline = clock.now.advanced(by: envelope.timeout)
        // On the loop the call was read on, where its reply will be written (see
        // `EventLoopTaskExecutor`).
        Task(executorPreference: transport.currentLoopExecutor) { [self] in
            guard clock.now < deadline else {
                respond(.error(ClusterCallError(code: .deadlineExceeded, message: "\(settings.name) reached the call after its deadline")))
                return
            }
            let answer = await execute(
                envelope.recipient, target: envelope.target, arguments: ClusterInvocationDecoder(serialization: serialization, arguments: envelope.arguments))
            respond(answer.encoded(with: serialization))
        }
    }
}
