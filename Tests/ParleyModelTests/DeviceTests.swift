import ParleyModel
import Testing

/// What `POST /v1/devices` takes: the tokens each push service issues, and nothing else.
@Suite struct DeviceTests {
    static func refused(_ device: NewDevice) -> Bool {
        do {
            try device.validate()
            return false
        } catch {
            return error.code == .invalidRequest
        }
    }

    @Test func apnsTokensAreEvenRunsOfHexDigits() throws {
        try NewDevice(platform: .apns, token: String(repeating: "0a", count: 32)).validate()
        try NewDevice(platform: .apns, token: String(repeating: "AB", count: 100), topic: "com.example.Chat-App_2", environment: .sandbox).validate()
        for token in ["", "abc", String(repeating: "ab", count: 7), String(repeating: "ab", count: 201), String(repeating: "g0", count: 32),
                      String(repeating: "ab", count: 31) + " a", String(repeating: "ab", count: 31) + "é"] {
            #expect(Self.refused(NewDevice(platform: .apns, token: token)), "\(token)")
        }
    }

    @Test func fcmTokensAreVisibleASCIIWithoutAnEnvironment() throws {
        try NewDevice(platform: .fcm, token: "dQw4w9WgXcQ:APA91bH-very_long~token").validate()
        for token in ["", "has space", "tab\t", "ünicode", String(repeating: "x", count: 4097)] {
            #expect(Self.refused(NewDevice(platform: .fcm, token: token)), "\(token)")
        }
        #expect(Self.refused(NewDevice(platform: .fcm, token: "ok", environment: .production)))
    }

    @Test func topicsAreBundleIDs() {
        for topic in ["", "com.example/app", "com example", String(repeating: "a", count: 256)] {
            #expect(Self.refused(NewDevice(platform: .apns, token: String(repeating: "ab", count: 32), topic: topic)), "\(topic)")
        }
    }

    @Test func theRegistrationBodyNamesUnknownPlatformsAndEnvironments() throws {
        #expect(try API.DeviceRegistration(platform: "fcm", token: "t").newDevice() == NewDevice(platform: .fcm, token: "t"))
        #expect(throws: ChatError(.invalidRequest, "platform must be apns or fcm")) { try API.DeviceRegistration(platform: "APNS", token: "t").newDevice() }
        #expect(throws: ChatError(.invalidRequest, "environment must be production or sandbox")) {
            try API.DeviceRegistration(platform: "apns", token: "ab", environment: "dev").newDevice()
        }
    }
}
