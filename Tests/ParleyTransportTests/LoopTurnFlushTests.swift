import NIOCore
import NIOPosix
import Testing

@testable import ParleyTransport

@Suite struct LoopTurnFlushTests {
    /// Counts its flushes; lives on one loop.
    final class Writer: LoopTurnFlushable {
        var flushes = 0
        func flushWritten() { flushes += 1 }
    }

    /// Runs `body` on `loop` `turns` rounds of its task queue from now (each round's task queues the next).
    static func after(_ turns: Int, on loop: NIOIsolatedEventLoop, _ body: @escaping () -> Void) {
        loop.execute { turns <= 1 ? body() : after(turns - 1, on: loop, body) }
    }

    @Test func requestsWithinTheWaitMakeOneFlushAfterItsTurns() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let seen = try await loop.submit { () -> EventLoopFuture<[Int]> in
            let isolated = loop.assumeIsolated()
            let writer = Writer()
            let flush = LoopTurnFlush(afterTurns: 3)
            var seen: [Int] = []
            let done = loop.makePromise(of: [Int].self)
            for _ in 0..<3 { flush.request(on: loop, for: writer) }  // three writes, this turn
            for turn in 1...4 {
                Self.after(turn, on: isolated) {
                    seen.append(writer.flushes)
                    if turn == 2 { flush.request(on: loop, for: writer) }  // a write while one is due
                    if turn == 4 {
                        flush.request(on: loop, for: writer)  // a write after the flush: another one
                        Self.after(3, on: isolated) { seen.append(writer.flushes); done.succeed(seen) }
                    }
                }
            }
            return done.futureResult
        }.flatMap { $0 }.get()
        #expect(seen == [0, 0, 1, 1, 2], "one flush at the third turn for every request before it, then one more: \(seen)")
        try await group.shutdownGracefully()
    }
}
