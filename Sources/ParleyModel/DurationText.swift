/// A duration as an operator writes one in a flag or an environment variable: a number and a
/// unit — `250us` (or `µs`), `50ms`, `20s`, `5m`, `1h`, `30d` — or a plain number, which is seconds.
public enum DurationText {
    /// The duration `text` names, or nil: not a number, negative, not finite, an unknown unit, or
    /// longer than a year (no setting of Parley's is, and the bound keeps the arithmetic exact).
    public static func parse(_ text: String) -> Duration? {
        let trimmed = text.trimmingSpaces()
        let unitStart = trimmed.firstIndex { !($0.isASCII && ($0.isNumber || $0 == ".")) } ?? trimmed.endIndex
        guard let value = Double(trimmed[..<unitStart]), value.isFinite, value >= 0 else { return nil }
        let seconds: Double
        switch trimmed[unitStart...] {
        case "", "s": seconds = value
        case "ms": seconds = value / 1_000
        case "us", "µs": seconds = value / 1_000_000
        case "m", "min": seconds = value * 60
        case "h": seconds = value * 3_600
        case "d": seconds = value * 86_400
        default: return nil
        }
        guard seconds <= 366 * 86_400 else { return nil }
        return .nanoseconds(Int64((seconds * 1_000_000_000).rounded()))
    }

    /// `duration` as ``parse(_:)`` reads it back, in the largest unit that keeps it whole or
    /// short: `5ms`, `30s`, `1.5s`, `250us`, `48h`, `30d`.
    public static func format(_ duration: Duration) -> String {
        let nanoseconds = duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
        if nanoseconds == 0 { return "0s" }
        for (unit, seconds) in [("d", Int64(86_400)), ("h", 3_600), ("m", 60)] where nanoseconds % (seconds * 1_000_000_000) == 0 {
            // Hours up to two days read better than days: `48h`.
            if unit == "d", nanoseconds < 3 * 86_400 * 1_000_000_000 { continue }
            return "\(nanoseconds / (seconds * 1_000_000_000))\(unit)"
        }
        if nanoseconds % 1_000_000_000 == 0 { return "\(nanoseconds / 1_000_000_000)s" }
        if nanoseconds >= 1_000_000_000 { return "\(Double(nanoseconds) / 1_000_000_000)s" }
        if nanoseconds % 1_000_000 == 0 { return "\(nanoseconds / 1_000_000)ms" }
        if nanoseconds >= 1_000_000 { return "\(Double(nanoseconds) / 1_000_000)ms" }
        return "\(Double(nanoseconds) / 1_000)us"
    }

    /// The message for a value that is not a duration, naming where it came from.
    public static func problem(_ text: String, source: String) -> String {
        "\(source) '\(text)' is not a duration: a number and a unit (us, ms, s, m, h, d), e.g. 30s or 500ms; a plain number is seconds"
    }
}

extension String {
    fileprivate func trimmingSpaces() -> Substring {
        var slice = self[...]
        while slice.first == " " { slice = slice.dropFirst() }
        while slice.last == " " { slice = slice.dropLast() }
        return slice
    }
}

extension Duration {
    /// This duration in seconds, with its fraction (for `Date` arithmetic).
    public var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
