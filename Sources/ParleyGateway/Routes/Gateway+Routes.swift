import Hummingbird

extension Gateway {
    /// Every route of the client port, API.md's in `/v1`. A route that needs a caller is added to
    /// a group made by ``RouterMethods/authenticated(by:writes:fresh:)``, and gets the caller
    /// from its ``AuthenticatedContext``.
    func addRoutes(to router: Router<GatewayContext>) {
        let v1 = router.group("v1")
        addAccountRoutes(to: v1)
        addDeviceRoutes(to: v1)
        addMediaRoutes(to: v1)
        addConversationRoutes(to: v1)
        addMessageRoutes(to: v1)
        addSendStreamRoutes(to: v1)
        addPresenceRoutes(to: v1)
        v1.authenticated(by: self).get("events") { request, context in try await self.events(request, context) }
        addOperatorRoutes(to: v1)
        addPublicRoutes(to: router)
    }
}
