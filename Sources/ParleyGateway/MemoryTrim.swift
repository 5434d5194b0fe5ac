#if canImport(Glibc)
import Glibc
#endif
import Logging
import ParleyCluster

/// Gives the memory that closed client connections freed back to the system, once enough of them
/// have closed.
///
/// glibc keeps what each thread's arena freed for that arena's next allocations and returns
/// little of it by itself: after 2,000 idle event streams had closed, a gateway stayed at 166 MiB
/// resident; `malloc_trim` brought it to 66 MiB. So after a burst of connections (clients
/// reconnecting from a gateway that went away) a gateway would keep the burst's memory for good.
enum MemoryTrim {
    /// How often the closed connections are counted: soon enough that the memory of connections
    /// closed at their write deadline is back within 10 s of it (700 clients that read nothing
    /// held 1.8 GiB resident; closed, 585 MiB of it stayed until the trim gave it back).
    static let interval: Duration = .seconds(10)
    /// Closed connections that make a trim worth its walk over the heap: it holds each arena's
    /// lock while it frees that arena's free pages (29 ms for the 2,000 streams' memory).
    static let closedConnectionsMin = 256

    /// Until cancelled: every `interval`, trims if `closedConnectionsMin` connections have closed
    /// since the last trim.
    static func run(after connections: ConnectionCount, interval: Duration = interval, clock: any ClusterClock, logger: Logger) async {
        guard let trim = Self.trim else { return }
        while !Task.isCancelled {
            do { try await clock.sleep(until: clock.now.advanced(by: interval)) } catch { return }
            guard let closed = connections.takeClosedSinceTrim(atLeast: closedConnectionsMin) else { continue }
            let started = clock.now
            _ = trim(0)
            logger.debug("memory of closed connections returned to the system", metadata: [
                "connections.closed": "\(closed)", "duration": "\(clock.now - started)",
            ])
        }
    }

    /// glibc's `malloc_trim`, looked up at run time: the Glibc module does not declare it, and
    /// other C libraries lack it (then nothing is trimmed).
    private static let trim: (@convention(c) (Int) -> Int32)? = {
        #if canImport(Glibc)
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
        #else
        return nil
        #endif
    }()
}
