import Foundation
import NIOCore
import ParleyCluster
import ParleyGateway
import ParleyMedia
import ParleyModel
import ParleyStore
import Synchronization
import Testing

@Suite struct MediaSweeperTests {
    /// The blob store's times are the real clock's: sweeps are as of moments around it.
    let now = Date()

    func keep(_ bytes: [UInt8], in blobs: any BlobStore) async throws -> StoredBlob {
        let upload = try await blobs.beginUpload()
        try await upload.write(ByteBuffer(bytes: bytes))
        return try await upload.finish()
    }

    func record(_ blob: StoredBlob, hoursAgo: Double, in store: InMemoryChatStore) async throws -> MediaID {
        let media = Media(id: .make(), contentType: "image/png", size: blob.size, sha256: blob.sha256,
                          createdAt: now.addingTimeInterval(-hoursAgo * 3600).millisecondPrecision)
        try await store.recordMedia(StoredMedia(media: media, uploaderId: UserID(rawValue: "u_sweeper")))
        return media.id
    }

    func blobStore() throws -> FileBlobStore {
        try FileBlobStore(directory: FileManager.default.temporaryDirectory.appendingPathComponent("parley-sweeper-\(UUID().uuidString)"), now: Date())
    }

    @Test func aDayOldUnattachedUploadGoesWithItsBytesAndThumbnailsWhatIsAttachedYoungOrSharedStays() async throws {
        let store = InMemoryChatStore(), blobs = try blobStore()
        defer { try? FileManager.default.removeItem(at: blobs.directory) }
        let lonely = try await keep([1, 2, 3], in: blobs)
        let sent = try await keep([4, 5, 6, 7], in: blobs)
        let shared = try await keep([8, 9], in: blobs)
        try await blobs.keepThumbnail(ByteBuffer(bytes: [0xFF, 0xD8, 0xFF]), of: lonely.sha256, size: 320)
        let old = try await record(lonely, hoursAgo: 25, in: store)
        let attached = try await record(sent, hoursAgo: 30, in: store)
        let oldCopy = try await record(shared, hoursAgo: 26, in: store)
        let youngCopy = try await record(shared, hoursAgo: 2, in: store)
        try #expect(await store.referenceMedia([attached], in: ConversationID.make()) == [attached])

        // Ten minutes on: the bytes were last kept longer ago than the five minutes left alone.
        let sweeper = MediaSweeper(store: store, blobs: blobs, clock: ContinuousClock(), random: ClusterRandomness())
        let report = try await sweeper.sweep(now: now.addingTimeInterval(600))
        #expect(report == MediaSweeper.Report(uploads: 2, blobs: 1, bytes: 3))
        try #expect(await store.media(old) == nil)
        try #expect(await store.media(oldCopy) == nil)
        try #expect(await store.media(attached) != nil)
        try #expect(await store.media(youngCopy) != nil)
        try #expect(await blobs.size(of: lonely.sha256) == nil)
        try #expect(await blobs.thumbnail(of: lonely.sha256, size: 320) == nil)
        try #expect(await blobs.size(of: sent.sha256) == 4)
        try #expect(await blobs.size(of: shared.sha256) == 2, "the young upload still has these bytes")
        try #expect(await sweeper.sweep(now: now.addingTimeInterval(600)) == MediaSweeper.Report())
    }

    @Test func bytesKeptAgainMomentsAgoAreLeftThenDeletedOnALaterSweep() async throws {
        let store = InMemoryChatStore(), blobs = try blobStore()
        defer { try? FileManager.default.removeItem(at: blobs.directory) }
        // A day-old upload's bytes, uploaded again just now: that upload is being recorded.
        let blob = try await keep([42, 43], in: blobs)
        _ = try await record(blob, hoursAgo: 25, in: store)
        let sweeper = MediaSweeper(store: store, blobs: blobs, clock: ContinuousClock(), random: ClusterRandomness())
        #expect(try await sweeper.sweep(now: now) == MediaSweeper.Report(uploads: 1, blobs: 0, bytes: 0))
        try #expect(await blobs.size(of: blob.sha256) == 2)
        // No upload was recorded for them after all: the next sweep deletes them.
        #expect(try await sweeper.sweep(now: now.addingTimeInterval(600)) == MediaSweeper.Report(uploads: 0, blobs: 1, bytes: 2))
        try #expect(await blobs.size(of: blob.sha256) == nil)
    }

    /// A file store whose deletes fail while `failing` is set.
    final class FailingDeletes: BlobStore {
        let inner: FileBlobStore
        let failing = Mutex(true)
        init(_ inner: FileBlobStore) { self.inner = inner }
        func beginUpload() async throws -> any BlobUpload { try await inner.beginUpload() }
        func size(of sha256: String) async throws -> Int64? { try await inner.size(of: sha256) }
        func read(_ sha256: String, range: Range<Int64>, chunkSize: Int, into body: (ByteBuffer) async throws -> Void) async throws {
            try await inner.read(sha256, range: range, chunkSize: chunkSize, into: body)
        }
        func delete(_ sha256: String, keptBefore cutoff: Date) async throws -> Bool {
            if failing.withLock({ $0 }) { throw BlobStoreError(.unavailable, "the disk is away") }
            return try await inner.delete(sha256, keptBefore: cutoff)
        }
        func thumbnail(of sha256: String, size: Int) async throws -> ByteBuffer? { try await inner.thumbnail(of: sha256, size: size) }
        func keepThumbnail(_ bytes: ByteBuffer, of sha256: String, size: Int) async throws { try await inner.keepThumbnail(bytes, of: sha256, size: size) }
    }

    @Test func bytesASweepFailedToDeleteAreDeletedByTheNext() async throws {
        let store = InMemoryChatStore(), files = try blobStore()
        defer { try? FileManager.default.removeItem(at: files.directory) }
        let blobs = FailingDeletes(files)
        let blob = try await keep([7, 7, 7], in: blobs)
        _ = try await record(blob, hoursAgo: 30, in: store)
        let sweeper = MediaSweeper(store: store, blobs: blobs, clock: ContinuousClock(), random: ClusterRandomness())
        await #expect(throws: BlobStoreError.self) { try await sweeper.sweep(now: now.addingTimeInterval(600)) }
        try #expect(await blobs.size(of: blob.sha256) == 3, "the upload's record went, its bytes stayed")
        blobs.failing.withLock { $0 = false }
        #expect(try await sweeper.sweep(now: now.addingTimeInterval(600)) == MediaSweeper.Report(uploads: 0, blobs: 1, bytes: 3))
        try #expect(await blobs.size(of: blob.sha256) == nil)
    }

    @Test func aSweepComesEvery24thOfTheTimeKeptBetweenASecondAndAnHour() async throws {
        let store = InMemoryChatStore(), blobs = try blobStore()
        defer { try? FileManager.default.removeItem(at: blobs.directory) }
        #expect(MediaSweeper(store: store, blobs: blobs, clock: ContinuousClock(), random: ClusterRandomness()).interval == .seconds(3600))
        #expect(MediaSweeper(store: store, blobs: blobs, keepUnattached: .seconds(4800), clock: ContinuousClock(), random: ClusterRandomness()).interval == .seconds(200))
        #expect(MediaSweeper(store: store, blobs: blobs, keepUnattached: .seconds(3), clock: ContinuousClock(), random: ClusterRandomness()).interval == .seconds(1))
    }
}
