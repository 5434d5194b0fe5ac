import Foundation
import Logging
import ParleyCluster
import ParleyMedia
import ParleyModel
import ParleyStore

/// Deletes uploads never attached to a message once they are ``keepUnattached`` old (a day by
/// default): their descriptions from the store, then their bytes and thumbnails from the blob
/// store once no other upload has the same bytes.
///
/// Safe against an attach at the same moment: the store removes an upload and marks it
/// attached in one row (``ChatStore/referenceMedia(_:in:)``), so one of the two finds the other's
/// work. Safe against an upload of the same bytes finishing as they are deleted: finishing keeps
/// them again, and bytes kept in the last ``recentlyKept`` are left (their upload is being
/// recorded); they are looked at again on the next sweep. Any number of gateways may sweep at
/// once: each upload is removed by one of them.
public actor MediaSweeper {
    public let store: any ChatStore
    public let blobs: any BlobStore
    public let keepUnattached: Duration
    public let recentlyKept: Duration
    /// Uploads removed per store call.
    public let batch: Int
    private let logger: Logger
    /// When sweeps run, and the first one's phase: the node's.
    private let clock: any ClusterClock
    private let random: ClusterRandomness
    /// Bytes whose uploads were removed, not yet deleted: left because they had just been kept
    /// again, or because the sweep stopped on an error.
    private var recheck: Set<String> = []

    public struct Report: Equatable, Sendable {
        /// Uploads whose descriptions were removed.
        public var uploads = 0
        /// Blobs deleted, and their bytes.
        public var blobs = 0
        public var bytes: Int64 = 0

        public init(uploads: Int = 0, blobs: Int = 0, bytes: Int64 = 0) {
            self.uploads = uploads
            self.blobs = blobs
            self.bytes = bytes
        }
    }

    public init(
        store: any ChatStore, blobs: any BlobStore, keepUnattached: Duration = .seconds(86_400), batch: Int = 500,
        clock: any ClusterClock, random: ClusterRandomness, logger: Logger = Logger(label: "parley.media.sweeper")
    ) {
        self.clock = clock
        self.random = random
        self.store = store
        self.blobs = blobs
        self.keepUnattached = keepUnattached
        // An upload is recorded one cluster call after its bytes are kept: five minutes is far
        // more than any call's deadline.
        self.recentlyKept = min(keepUnattached, .seconds(300))
        self.batch = max(1, batch)
        self.logger = logger
    }

    /// How often ``run()`` sweeps: a 24th of ``keepUnattached``, between a second and an hour.
    public nonisolated var interval: Duration {
        min(.seconds(3600), max(.seconds(1), keepUnattached / 24))
    }

    /// One sweep: everything unattached and old at `now`.
    public func sweep(now: Date) async throws -> Report {
        var report = Report()
        let cutoff = now.addingTimeInterval(-keepUnattached.seconds)
        let keptBefore = now.addingTimeInterval(-recentlyKept.seconds)
        // Bytes whose uploads are removed wait in `recheck` until they are dealt with, so that a
        // sweep cut short by an error leaves them to the next one rather than on the disk for good.
        while true {
            let removed = try await store.removeUnattachedMedia(uploadedBefore: cutoff, limit: batch)
            report.uploads += removed.count
            for media in removed { recheck.insert(media.media.sha256) }
            if removed.count < batch { break }
        }
        for sha256 in recheck.sorted() {
            if try await store.hasMedia(withSHA256: sha256) {
                recheck.remove(sha256)
                continue
            }
            let size = try await blobs.size(of: sha256)
            if try await blobs.delete(sha256, keptBefore: keptBefore) {
                report.blobs += 1
                report.bytes += size ?? 0
                recheck.remove(sha256)
            } else if size == nil {
                recheck.remove(sha256)
            }
        }
        return report
    }

    /// Sweeps every ``interval`` (the first a random part of one after the start, so that
    /// gateways started together do not sweep together) until the task is cancelled.
    public func run() async {
        let interval = self.interval
        var wait = interval * (0.1 + 0.9 * Double(random.int(in: 0..<1_000)) / 1_000)
        while !Task.isCancelled {
            do {
                try await clock.sleep(for: wait)
            } catch {
                return
            }
            wait = interval
            do {
                let report = try await sweep(now: clock.wallNow)
                if report.uploads > 0 || report.blobs > 0 {
                    logger.info("removed uploads never attached to a message", metadata: [
                        "media.uploads": "\(report.uploads)", "media.blobs": "\(report.blobs)", "media.bytes": "\(report.bytes)",
                        "media.keep_unattached": "\(DurationText.format(keepUnattached))",
                    ])
                }
            } catch {
                logger.warning("the sweep of unattached uploads failed; it runs again later", metadata: ["error": "\(error)"])
            }
        }
    }
}

