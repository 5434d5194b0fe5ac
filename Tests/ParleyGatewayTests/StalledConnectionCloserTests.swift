import Logging
import NIOCore
import NIOEmbedded
import Testing
@testable import ParleyGateway

/// A connection whose client takes nothing written to it for the deadline is closed; one that
/// takes something in time is not.
@Suite struct StalledConnectionCloserTests {
    static func channel() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(StalledConnectionCloser(deadline: .seconds(60), logger: Logger(label: "test")))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    static func setWritable(_ writable: Bool, _ channel: EmbeddedChannel) {
        channel.isWritable = writable
        channel.pipeline.fireChannelWritabilityChanged()
    }

    @Test func unwritableForTheDeadlineIsClosed() throws {
        let channel = try Self.channel()
        Self.setWritable(false, channel)
        channel.embeddedEventLoop.advanceTime(by: .seconds(59))
        #expect(channel.isActive, "closed before the deadline")
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive, "still open a whole deadline after its client stopped taking anything")
    }

    @Test func writableAgainInTimeIsKeptAndTheDeadlineStartsOver() throws {
        let channel = try Self.channel()
        Self.setWritable(false, channel)
        channel.embeddedEventLoop.advanceTime(by: .seconds(50))
        Self.setWritable(true, channel)
        channel.embeddedEventLoop.advanceTime(by: .seconds(30))
        #expect(channel.isActive, "closed though its client took what was written within the deadline")
        Self.setWritable(false, channel)
        channel.embeddedEventLoop.advanceTime(by: .seconds(50))
        #expect(channel.isActive, "the deadline counted from the first time it was unwritable, not the last")
        // Many changes while unwritable keep the first deadline: no timer per event.
        Self.setWritable(false, channel)
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(!channel.isActive)
        _ = try? channel.finish()
    }
}
