import ParleyModel
import Testing

/// Durations in flags and environment variables: a unit, or plain seconds.
@Suite struct DurationTextTests {
    @Test func unitsAndPlainSeconds() {
        #expect(DurationText.parse("20s") == .seconds(20))
        #expect(DurationText.parse("20") == .seconds(20))
        #expect(DurationText.parse("1.5") == .milliseconds(1_500))
        #expect(DurationText.parse("50ms") == .milliseconds(50))
        #expect(DurationText.parse("250us") == .microseconds(250))
        #expect(DurationText.parse("250µs") == .microseconds(250))
        #expect(DurationText.parse("5m") == .seconds(300))
        #expect(DurationText.parse("1h") == .seconds(3_600))
        #expect(DurationText.parse(" 3s ") == .seconds(3))
        #expect(DurationText.parse("0") == .zero)
    }

    @Test func whatIsNotADurationIsRefused() {
        for text in ["", "s", "ms", "-1s", "1 s", "1x", "1sec", "1e3", "nan", "inf", "1..2s", "400d", "9999999h", "0x10"] {
            #expect(DurationText.parse(text) == nil, "\(text)")
        }
        #expect(DurationText.problem("1x", source: "--drain").contains("--drain '1x' is not a duration"))
    }

    @Test func formatReadsBack() {
        for duration: Duration in [.zero, .seconds(30), .milliseconds(1_500), .milliseconds(5), .microseconds(250), .milliseconds(2_250), .seconds(120), .seconds(48 * 3600), .seconds(30 * 86_400)] {
            let text = DurationText.format(duration)
            #expect(DurationText.parse(text) == duration, "\(duration) → \(text)")
        }
        #expect(DurationText.format(.milliseconds(5)) == "5ms")
        #expect(DurationText.format(.seconds(30)) == "30s")
        #expect(DurationText.format(.seconds(90)) == "90s")
        #expect(DurationText.format(.seconds(48 * 3600)) == "48h")
        #expect(DurationText.format(.seconds(30 * 86_400)) == "30d")
    }
}
