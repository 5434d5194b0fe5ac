import Hummingbird
import ParleyChat
import ParleyModel

extension Gateway {
    /// The caller's devices, for push notifications.
    func addDeviceRoutes(to v1: RouterGroup<GatewayContext>) {
        let devices = v1.authenticated(by: self)
        devices.post("devices") { request, context in
            let caller = context.caller
            let body = try await self.decode(API.DeviceRegistration.self, from: request)
            let registered = try await UserActor.resolve(caller.id, using: self.system).registerDevice(try body.newDevice(), tokenId: caller.claims.tokenId)
            return try Self.json(API.DeviceBody(device: registered.device), status: registered.created ? .created : .ok)
        }
        devices.get("devices") { request, context in
            try Self.json(API.Devices(devices: try await UserActor.resolve(context.caller.id, using: self.system).devices()))
        }
        devices.delete("devices/:id") { request, context in
            let id = DeviceID(rawValue: try context.parameters.require("id"))
            try await UserActor.resolve(context.caller.id, using: self.system).removeDevice(id)
            return Response(status: .noContent)
        }
    }
}
