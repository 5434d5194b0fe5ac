import Foundation
import ParleyModel
import Testing

@Suite struct ClientMessageIDTests {
    /// The IDs the clients make are UUIDs (what the gateway accepts), version 7, whose text sorts by
    /// the millisecond they were made in, and never repeat.
    @Test func clientMessageIDsAreTimeOrderedVersion7UUIDs() {
        let start = Date(timeIntervalSince1970: 1_795_000_000.123)
        var made: [String] = []
        var random = SystemRandomNumberGenerator()
        // Two milliseconds apart (IDs made within one millisecond are in random order among themselves).
        for step in 0..<1_000 { made.append(ClientMessageID.make(now: start.addingTimeInterval(Double(2 * step) / 1000), using: &random)) }
        for id in made {
            #expect(UUID(uuidString: id) != nil, "\(id) is not a UUID")
            #expect(id.count == 36 && id == id.lowercased())
            let characters = Array(id)
            #expect(characters[14] == "7", "\(id): version")
            #expect("89ab".contains(characters[19]), "\(id): variant")
        }
        let sorted = made == made.sorted()
        #expect(sorted, "IDs made in later milliseconds sort later")
        #expect(Set(made).count == made.count)
        // The first 48 bits are the Unix milliseconds.
        let millis = UInt64(made[0].replacingOccurrences(of: "-", with: "").prefix(12), radix: 16)
        #expect(millis == 1_795_000_000_123)
    }
}
