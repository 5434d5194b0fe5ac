import Metrics
import ParleyCluster
import Synchronization

/// Parcels for one destination merged into one send while another send to it is in flight: at
/// most one send per destination at a time, carrying what queued up meanwhile, in the order it
/// queued (up to `sendMax` items, at least one parcel). Pure: the shell sends what it returns and
/// reports ``finished(_:)``.
public struct CoalescingStateMachine<Destination: Hashable & Sendable, Parcel: Sendable>: Sendable {
    public enum Action {
        case none
        /// Send these parcels in one go, then report ``finished(_:)``.
        case send(Destination, [Parcel])
    }

    /// Items (a parcel counts as its size) per send, unless one parcel alone is larger.
    public let sendMax: Int
    private var queued: [Destination: [(parcel: Parcel, size: Int)]] = [:]
    private var sending: Set<Destination> = []

    public init(sendMax: Int) {
        precondition(sendMax > 0, "sendMax \(sendMax) must be positive")
        self.sendMax = sendMax
    }

    /// Parcels waiting for the send in flight to `destination` to end.
    public func waiting(for destination: Destination) -> Int { queued[destination]?.count ?? 0 }

    public mutating func enqueue(_ parcel: Parcel, size: Int, to destination: Destination) -> Action {
        guard sending.insert(destination).inserted else {
            queued[destination, default: []].append((parcel, size))
            return .none
        }
        return .send(destination, [parcel])
    }

    /// The send to `destination` ended (whatever its outcome): the next one, with everything queued.
    public mutating func finished(_ destination: Destination) -> Action {
        guard var waiting = queued.removeValue(forKey: destination), !waiting.isEmpty else {
            sending.remove(destination)
            return .none
        }
        var taken = 0
        var total = 0
        while taken < waiting.count, taken == 0 || total + waiting[taken].size <= sendMax {
            total += waiting[taken].size
            taken += 1
        }
        let parcels = waiting.prefix(taken).map(\.parcel)
        waiting.removeFirst(taken)
        if !waiting.isEmpty { queued[destination] = waiting }
        return .send(destination, parcels)
    }
}

/// The node's deliveries to each gateway's inbox. Every conversation of the node hands its batches
/// here (one batch in flight per conversation and gateway, see ``DeliveryStateMachine``); while a
/// call to a gateway is on its way, what other conversations hand over for it waits and then goes
/// in one call. Under load that is one call per gateway per round trip instead of one per
/// conversation batch. A conversation never has two batches in one call (its next batch waits for
/// the outcome of the one before), so its events still arrive in order; a failed call fails every
/// batch in it, and each conversation retries its own.
final class GatewayCourier: Sendable {
    typealias Send = @Sendable (_ gateway: String, _ deliveries: [EventDelivery]) async throws -> Void

    private struct Parcel: Sendable {
        var deliveries: [EventDelivery]
        var delivered: OneShot<Bool>
    }

    private let send: Send
    private let loopExecutor: @Sendable () -> (any TaskExecutor)?
    /// How long a call may take before it fails: every delivery's outcome is known by then.
    let callTimeout: Duration
    private let machine: Mutex<CoalescingStateMachine<String, Parcel>>

    /// - Parameters:
    ///   - sendMax: bytes (estimated, ``EventDelivery/estimatedBytes``) per call, unless one
    ///     conversation's batch alone is larger: a call is one frame, under the frame limit.
    ///   - loopExecutor: the event loop the calling thread runs, if any (see ``preferredExecutor``).
    init(
        sendMax: Int = 1 << 20, loopExecutor: @escaping @Sendable () -> (any TaskExecutor)? = { nil },
        callTimeout: Duration = .seconds(5), send: @escaping Send
    ) {
        self.send = send
        self.loopExecutor = loopExecutor
        self.callTimeout = callTimeout
        self.machine = Mutex(CoalescingStateMachine(sendMax: sendMax))
    }

    convenience init(system: ClusterSystem) {
        self.init(loopExecutor: { system.currentLoopExecutor }, callTimeout: system.settings.callTimeout) { gateway, deliveries in
            try await GatewayInbox.resolve(id: GatewayInbox.id(gateway: gateway), using: system).deliver(deliveries)
        }
    }

    /// What a task started for deliveries prefers: the event loop the calling thread runs (after
    /// a commit, the loop of the call that sent the message), where the delivery call is written
    /// and its answer read — no wakeup of the cooperative pool, and back, per delivery.
    var preferredExecutor: (any TaskExecutor)? { loopExecutor() }

    /// Delivers `deliveries` to `gateway`'s inbox, possibly in one call with other conversations'
    /// batches; true when that call succeeded.
    func deliver(_ deliveries: [EventDelivery], to gateway: String) async -> Bool {
        let parcel = Parcel(deliveries: deliveries, delivered: OneShot())
        // Nothing on its way to this gateway: the call is made from this task, without a hop.
        let size = deliveries.reduce(0) { $0 + $1.estimatedBytes }
        if case .send(let gateway, let parcels) = machine.withLock({ $0.enqueue(parcel, size: size, to: gateway) }) {
            await carry(parcels, to: gateway)
        }
        return await parcel.delivered.wait()
    }

    /// Batches waiting for the call in flight to `gateway` (for tests).
    func waiting(for gateway: String) -> Int { machine.withLock { $0.waiting(for: gateway) } }

    private func carry(_ parcels: [Parcel], to gateway: String) async {
        Self.batchesPerCall.record(parcels.count)
        let delivered: Bool
        do {
            try await send(gateway, parcels.count == 1 ? parcels[0].deliveries : parcels.flatMap(\.deliveries))
            delivered = true
        } catch {
            delivered = false
        }
        let next = machine.withLock { $0.finished(gateway) }
        for parcel in parcels { parcel.delivered.complete(delivered) }
        if case .send(let gateway, let more) = next {
            Task(executorPreference: preferredExecutor) { [self] in await carry(more, to: gateway) }
        }
    }

    /// Conversation batches per call to a gateway's inbox.
    static let batchesPerCall = Recorder(label: "parley.fanout.batches_per_call")
}
