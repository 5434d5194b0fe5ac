import Distributed
import Logging
import ParleyCluster
import ParleyModel

/// Where conversation owners deliver events for the streams a gateway node holds, and where
/// users' actors tell the gateway of revoked tokens: one pinned actor per gateway, at the
/// well-known ID `gateway-inbox/events@<gateway>`. Each conversation delivers to it through one
/// ordered path, so a conversation's events arrive in order.
public distributed actor GatewayInbox {
    public typealias ActorSystem = ClusterSystem
    /// Receives each batch of deliveries, in the order a conversation sent them.
    public typealias Handler = @Sendable ([EventDelivery]) async -> Void
    /// Receives revoked tokens, which the gateway must stop accepting before it returns.
    public typealias RevocationHandler = @Sendable (Revocation) -> Void

    /// Tokens that stop working.
    public enum Revocation: Hashable, Sendable {
        /// These token IDs.
        case tokens([String])
        /// Every token of a user but one (the password changed through it), or all of them: also
        /// those no session names, whose IDs nobody knows.
        case user(UserID, except: String?)
    }

    public static let kind = "gateway-inbox"

    private let handler: Handler
    private let revocationHandler: RevocationHandler

    public static func id(gateway: String) -> ClusterActorID {
        ClusterActorID(kind: kind, key: "events", node: gateway)
    }

    /// Opens this node's inbox. Keep the returned actor alive for as long as the node serves streams.
    public static func open(
        on system: ClusterSystem, revocations: @escaping RevocationHandler = { _ in }, handler: @escaping Handler
    ) -> GatewayInbox {
        // Deliveries, on every message's path, run without the runtime's lookup of the method.
        system.registerDirect(deliverTarget, of: GatewayInbox.self) { inbox, deliveries in try await inbox.deliver(deliveries) }
        return system.makePinned(kind: kind, key: "events") {
            GatewayInbox(handler: handler, revocationHandler: revocations, actorSystem: system)
        }
    }

    /// ``deliver(_:)``'s name on the cluster (its distributed thunk's mangled name; a test checks
    /// it against a real call).
    public static let deliverTarget = "$s10ParleyChat12GatewayInboxC7deliveryySayAA13EventDeliveryVGYaKFTE"

    init(handler: @escaping Handler, revocationHandler: @escaping RevocationHandler, actorSystem: ClusterSystem) {
        self.actorSystem = actorSystem
        self.handler = handler
        self.revocationHandler = revocationHandler
    }

    public distributed func deliver(_ deliveries: [EventDelivery]) async {
        await handler(deliveries)
    }

    /// These tokens were revoked: the gateway stops accepting them before this returns.
    public distributed func revoked(_ tokenIds: [String]) {
        revocationHandler(.tokens(tokenIds))
    }

    /// Every token of `user` but `except` was revoked: the gateway stops accepting them before this returns.
    public distributed func revokedAll(of user: UserID, except tokenId: String?) {
        revocationHandler(.user(user, except: tokenId))
    }

    /// Tells every gateway of the cluster that these tokens were revoked, waiting for the answers
    /// until `leasesEnd` at most (a gateway's answer matters only while it may still hold a
    /// lease). False if a gateway the membership knows (and does not know dead) said no or could
    /// not be reached before then.
    public static func announceRevocation(
        of tokenIds: [String], leasesEnd: ContinuousClock.Instant, using system: ClusterSystem
    ) async -> Bool {
        await announce(.tokens(tokenIds), leasesEnd: leasesEnd, using: system)
    }

    /// Tells every gateway of the cluster of a revocation, as ``announceRevocation(of:leasesEnd:using:)`` does.
    public static func announce(_ revocation: Revocation, leasesEnd: ContinuousClock.Instant, using system: ClusterSystem) async -> Bool {
        let gateways = system.members.filter { $0.roles.contains(.gateway) && !$0.status.isTerminal }.map(\.id.name)
        return await withTaskGroup(of: Bool.self) { group in
            for gateway in gateways {
                group.addTask {
                    let told = await untilDeadline(leasesEnd, on: system.clock) { () -> Bool in
                        do {
                            let inbox = try resolve(id: id(gateway: gateway), using: system)
                            switch revocation {
                            case .tokens(let tokenIds): try await inbox.revoked(tokenIds)
                            case .user(let user, let except): try await inbox.revokedAll(of: user, except: except)
                            }
                            return true
                        } catch {
                            system.logger.warning("a gateway was not told of a revoked token; waiting for its lease to run out", metadata: [
                                "gateway": "\(gateway)", "error": "\(error)",
                            ])
                            return false
                        }
                    }
                    // No answer by the end of the leases: nothing it remembers is valid any more.
                    return told ?? true
                }
            }
            return await group.reduce(true) { $0 && $1 }
        }
    }
}
