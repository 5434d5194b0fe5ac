import ParleyModel
import ParleyCluster
import ParleyTestKit
import Testing

@Suite struct HashRingTests {
    static let keys = (0..<100_000).map { "conversation/\($0)" }

    /// A brute-force model: for each probe, scan every point for the nearest one clockwise.
    static func naiveOwner(_ ring: HashRing, key: String) -> String? {
        let points = ring.pointsWithOwners
        guard !points.isEmpty else { return nil }
        let hash = StableHash.hash(key)
        var best: (distance: UInt64, index: Int)?
        for probe in 0..<ring.settings.probes {
            let position = probe == 0 ? hash : StableHash.mix(hash &+ UInt64(probe) &* 0x9e37_79b9_7f4a_7c15)
            var nearest: (distance: UInt64, index: Int)?
            for (index, point) in points.enumerated() {
                let distance = point.point &- position
                if nearest == nil || distance < nearest!.distance { nearest = (distance, index) }
            }
            if let nearest, best == nil || nearest.distance < best!.distance || (nearest.distance == best!.distance && nearest.index < best!.index) {
                best = nearest
            }
        }
        return best.map { points[$0.index].worker }
    }

    @Test func stableHashIsPinned() {
        // These values must never change: every node of every version must agree on placement.
        // (Computed independently with a Python FNV-1a + fmix64.)
        #expect(StableHash.hash("") == 0xefd0_1f60_ba99_2926)
        #expect(StableHash.hash("a") == 0x82a2_a958_a9be_ce5b)
        #expect(StableHash.hash("conversation/8f3a") == 0x7c68_b8d0_14a8_3192)
        #expect(StableHash.hash("worker-1#0") == 0x563c_8b67_f7cd_6e19)
    }

    @Test(arguments: [0, 1, 2, 3, 4, 5, 6, 7])
    func keysSpreadWithinTenPercent(nameSet: Int) {
        let workers = nameSet == 0 ? (1...5).map { "worker-\($0)" } : (1...5).map { "node-\(nameSet)-\($0 * 7919)" }
        let ring = HashRing(workers: workers)
        var counts: [String: Int] = [:]
        for key in Self.keys { counts[ring.owner(of: key)!, default: 0] += 1 }
        let mean = Double(Self.keys.count) / 5
        for worker in workers {
            let deviation = abs(Double(counts[worker] ?? 0) - mean) / mean
            #expect(deviation <= 0.10, "\(worker) holds \(counts[worker] ?? 0) keys, \(Int(deviation * 100)) % off the mean \(Int(mean))")
        }
    }

    @Test func addingASixthWorkerMovesAboutASixthAndOnlyToIt() {
        let five = HashRing(workers: (1...5).map { "worker-\($0)" })
        let six = HashRing(workers: (1...6).map { "worker-\($0)" })
        var moved = 0
        for key in Self.keys {
            let before = five.owner(of: key)!, after = six.owner(of: key)!
            if before != after {
                moved += 1
                #expect(after == "worker-6", "\(key) moved from \(before) to \(after), not to the new worker")
            }
        }
        let fraction = Double(moved) / Double(Self.keys.count)
        #expect(abs(fraction - 1.0 / 6) < 0.03, "moved \(fraction), expected about 1/6")
    }

    @Test func removingAWorkerMovesOnlyItsKeys() {
        let five = HashRing(workers: (1...5).map { "worker-\($0)" })
        let four = HashRing(workers: ["worker-1", "worker-2", "worker-4", "worker-5"])
        for key in Self.keys.prefix(20_000) {
            let before = five.owner(of: key)!
            if before != "worker-3" { #expect(four.owner(of: key) == before) }
        }
    }

    @Test func sameMembersInAnyOrderGiveTheSameRing() {
        var random = SeededRandom(seed: 42)
        let workers = (1...7).map { "w\($0)" }
        let reference = HashRing(workers: workers)
        for _ in 0..<5 {
            let shuffled = HashRing(workers: workers.shuffled(using: &random) + ["w3"])  // duplicates too
            #expect(shuffled == reference)
            for key in Self.keys.prefix(2_000) { #expect(shuffled.owner(of: key) == reference.owner(of: key)) }
        }
    }

    @Test(arguments: [UInt64(1), 2, 3])
    func lookupMatchesBruteForce(seed: UInt64) {
        var random = SeededRandom(seed: seed)
        let count = Int.random(in: 1...6, using: &random)
        let ring = HashRing(workers: (0..<count).map { "n\($0)-\(random.next() % 1000)" }, settings: .init(virtualNodes: 16, probes: 1 + Int(seed)))
        for _ in 0..<300 {
            let key = "k\(random.next())"
            #expect(ring.owner(of: key) == Self.naiveOwner(ring, key: key), "seed \(seed), key \(key)")
        }
    }

    @Test func emptyRingHasNoOwner() {
        #expect(HashRing(workers: []).owner(of: "x") == nil)
    }
}
