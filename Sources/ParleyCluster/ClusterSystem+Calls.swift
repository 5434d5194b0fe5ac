import Distributed
import Logging
import Metrics
import ParleyModel
import Synchronization

extension ClusterSystem {
    /// Routes a call to the owner of `id` and waits for its outcome, for at most the call timeout.
    ///
    /// Retried within the deadline, because the call certainly did not run: no worker up yet, no
    /// connection to the owner yet, or the owner answered `not_owner` (its ring moved first).
    /// Not retried: a call that was sent and then lost its connection (it may have run). Nor
    /// anything, inside ``retriedByCaller(_:)``: that caller's own loop retries.
    func call(_ id: ClusterActorID, target: String, arguments: ClusterArguments) async -> CallAnswer {
        let started = clock.now
        let deadline = started.advanced(by: Self.longCallTimeout ?? settings.callTimeout)
        var failures = 0
        var lastProblem = ClusterCallError(code: .unavailable, message: "no worker is up to own \(id)")
        if let node = id.node, node != settings.name, !isLiveMember(node) {
            // A pinned actor on a node the cluster does not know (or knows dead): no waiting.
            Self.callFailures.increment()
            return .outcome(.error(ClusterCallError(code: .unavailable, message: "node \(node), the host of \(id), is not a live member")))
        }
        // Encoded once, by the first attempt that sends the call to another node.
        var encoded: [[UInt8]]?
        while true {
            if let owner = owner(of: id) {
                let outcome = await attempt(id, target: target, arguments: arguments, encoded: &encoded, owner: owner, deadline: deadline)
                switch outcome {
                case .sent(let answer):
                    guard case .outcome(.error(let error)) = answer, error.code == .notOwner else {
                        Self.calls.increment()
                        return answer
                    }
                    lastProblem = error
                case .notSent(let problem):
                    lastProblem = problem
                }
            }
            let now = clock.now
            guard now < deadline, !state.withLock({ $0.isShutDown }), !Self.callerRetries else {
                Self.callFailures.increment()
                if lastProblem.code == .notOwner || lastProblem.code == .unavailable {
                    return .outcome(.error(ClusterCallError(code: lastProblem.code, message: "\(lastProblem.message) (gave up after \(started.duration(to: now)))")))
                }
                return .outcome(.error(lastProblem))
            }
            failures += 1
            try? await clock.sleep(until: min(now.advanced(by: Self.callRetry.delay(afterFailures: failures)), deadline))
        }
    }

    /// Between attempts of a call that certainly did not run: short, since an owner that was not
    /// up yet, or a ring that had not moved yet, is usually ready within milliseconds.
    public static let callRetry = Backoff(first: .milliseconds(2), max: .milliseconds(100))

    /// Runs `body` with each call it makes attempted once: a call that did not run fails at once
    /// (`unavailable`, `not_owner`) instead of being retried within the call timeout, for a
    /// caller whose own loop retries every failure (a gateway's send), so that one loop, not two
    /// nested, decides when to try again.
    public static func retriedByCaller<T>(_ body: () async throws -> T) async rethrows -> T {
        try await $callerRetries.withValue(true, operation: body)
    }

    @TaskLocal static var callerRetries = false

    /// Runs `body` with each call it makes given `timeout` instead of the call timeout: for a call
    /// that does long work before it answers (an account's deletion, erasing a large
    /// conversation), whose caller waits for it. A callee that dies still fails the call at once.
    public static func withCallTimeout<T>(_ timeout: Duration, _ body: () async throws -> T) async rethrows -> T {
        try await $longCallTimeout.withValue(timeout, operation: body)
    }

    @TaskLocal static var longCallTimeout: Duration?

    enum Attempt {
        case sent(CallAnswer)
        case notSent(ClusterCallError)
    }

