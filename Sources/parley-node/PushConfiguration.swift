import ArgumentParser
import Foundation
import Logging
import ParleyChat
import ParleyCluster
import ParleyModel
import ParleyPush

/// `parley-node run`'s push provider options, checked: which providers a worker sends through.
struct PushConfiguration {
    var apns: APNsProvider.Configuration?
    var fcm: FCMProvider.Configuration?
    var preview: PushPreview
    var window: Duration

    /// Nil when no provider is given; throws for a provider given in part, or a key file that
    /// cannot be read.
    init?(
        apnsKey: String?, apnsKeyID: String?, apnsTeamID: String?, apnsTopic: String?, apnsTopics: String?, apnsURL: String?, apnsSandboxURL: String?,
        fcmServiceAccount: String?, fcmURL: String?, fcmTokenURL: String?, trustRoots: String?, preview: String?, window: Duration?
    ) throws {
        if let apnsKey {
            guard let apnsKeyID, let apnsTeamID else {
                throw ValidationError("--apns-key needs --apns-key-id and --apns-team-id (both on the Apple Developer account's Keys and Membership pages)")
            }
            let pem: String
            do {
                pem = try String(contentsOfFile: apnsKey, encoding: .utf8)
            } catch {
                throw ValidationError("cannot read the APNs key \(apnsKey): \(error.localizedDescription)")
            }
            var apns = APNsProvider.Configuration(privateKeyPEM: pem, keyID: apnsKeyID, teamID: apnsTeamID, defaultTopic: apnsTopic)
            if let apnsTopics {
                let topics = apnsTopics.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                for topic in topics {
                    do {
                        try NewDevice(platform: .apns, token: String(repeating: "0", count: 64), topic: topic).validate()
                    } catch {
                        throw ValidationError("--apns-topics: \(topic) is not a bundle ID (1–255 of A-Z a-z 0-9 . - _)")
                    }
                }
                apns.otherTopics = Set(topics)
            }
            if let apnsURL { apns.productionURL = try Self.serverURL(apnsURL, flag: "--apns-url") }
            if let apnsSandboxURL { apns.sandboxURL = try Self.serverURL(apnsSandboxURL, flag: "--apns-sandbox-url") }
            apns.trustRoots = trustRoots
            self.apns = apns
        } else if apnsKeyID != nil || apnsTeamID != nil {
            throw ValidationError("--apns-key-id and --apns-team-id need --apns-key, the .p8 file")
        }
        if let fcmServiceAccount {
            let account: FCMProvider.ServiceAccount
            do {
                account = try JSONDecoder().decode(FCMProvider.ServiceAccount.self, from: Data(contentsOf: URL(fileURLWithPath: fcmServiceAccount)))
            } catch {
                throw ValidationError("cannot read the FCM service account \(fcmServiceAccount) (the JSON key file the Firebase console gives): \(error)")
            }
            var fcm = FCMProvider.Configuration(account: account)
            if let fcmURL { fcm.endpoint = try Self.serverURL(fcmURL, flag: "--fcm-url") }
            if let fcmTokenURL { fcm.tokenURL = try Self.serverURL(fcmTokenURL, flag: "--fcm-token-url") }
            fcm.trustRoots = trustRoots
            self.fcm = fcm
        }
        guard apns != nil || fcm != nil else { return nil }
        let previewText = preview ?? PushPreview.full.rawValue
        guard let preview = PushPreview(rawValue: previewText) else {
            throw ValidationError("--push-preview '\(previewText)' must be one of \(PushPreview.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        self.preview = preview
        self.window = window ?? PushPlanner.Policy().window
    }

    /// An https URL without a trailing slash.
    private static func serverURL(_ text: String, flag: String) throws -> String {
        guard let url = URL(string: text), url.scheme == "https", url.host?.isEmpty == false else {
            throw ValidationError("\(flag) '\(text)' must be an https URL")
        }
        return text.hasSuffix("/") ? String(text.dropLast()) : text
    }

    /// The providers, made: throws when a key is not one the provider takes.
    func settings(clock: any ClusterClock, logger: Logger) throws -> PushSettings {
        var providers: [PushPlatform: any PushProvider] = [:]
        if let apns {
            do {
                providers[.apns] = try APNsProvider(apns, clock: clock, logger: logger)
            } catch {
                throw ValidationError("the APNs provider cannot start: \(error) (the key must be a P-256 private key in PEM, a .p8 file)")
            }
        }
        if let fcm {
            do {
                providers[.fcm] = try FCMProvider(fcm, clock: clock, logger: logger)
            } catch {
                throw ValidationError("the FCM service account's private_key is not an RSA private key in PEM: \(error)")
            }
        }
        var policy = PushPlanner.Policy()
        policy.window = window
        return PushSettings(providers: providers, preview: preview, policy: policy, apnsTopics: apns?.allowedTopics)
    }
}
