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

    /// The check of a `clientMessageId` accepts what Foundation's UUID parser accepts, but for one
    /// quirk of Foundation on Linux: it parses each group with `sscanf`, which skips whitespace and
    /// takes a sign at the start of a group, so it takes `" 193a0c1-…"` or `"0193a0c1--f3e-…"`.
    /// Those are not UUIDs, and API.md refuses anything else with `400`.
    @Test func theCheckAcceptsWhatFoundationsUUIDParserAcceptsButSignsAndSpaces() {
        var candidates = [
            "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d", "0193A0C1-7F3E-7B2A-9C4D-1E2F3A4B5C6D", "00000000-0000-0000-0000-000000000000",
            "ffffffff-ffff-ffff-ffff-ffffffffffff", "", "x", "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6", "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d0",
            "0193a0c1f7f3e-7b2a-9c4d-1e2f3a4b5c6d", "0193a0c1-7f3e-7b2a-9c4d1e2f3a4b5c6d0", "0193a0c17f3e7b2a9c4d1e2f3a4b5c6d",
            "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6g", "g193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d", " 193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d",
            "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6 ", "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6\u{0}", "0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5cé",
            "{0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d}", "0193a0c1_7f3e_7b2a_9c4d_1e2f3a4b5c6d", "+193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d",
        ]
        // Every single-byte change of a valid ID, over all of ASCII.
        let valid = Array("0193a0c1-7f3e-7b2a-9c4d-1e2f3a4b5c6d".utf8)
        for position in [0, 7, 8, 9, 13, 18, 23, 35] {
            for byte in UInt8(1)...0x7F {
                var changed = valid
                changed[position] = byte
                candidates.append(String(decoding: changed, as: UTF8.self))
            }
        }
        let groupStarts = [0, 9, 14, 19, 24]
        var accepted = 0, quirks = 0
        for candidate in candidates {
            let bytes = Array(candidate.utf8)
            let quirk = bytes.count == 36 && groupStarts.contains { " \t\n\u{0B}\u{0C}\r+-".utf8.contains(bytes[$0]) }
            let foundation = UUID(uuidString: candidate) != nil
            #expect(ClientMessageID.isValid(candidate) == (foundation && !quirk), "\(candidate.debugDescription): Foundation says \(foundation)")
            if foundation && !quirk { accepted += 1 }
            if foundation && quirk { quirks += 1 }
        }
        #expect(accepted > 50, "the candidates include valid IDs of either case")
        #expect(quirks > 0, "the candidates include what only Foundation's sscanf takes")
    }
}
