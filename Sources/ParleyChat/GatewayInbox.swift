import Distributed
import ParleyCluster

/// Where conversation owners deliver events for the streams a gateway node holds: one pinned
/// actor per gateway, at the well-known ID `gateway-inbox/events@<gateway>`. Each conversation
/// delivers to it through one ordered path, so a conversation's events arrive in order.
public distributed actor GatewayInbox {
    public typealias ActorSystem = ClusterSystem
    /// Receives each batch of deliveries, in the order a conversation sent them.
    public typealias Handler = @Sendable ([EventDelivery]) async -> Void

    public static let kind = "gateway-inbox"

    private let handler: Handler

    public static func id(gateway: String) -> ClusterActorID {
        ClusterActorID(kind: kind, key: "events", node: gateway)
    }

    /// Opens this node's inbox. Keep the returned actor alive for as long as the node serves streams.
    public static func open(on system: ClusterSystem, handler: @escaping Handler) -> GatewayInbox {
        system.makePinned(kind: kind, key: "events") { GatewayInbox(handler: handler, actorSystem: system) }
    }

    init(handler: @escaping Handler, actorSystem: ClusterSystem) {
        self.actorSystem = actorSystem
        self.handler = handler
    }

    public distributed func deliver(_ deliveries: [EventDelivery]) async {
        await handler(deliveries)
    }
}
