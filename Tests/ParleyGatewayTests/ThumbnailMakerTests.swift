import Foundation
import NIOCore
import ParleyImaging
import ParleyMedia
import ParleyModel
import Synchronization
import Testing
@testable import ParleyGateway

@Suite struct ThumbnailMakerTests {
    /// A file blob store that counts the thumbnails kept.
    final class Counting: BlobStore {
        let inner: FileBlobStore
        let kept = Mutex(0)
        init() throws {
            inner = try FileBlobStore(directory: FileManager.default.temporaryDirectory.appendingPathComponent("parley-thumbnails-\(UUID().uuidString)"), now: Date())
        }
        func beginUpload() async throws -> any BlobUpload { try await inner.beginUpload() }
        func size(of sha256: String) async throws -> Int64? { try await inner.size(of: sha256) }
        func read(_ sha256: String, range: Range<Int64>, chunkSize: Int, into body: (ByteBuffer) async throws -> Void) async throws {
            try await inner.read(sha256, range: range, chunkSize: chunkSize, into: body)
        }
        func delete(_ sha256: String, keptBefore cutoff: Date) async throws -> Bool { try await inner.delete(sha256, keptBefore: cutoff) }
        func thumbnail(of sha256: String, size: Int) async throws -> ByteBuffer? { try await inner.thumbnail(of: sha256, size: size) }
        func keepThumbnail(_ bytes: ByteBuffer, of sha256: String, size: Int) async throws {
            kept.withLock { $0 += 1 }
            try await inner.keepThumbnail(bytes, of: sha256, size: size)
        }
    }

    func keep(_ bytes: [UInt8], as contentType: String, width: Int? = nil, height: Int? = nil, in blobs: Counting) async throws -> Media {
        let upload = try await blobs.beginUpload()
        try await upload.write(ByteBuffer(bytes: bytes))
        let blob = try await upload.finish()
        return Media(id: .make(), contentType: contentType, size: blob.size, sha256: blob.sha256, width: width, height: height, createdAt: Date())
    }

    @Test func manyAskingAtOnceMakeItOnceAndItIsKept() async throws {
        let blobs = try Counting()
        defer { try? FileManager.default.removeItem(at: blobs.inner.directory) }
        let photo = try await keep(try Thumbnails.jpeg(rgb: ThumbnailsTests.pixels(width: 800, height: 600), width: 800, height: 600),
                                   as: "image/jpeg", width: 800, height: 600, in: blobs)
        let maker = ThumbnailMaker()
        let made = try await withThrowingTaskGroup(of: ByteBuffer.self) { group in
            for _ in 0..<8 { group.addTask { try await maker.thumbnail(of: photo, size: 160, blobs: blobs) } }
            return try await group.reduce(into: [ByteBuffer]()) { $0.append($1) }
        }
        #expect(Set(made).count == 1)
        #expect(MediaSniffing.dimensions(of: Array(made[0].readableBytesView), contentType: "image/jpeg").map { [$0.width, $0.height] } == [160, 120])
        #expect(blobs.kept.withLock { $0 } == 1)
        #expect(try await blobs.thumbnail(of: photo.sha256, size: 160) == made[0])
        _ = try await ThumbnailMaker().thumbnail(of: photo, size: 160, blobs: blobs)
        #expect(blobs.kept.withLock { $0 } == 1, "a new maker finds it kept")
    }

    @Test func anImageThatDoesNotDecodeOrIsTooLargeIsKeptEmptyAndNotTriedAgain() async throws {
        let blobs = try Counting()
        defer { try? FileManager.default.removeItem(at: blobs.inner.directory) }
        let broken = try await keep([0xFF, 0xD8, 0xFF, 0xE0] + [UInt8](repeating: 7, count: 300), as: "image/jpeg", in: blobs)
        let maker = ThumbnailMaker()
        #expect(try await maker.thumbnail(of: broken, size: 320, blobs: blobs).readableBytes == 0)
        #expect(try await maker.thumbnail(of: broken, size: 320, blobs: blobs).readableBytes == 0)
        #expect(blobs.kept.withLock { $0 } == 1)
        // A small file whose header claims 20,000 × 20,000 pixels is never handed to libvips.
        let bomb = try await keep(try Thumbnails.jpeg(rgb: ThumbnailsTests.pixels(width: 8, height: 8), width: 8, height: 8),
                                  as: "image/jpeg", width: 20_000, height: 20_000, in: blobs)
        #expect(try await maker.thumbnail(of: bomb, size: 160, blobs: blobs).readableBytes == 0)
    }

    /// At most `queueMax` wait while thumbnails are made: one more is turned away (`503` at the
    /// route) rather than held without end.
    @Test func pastItsQueueAMakerTurnsRequestsAway() async throws {
        let blobs = try Counting()
        defer { try? FileManager.default.removeItem(at: blobs.inner.directory) }
        var photos: [Media] = []
        for seed in 0..<3 {
            photos.append(try await keep(try Thumbnails.jpeg(rgb: ThumbnailsTests.pixels(width: 64, height: 48, seed: seed), width: 64, height: 48),
                                         as: "image/jpeg", width: 64, height: 48, in: blobs))
        }
        let gated = Gated(blobs)
        let maker = ThumbnailMaker(concurrency: 1, queueMax: 1)
        let (one, two) = (photos[0], photos[1])
        let first = Task { try await maker.thumbnail(of: one, size: 160, blobs: gated) }
        while gated.reading.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
        let second = Task { try await maker.thumbnail(of: two, size: 160, blobs: gated) }
        // The second waits its turn; a third finds the queue full.
        while await maker.waitingCount == 0 { try await Task.sleep(for: .milliseconds(5)) }
        var busy = false
        do {
            _ = try await maker.thumbnail(of: photos[2], size: 160, blobs: gated)
        } catch is ThumbnailMaker.Busy {
            busy = true
        }
        #expect(busy)
        gated.open.withLock { $0 = true }
        #expect(try await first.value.readableBytes > 0)
        #expect(try await second.value.readableBytes > 0)
        #expect(try await maker.thumbnail(of: photos[2], size: 160, blobs: gated).readableBytes > 0, "served once the queue drained")
    }

    /// A blob store whose reads wait until it is opened.
    final class Gated: BlobStore {
        let inner: Counting
        let open = Mutex(false)
        let reading = Mutex(0)
        init(_ inner: Counting) { self.inner = inner }
        func beginUpload() async throws -> any BlobUpload { try await inner.beginUpload() }
        func size(of sha256: String) async throws -> Int64? { try await inner.size(of: sha256) }
        func read(_ sha256: String, range: Range<Int64>, chunkSize: Int, into body: (ByteBuffer) async throws -> Void) async throws {
            reading.withLock { $0 += 1 }
            while !open.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            try await inner.read(sha256, range: range, chunkSize: chunkSize, into: body)
        }
        func delete(_ sha256: String, keptBefore cutoff: Date) async throws -> Bool { try await inner.delete(sha256, keptBefore: cutoff) }
        func thumbnail(of sha256: String, size: Int) async throws -> ByteBuffer? { try await inner.thumbnail(of: sha256, size: size) }
        func keepThumbnail(_ bytes: ByteBuffer, of sha256: String, size: Int) async throws { try await inner.keepThumbnail(bytes, of: sha256, size: size) }
    }
}
