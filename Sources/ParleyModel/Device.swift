import Foundation

public enum DeviceIDKind: IdentifierKind { public static let prefix = "d_" }
/// A registered device's ID.
public typealias DeviceID = Identifier<DeviceIDKind>

/// The push service a device is reached through.
public enum PushPlatform: String, Hashable, Sendable, Codable, CaseIterable {
    /// Apple Push Notification service (iOS, iPadOS, macOS, watchOS apps).
    case apns
    /// Firebase Cloud Messaging (Android, and apps that send through Firebase).
    case fcm
}

/// Which APNs servers a device's token belongs to: a development build's tokens are valid only
/// on the sandbox servers.
public enum APNsEnvironment: String, Hashable, Sendable, Codable, CaseIterable {
    case production, sandbox
}

/// A device that gets push notifications for its user, as API.md serves it.
public struct Device: Hashable, Sendable, Codable {
    public var id: DeviceID
    public var platform: PushPlatform
    /// The push service's token for this app on this device.
    public var token: String
    /// APNs: the app's bundle ID (the `apns-topic`); nil: the node's configured topic.
    public var topic: String?
    /// APNs only: production (the default) or sandbox.
    public var environment: APNsEnvironment?
    public var createdAt: Date

    public init(id: DeviceID, platform: PushPlatform, token: String, topic: String? = nil, environment: APNsEnvironment? = nil, createdAt: Date) {
        self.id = id
        self.platform = platform
        self.token = token
        self.topic = topic
        self.environment = environment
        self.createdAt = createdAt
    }
}

/// A device with what only the server keeps: whose it is, and the login (token ID) that
/// registered it, whose logout removes it.
public struct StoredDevice: Hashable, Sendable, Codable {
    public var device: Device
    public var userId: UserID
    public var tokenId: String

    public init(device: Device, userId: UserID, tokenId: String) {
        self.device = device
        self.userId = userId
        self.tokenId = tokenId
    }
}

/// `POST /v1/devices`: a device to register, checked by ``validate()`` before it is stored.
public struct NewDevice: Hashable, Sendable, Codable {
    public var platform: PushPlatform
    public var token: String
    public var topic: String?
    public var environment: APNsEnvironment?

    public init(platform: PushPlatform, token: String, topic: String? = nil, environment: APNsEnvironment? = nil) {
        self.platform = platform
        self.token = token
        self.topic = topic
        self.environment = environment
    }

    /// APNs device tokens: hex digits, an even count (32 bytes today; Apple says their length may
    /// change, so 8–200 bytes are taken). FCM registration tokens: 1–4,096 visible ASCII
    /// characters. A topic: a bundle ID, 1–255 of `A-Z a-z 0-9 . - _`. An environment only for APNs.
    public func validate() throws(ChatError) {
        switch platform {
        case .apns:
            let hex = token.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"): true
                default: false
                }
            }
            guard hex, token.utf8.count.isMultiple(of: 2), (16...400).contains(token.utf8.count) else {
                throw ChatError(.invalidRequest, "token: an APNs device token is 16–400 hex digits, an even number of them")
            }
        case .fcm:
            guard (1...4096).contains(token.utf8.count), token.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
                throw ChatError(.invalidRequest, "token: an FCM registration token is 1–4,096 visible ASCII characters")
            }
            guard environment == nil else { throw ChatError(.invalidRequest, "environment: only APNs devices have one") }
        }
        if let topic {
            let allowed = topic.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "_"): true
                default: false
                }
            }
            guard allowed, (1...255).contains(topic.utf8.count) else {
                throw ChatError(.invalidRequest, "topic: a bundle ID, 1–255 of A-Z a-z 0-9 . - _")
            }
        }
    }
}
