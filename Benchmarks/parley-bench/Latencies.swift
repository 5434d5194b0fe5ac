import Foundation

/// Durations collected by a benchmark, summarized as percentiles.
struct Latencies {
    private(set) var samples: [Duration] = []

    mutating func record(_ duration: Duration) { samples.append(duration) }
    mutating func merge(_ other: Latencies) { samples += other.samples }

    /// The `p`th percentile (nil without samples).
    func percentile(_ p: Int) -> Duration? {
        Self.percentile(p, ofSorted: samples.sorted())
    }

    private static func percentile(_ p: Int, ofSorted sorted: [Duration]) -> Duration? {
        sorted.isEmpty ? nil : sorted[min(sorted.count - 1, sorted.count * p / 100)]
    }

    /// "p50 … µs  p90 …  p99 …  max …".
    func summary(_ percentiles: [Int] = [50, 90, 99]) -> String {
        let sorted = samples.sorted()
        guard !sorted.isEmpty else { return "no samples" }
        var parts = percentiles.map { p in "p\(p) \(Self.percentile(p, ofSorted: sorted).map(Self.format) ?? "-")" }
        parts.append("max \(Self.format(sorted[sorted.count - 1]))")
        return parts.joined(separator: "  ")
    }

    static func format(_ duration: Duration) -> String {
        let micros = Double(duration.components.seconds) * 1e6 + Double(duration.components.attoseconds) / 1e12
        return micros >= 10_000 ? String(format: "%.1f ms", micros / 1000) : String(format: "%.0f µs", micros)
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