    private func attempt(
        _ id: ClusterActorID, target: String, arguments: ClusterArguments, encoded: inout [[UInt8]]?, owner: String, deadline: Instant
    ) async -> Attempt {
        if owner == settings.name {
            // The arguments and the result pass as values, as in a call to a local actor: no
            // encoding, no decoding (serialization was 5 % of a one-node cluster's instructions
            // per message, docs/BENCHMARKS.md). The calls the actor makes in turn (and the tasks
            // it starts) are its own, retried as usual, not its caller's.
            if Self.callerRetries {
                return .sent(await Self.$callerRetries.withValue(false) { await execute(id, target: target, arguments: ClusterInvocationDecoder(arguments)) })
            }
            return .sent(await execute(id, target: target, arguments: ClusterInvocationDecoder(arguments)))
        }
        let bytes: [[UInt8]]
        if let encoded {
            bytes = encoded
        } else {
            do throws(ClusterCallError) {
                bytes = try arguments.encoded(with: serialization)
            } catch {
                // No retry can encode it.
                return .sent(.outcome(.error(error)))
            }
            encoded = bytes
        }
        let remaining = clock.now.duration(to: deadline)
        let slot = ReplySlot()
        let (callID, parkedLoop) = state.withLock { state -> (UInt64, CheckedContinuation<Void, Never>?) in
            let callID = state.calls.makeCallID()
            state.calls.register(callID, peer: owner, deadline: deadline, pending: slot)
            return (callID, state.deadlineLoopParked.take())
        }
        parkedLoop?.resume()
        let envelope = CallEnvelope(callID: callID, recipient: id, target: target, arguments: bytes, timeout: remaining)
        do {
            try await transport.send(.call(envelope), to: owner, deadline: deadline)
        } catch ClusterTransportError.frameTooLarge(_, let bytes) {
            // No retry can make it smaller.
            _ = state.withLock { $0.calls.complete(callID) }
            return .sent(.outcome(.error(ClusterCallError(code: .serialization, message: "the call to \(id) encodes to \(bytes) bytes, over the cluster's frame limit"))))
        } catch {
            _ = state.withLock { $0.calls.complete(callID) }
            if let address = state.withLock({ $0.membership.member(named: owner)?.address }) {
                transport.connect(to: address, node: owner)
            }
            return .notSent(ClusterCallError(code: .unavailable, message: "cannot reach \(owner), the owner of \(id): \(error)"))
        }
        return .sent(.outcome(await slot.wait()))
    }

    /// Runs a call on this node and returns what it answered.
    func execute(_ recipient: ClusterActorID, target: String, arguments: ClusterInvocationDecoder) async -> CallAnswer {
        let actor: any DistributedActor
        do {
            actor = try await activeActor(for: recipient)
        } catch {
            return .outcome(.error(ClusterCallError(converting: error)))
        }
        var decoder = arguments
        let answer = Mutex<CallAnswer?>(nil)
        let handler = ClusterResultHandler { result in answer.withLock { $0 = result } }
        let direct = directTargets.withLock { targets -> DirectTarget? in
            guard let index = targets.index(forKey: target) else { return nil }
            targets.values[index].calls += 1
            return targets.values[index].run
        }
        do {
            if let direct {
                try await direct(actor, &decoder, handler)
            } else {
                try await executeDistributedTarget(
                    on: actor, target: RemoteCallTarget(target), invocationDecoder: &decoder, handler: handler)
            }
        } catch {
            // The target could not be invoked at all (unknown method, undecodable arguments).
            return .outcome(.error(ClusterCallError(code: .serialization, message: "cannot invoke \(recipient): \(error)")))
        }
        // The handler has answered by the time the target returns (both paths await it).
        return answer.withLock { $0 } ?? .outcome(.error(ClusterCallError(code: .serialization, message: "\(recipient) ran \(target) without answering")))
    }

