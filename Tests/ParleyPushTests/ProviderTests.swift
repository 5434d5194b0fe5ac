import Crypto
import Foundation
import NIOHTTP1
import ParleyChat
import ParleyModel
import Testing
import _CryptoExtras

@testable import ParleyPush

@Suite struct JWTTests {
    func parts(_ token: String) throws -> (header: [String: Any], claims: [String: Any], signed: Data, signature: Data) {
        let pieces = token.split(separator: ".").map(String.init)
        try #require(pieces.count == 3)
        func decode(_ text: String) throws -> Data {
            var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
            return try #require(Data(base64Encoded: base64))
        }
        #expect(!token.contains("=") && !token.contains("+") && !token.contains("/"), "base64url without padding")
        let header = try #require(try JSONSerialization.jsonObject(with: decode(pieces[0])) as? [String: Any])
        let claims = try #require(try JSONSerialization.jsonObject(with: decode(pieces[1])) as? [String: Any])
        return (header, claims, Data("\(pieces[0]).\(pieces[1])".utf8), try decode(pieces[2]))
    }

    @Test func anES256TokenCarriesItsKeyIDAndVerifiesAsRAndS() throws {
        let key = P256.Signing.PrivateKey()
        let token = try JWT.sign(claims: ["iss": "TEAM123456", "iat": 1_800_000_000], keyID: "KEY1234567", with: .es256(key))
        let (header, claims, signed, signature) = try parts(token)
        #expect(header["alg"] as? String == "ES256" && header["kid"] as? String == "KEY1234567")
        #expect(claims["iss"] as? String == "TEAM123456" && claims["iat"] as? Int == 1_800_000_000)
        #expect(signature.count == 64, "JWS ES256 is r || s, not DER")
        let parsed = try P256.Signing.ECDSASignature(rawRepresentation: signature)
        #expect(key.publicKey.isValidSignature(parsed, for: signed))
        #expect(!P256.Signing.PrivateKey().publicKey.isValidSignature(parsed, for: signed), "another key's signature")
    }

    @Test func anRS256AssertionVerifiesWithPKCS1v15() throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let token = try JWT.sign(claims: ["iss": "pusher@example.iam.gserviceaccount.com", "aud": "https://oauth2.googleapis.com/token"], keyID: nil, with: .rs256(key))
        let (header, claims, signed, signature) = try parts(token)
        #expect(header["alg"] as? String == "RS256" && header["kid"] == nil)
        #expect(claims["aud"] as? String == "https://oauth2.googleapis.com/token")
        #expect(key.publicKey.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: signed, padding: .insecurePKCS1v1_5))
    }
}

@Suite struct ProviderWireTests {
    @Test func retryAfterReadsSecondsAndHTTPDates() {
        #expect(PushHTTP.retryAfter(nil, now: Date()) == nil)
        #expect(PushHTTP.retryAfter("120", now: Date()) == .seconds(120))
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let date = Date(timeIntervalSince1970: 1_800_000_030)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        #expect(PushHTTP.retryAfter(formatter.string(from: date), now: now) == .seconds(30))
        #expect(PushHTTP.retryAfter("soon", now: Date()) == nil)
        #expect(PushHTTP.retryAfter("99999999", now: Date()) == .seconds(86_400), "capped at a day")
    }

    @Test func aStatusWithoutAMoreSpecificMeaningIsRetriedOrRefused() {
        #expect(PushHTTP.outcome(status: 429, retryAfter: "7", reason: "TooManyRequests", now: Date()) == .retry(after: .seconds(7), reason: "429 TooManyRequests"))
        #expect(PushHTTP.outcome(status: 503, retryAfter: nil, reason: "Shutdown", now: Date()) == .retry(after: nil, reason: "503 Shutdown"))
        #expect(PushHTTP.outcome(status: 413, retryAfter: nil, reason: "PayloadTooLarge", now: Date()) == .refused("413 PayloadTooLarge"))
    }

    @Test func theAPNsPayloadIsWhatAppleDocuments() throws {
        let content = PushContent(title: "trio", subtitle: "3 new messages", body: "Ann: hi", badge: 4, conversationId: "c_1", seq: 9)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(APNsProvider.payload(content))) as? [String: Any])
        let aps = try #require(json["aps"] as? [String: Any])
        #expect(aps["alert"] as? [String: String] == ["title": "trio", "subtitle": "3 new messages", "body": "Ann: hi"])
        #expect(aps["badge"] as? Int == 4 && aps["thread-id"] as? String == "c_1" && aps["sound"] as? String == "default")
        #expect(json["conversationId"] as? String == "c_1" && json["seq"] as? Int == 9)
        let plain = PushContent(title: nil, subtitle: nil, body: "New message", badge: 1, conversationId: "c_1", seq: 1)
        let alert = try #require((try JSONSerialization.jsonObject(with: Data(APNsProvider.payload(plain))) as? [String: Any])?["aps"] as? [String: Any])
        #expect(alert["alert"] as? [String: String] == ["body": "New message"], "absent fields are left out")
        // Whatever the text holds stays one JSON string.
        let tricky = PushContent(title: "a \"quoted\" \\ name", subtitle: nil, body: "line\nbreak\ttab \u{1} 🎉 שלום", badge: 0, conversationId: "c_2", seq: 2)
        let decoded = try #require((try JSONSerialization.jsonObject(with: Data(APNsProvider.payload(tricky))) as? [String: Any])?["aps"] as? [String: Any])
        #expect(decoded["alert"] as? [String: String] == ["title": tricky.title ?? "", "body": tricky.body])
    }

    @Test func aCollapseIDIsAtMost64Bytes() {
        #expect(APNsProvider.collapseID("c_short") == "c_short")
        let long = ConversationID(rawValue: "d_" + String(repeating: "u", count: 40) + "_" + String(repeating: "v", count: 40))
        let id = APNsProvider.collapseID(long)
        #expect(id.utf8.count == 64 && id == APNsProvider.collapseID(long) && id != APNsProvider.collapseID(ConversationID(rawValue: long.rawValue + "x")))
    }
}

