import ArgumentParser
import Foundation
import ParleyGateway

/// The gateway's rate limiter fed distinct keys, as a flood of logins by invented handles or of
/// requests from many addresses feeds it: the time per call and the process's resident memory
/// after each step of keys, which must stay flat and bounded past the limiter's capacity.
struct LimiterBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "limiter",
        abstract: "Time the rate limiter per call, and the memory it holds, as distinct keys pour in.")

    @Option(help: "Distinct keys in all.")
    var keys = 1_000_000
    @Option(help: "Keys per step: each step prints its ns per call, the keys held and the resident memory.")
    var step = 100_000
    @Option(help: "Keys per second of the clock the limiter is told (each call advances it by 1/rate s): how fast the flood comes.")
    var rate: Double = 50_000
    @Option(help: "The rule's tokens per second and burst (the login limit's: 5 a minute, so a bucket takes 60 s to fill).")
    var perSecond: Double = 5.0 / 60
    @Option(help: "The rule's burst.")
    var burst: Double = 5
    @Option(help: "Keys held at most (the gateway's default).")
    var capacity = 100_000

    func run() async throws {
        guard keys > 0, step > 0, rate > 0 else { throw ValidationError("--keys, --step and --rate must be positive") }
        let limiter = RateLimiter(.init(perSecond: perSecond, burst: burst), capacity: capacity)
        let start = ContinuousClock.now
        let tick = Duration.seconds(1 / rate)
        // Keys like the handles of a flood: distinct, of a realistic length, made before timing.
        var done = 0
        print("limiter: \(keys) distinct keys, capacity \(capacity), burst \(burst), \(perSecond)/s, keys arriving at \(Int(rate))/s")
        print("  keys so far   ns per call   keys held   resident MiB")
        while done < keys {
            let count = min(step, keys - done)
            let batch = (done..<done + count).map { "flood-handle-\($0)" }
            let began = ContinuousClock.now
            for (offset, key) in batch.enumerated() {
                _ = limiter.acquire(key, now: start + tick * Double(done + offset))
            }
            let took = ContinuousClock.now - began
            done += count
            let nanoseconds = Double(took.components.seconds) * 1e9 + Double(took.components.attoseconds) / 1e9
            print(String(format: "  %11d   %11.0f   %9d   %12.1f", done, nanoseconds / Double(count), limiter.count, Double(residentKiB()) / 1024))
        }
    }

    /// This process's resident memory (VmRSS), in KiB; 0 where /proc is not there.
    private func residentKiB() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
        }
        return 0
    }
}
