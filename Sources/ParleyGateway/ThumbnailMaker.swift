import NIOCore
import NIOPosix
import ParleyImaging
import ParleyMedia
import ParleyModel

/// Makes each image's thumbnails once, as they are first asked for, and keeps them beside the
/// image in the blob store. Requests for one that is being made wait for it; at most
/// ``concurrency`` are made at once (each decodes an image of up to the upload limit), on a
/// thread pool, never on an event loop, and at most ``queueMax`` wait for their turn (one more is
/// ``Busy``: `503` with `Retry-After`). An image libvips cannot decode — or one of more than
/// ``Thumbnails/pixelsMax`` pixels by its header, read before it is decoded — is kept as an
/// empty thumbnail, so it is not tried again. On a machine without libvips nothing is kept, and
/// asking throws ``Unavailable``.
actor ThumbnailMaker {
    private let pool: NIOThreadPool
    let concurrency: Int
    let queueMax: Int
    private var making: [String: Task<ByteBuffer, any Error>] = [:]
    private var running = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    /// libvips could not be loaded here.
    struct Unavailable: Error, CustomStringConvertible {
        var description: String
    }

    /// Thumbnails are being made and ``queueMax`` wait: try again shortly.
    struct Busy: Error {}

    init(pool: NIOThreadPool = .singleton, concurrency: Int = 1, queueMax: Int = 32) {
        self.pool = pool
        self.concurrency = max(1, concurrency)
        self.queueMax = max(0, queueMax)
    }

    /// `media`'s thumbnail `size` pixels on its longer side: empty when it has none.
    func thumbnail(of media: Media, size: Int, blobs: any BlobStore) async throws -> ByteBuffer {
        if let kept = try await blobs.thumbnail(of: media.sha256, size: size) { return kept }
        let key = "\(media.sha256).\(size)"
        if let task = making[key] { return try await task.value }
        // Not the caller's task: a client that goes away leaves it to finish for the others.
        let task = Task { try await self.make(media, size: size, blobs: blobs) }
        making[key] = task
        defer { making[key] = nil }
        return try await task.value
    }

    private func make(_ media: Media, size: Int, blobs: any BlobStore) async throws -> ByteBuffer {
        // Another gateway may have made it meanwhile.
        if let kept = try await blobs.thumbnail(of: media.sha256, size: size) { return kept }
        try await acquire()
        defer { release() }
        do {
            // Loading libvips takes a moment the first time: on the pool, like the work.
            _ = try await pool.runIfActive { () throws(Thumbnails.Failure) -> String in try Thumbnails.start() }
        } catch {
            throw Unavailable(description: "\(error)")
        }
        var made = ByteBuffer()
        // The size the upload's header gave, when it gave one, spares reading a bomb at all;
        // libvips checks the header itself before it decodes anything.
        let pixels = (media.width ?? 0).multipliedReportingOverflow(by: media.height ?? 0)
        if media.isImage, !pixels.overflow, pixels.partialValue <= Thumbnails.pixelsMax {
            var image: [UInt8] = []
            image.reserveCapacity(Int(media.size))
            try await blobs.read(media.sha256, range: 0..<media.size, chunkSize: 1 << 20) { piece in image += piece.readableBytesView }
            let source = image
            let jpeg = try await pool.runIfActive { () -> [UInt8]? in
                try? source.withUnsafeBytes { try Thumbnails.jpeg(of: $0, size: size) }
            }
            if let jpeg { made = ByteBuffer(bytes: jpeg) }
        }
        try await blobs.keepThumbnail(made, of: media.sha256, size: size)
        return made
    }

    /// How many wait for their turn.
    var waitingCount: Int { waiting.count }

    private func acquire() async throws(Busy) {
        if running < concurrency {
            running += 1
            return
        }
        guard waiting.count < queueMax else { throw Busy() }
        await withCheckedContinuation { waiting.append($0) }
    }

    private func release() {
        if waiting.isEmpty {
            running -= 1
        } else {
            waiting.removeFirst().resume()
        }
    }
}