@Suite struct PushContentTests {
    let message = Message(conversationId: "c_1", seq: 7, senderId: "u_ann", clientMessageId: "m", text: "see you at eight", sentAt: Date())

    @Test func thePreviewSettingDecidesWhatLeavesTheCluster() {
        func content(_ kind: ConversationKind, _ count: Int, _ preview: PushPreview) -> PushContent {
            PushContent(latest: message, count: count, kind: kind, conversationName: kind == .group ? "climbing" : nil, senderName: "Ann", badge: 3, preview: preview)
        }
        #expect(content(.direct, 1, .full) == PushContent(title: "Ann", subtitle: nil, body: "see you at eight", badge: 3, conversationId: "c_1", seq: 7))
        #expect(content(.group, 2, .full) == PushContent(title: "climbing", subtitle: "2 new messages", body: "Ann: see you at eight", badge: 3, conversationId: "c_1", seq: 7))
        #expect(content(.group, 1, .sender) == PushContent(title: "climbing", subtitle: nil, body: "New message from Ann", badge: 3, conversationId: "c_1", seq: 7))
        #expect(content(.direct, 4, .sender) == PushContent(title: "Ann", subtitle: nil, body: "4 new messages", badge: 3, conversationId: "c_1", seq: 7))
        #expect(content(.group, 1, .none) == PushContent(title: nil, subtitle: nil, body: "New message", badge: 3, conversationId: "c_1", seq: 7))
        for preview in [PushPreview.sender, .none] {
            #expect(![content(.group, 1, preview).body, content(.direct, 2, preview).body].contains { $0.contains("eight") }, "\(preview) leaks the text")
        }
    }

    @Test func aMessageOfFilesAloneIsToldByWhatTheyAre() {
        func file(_ type: String) -> ParleyModel.Attachment {
            ParleyModel.Attachment(media: Media(id: .make(), contentType: type, size: 1, sha256: String(repeating: "0", count: 64), createdAt: Date(millisecondsSince1970: 0)))
        }
        var photos = message
        photos.text = ""
        photos.attachments = [file("image/heic"), file("image/jpeg"), file("image/png")]
        #expect(PushContent(latest: photos, count: 1, kind: .group, conversationName: "climbing", senderName: "Ann", badge: 1, preview: .full).body
            == "Ann: Photo and 2 more")
        for (type, said) in [("video/mp4", "Video"), ("audio/mp4", "Voice message"), ("application/pdf", "File")] {
            photos.attachments = [file(type)]
            #expect(PushContent(latest: photos, count: 1, kind: .direct, conversationName: nil, senderName: "Ann", badge: 1, preview: .full).body == said)
        }
        photos.text = "the summit"
        #expect(PushContent(latest: photos, count: 1, kind: .direct, conversationName: nil, senderName: "Ann", badge: 1, preview: .full).body == "the summit",
                "a text says itself")
    }

    @Test func aMentionSaysSoWhateverThePreviewShows() {
        func content(_ kind: ConversationKind, _ preview: PushPreview, mentioned: Bool = true, of message: Message? = nil) -> PushContent {
            PushContent(
                latest: message ?? self.message, count: 2, kind: kind, conversationName: "climbing", senderName: "Ann", badge: 1, preview: preview, mentioned: mentioned)
        }
        #expect(content(.group, .full) == PushContent(title: "climbing", subtitle: "Ann mentioned you", body: "Ann: see you at eight", badge: 1, conversationId: "c_1", seq: 7))
        #expect(content(.direct, .sender).body == "Ann mentioned you")
        #expect(content(.group, .none).body == "You were mentioned")
        #expect(content(.group, .full, mentioned: false).subtitle == "2 new messages")
        #expect(content(.group, .full, of: message.deletedTombstone(by: "u_ann")).subtitle == "2 new messages", "a deleted message mentions nobody")
    }

    @Test func aLongTextIsCutToItsFirst200Characters() {
        var long = message
        long.text = String(repeating: "𝄞", count: 4_000)
        let content = PushContent(latest: long, count: 1, kind: .direct, conversationName: nil, senderName: "Ann", badge: 1, preview: .full)
        #expect(content.body == String(repeating: "𝄞", count: 200) + "…")
    }
}