    /// The local actor for `id`, activating a virtual actor through its kind's factory. Concurrent
    /// first calls share one activation.
    func activeActor(for id: ClusterActorID) async throws -> any DistributedActor {
        enum Found {
            case active(any DistributedActor)
            case pinned(WeakActor)
            case activating(Task<any DistributedActor, any Error>)
        }
        let found = try state.withLock { state -> Found in
            switch state.local[id] {
            case .virtual(let actor):
                state.lastUsed[id] = clock.now
                return .active(actor)
            case .pinned(let box): return .pinned(box)  // loaded outside the lock (see activeActorIDs)
            case nil: break
            }
            guard id.isVirtual else {
                throw ClusterCallError(code: .actorNotFound, message: "no actor \(id) on \(settings.name)")
            }
            if let task = state.activations[id] { return .activating(task) }
            guard let factory = state.factories[id.kind] else {
                throw ClusterCallError(code: .actorNotFound, message: "no factory for actor kind '\(id.kind)' on \(settings.name)")
            }
            let task = Task<any DistributedActor, any Error> { [self] in
                let actor = try await Self.$activatingID.withValue(id) { try await factory(id, self) }
                guard (actor.id as? ClusterActorID) == id else {
                    throw ClusterCallError(code: .actorNotFound, message: "the factory for '\(id.kind)' made an actor with another ID")
                }
                return actor
            }
            state.activations[id] = task
            return .activating(task)
        }
        switch found {
        case .active(let actor):
            return actor
        case .pinned(let box):
            guard let actor = box.actor else {
                throw ClusterCallError(code: .actorNotFound, message: "actor \(id) on \(settings.name) is gone")
            }
            return actor
        case .activating(let task):
            defer {
                state.withLock { state in
                    state.activations[id] = nil
                    state.lastUsed[id] = clock.now
                }
            }
            let actor = try await task.value
            logger.debug("actor activated", metadata: ["actor.id": "\(id)"])
            return actor
        }
    }

    /// Deactivates virtual actors not called for `passivateAfter`.
    /// Lets the virtual actor `actor` go now rather than after ``ClusterSettings/passivateAfter``:
    /// one that holds nothing (an ID that names nothing) should cost nothing to be asked about.
    /// Only that very instance goes; a newer activation under the same ID stays.
    public func passivate(_ actor: some DistributedActor) {
        guard let id = actor.id as? ClusterActorID else { return }
        let released = state.withLock { state -> LocalActor? in
            guard case .virtual(let held) = state.local[id], ObjectIdentifier(held) == ObjectIdentifier(actor) else { return nil }
            state.lastUsed[id] = nil
            return state.local.removeValue(forKey: id)
        }
        _ = consume released  // released outside the lock
    }

    func passivateIdleActors() {
        let now = clock.now
        let idle = state.withLock { state -> [LocalActor] in
            let ids = state.lastUsed.filter { $0.value.duration(to: now) >= settings.passivateAfter }.map(\.key)
            var released: [LocalActor] = []
            for id in ids {
                state.lastUsed[id] = nil
                if let actor = state.local.removeValue(forKey: id) { released.append(actor) }
            }
            return released
        }
        if !idle.isEmpty { logger.debug("passivated idle actors", metadata: ["actors.count": "\(idle.count)"]) }
        _ = consume idle  // released outside the lock
    }

    /// True if `name` is a member that is neither down nor gone.
    public func isLiveMember(_ name: String) -> Bool {
        guard let member = state.withLock({ $0.membership.member(named: name) }) else { return false }
        return !member.status.isTerminal
    }


    /// Returns once a call waits for a reply (at once if one does), or the task is cancelled.
    func untilCallsWait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Checked under the lock that the cancellation handler takes too: either it finds
                // the continuation parked, or this sees the task cancelled.
                let resumeNow = state.withLock { state -> Bool in
                    guard state.calls.count == 0, !state.isShutDown, !Task.isCancelled else { return true }
                    state.deadlineLoopParked = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.deadlineLoopParked.take() }?.resume()
        }
    }

    /// Fails calls whose deadline passed.
    func expireCalls() {
        let expired = state.withLock { $0.calls.expire(now: clock.now) }
        for (callID, slot) in expired {
            slot.complete(.error(ClusterCallError(code: .deadlineExceeded, message: "no reply to call \(callID) within \(settings.callTimeout)")))
        }
    }

    static let calls = Counter(label: "parley.rpc.calls")
    static let callFailures = Counter(label: "parley.rpc.failures")
}
