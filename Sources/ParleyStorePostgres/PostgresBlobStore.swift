import Crypto
import Foundation
import Logging
import NIOCore
import ParleyMedia
import ParleyModel
import PostgresNIO
import Synchronization

/// Uploads' bytes in PostgreSQL, for gateways on several machines (they share the database, not
/// a disk): each blob is rows of 256 KiB chunks (`media_chunks`, stored uncompressed: photos and
/// videos are compressed already) and one row naming it by its SHA-256 (`media_blobs`). An upload
/// writes its chunks under a name of its own as they come, hashing on the way; finishing it is
/// one transaction that either renames them to the SHA-256 (the chunks' data is not rewritten)
/// or, when those bytes are kept already, deletes them. A blob is readable only once that
/// transaction committed, so it is whole or absent. Thumbnails are rows of `media_thumbnails`.
public final class PostgresBlobStore: BlobStore {
    private let pool: PostgresPool
    private let logger: Logger
    /// Bytes per chunk row: what an upload holds before it writes, and a read fetches at a time.
    let chunkBytes: Int

    /// The node's wall clock: when a chunk was written and a blob kept, which the leftover and
    /// media sweeps go by.
    let wallClock: @Sendable () -> Date

    /// Blobs in `store`'s database (its migrations make the tables).
    public init(
        store: PostgresChatStore, chunkBytes: Int = 256 * 1024, wallClock: @escaping @Sendable () -> Date,
        logger: Logger = Logger(label: "parley.media.postgres")
    ) {
        self.pool = store.pool
        self.wallClock = wallClock
        self.chunkBytes = chunkBytes
        self.logger = logger
    }

    /// Deletes the chunks of uploads that stopped more than `age` ago without finishing (their
    /// gateway died; other gateways may be writing theirs now). Returns how many chunks went.
    @discardableResult
    public func removeLeftovers(olderThan age: Duration) async throws -> Int {
        let cutoff = wallClock().millisecondsSince1970 - Int64(age.components.seconds) * 1000
        return try await run { client in
            var removed = 0
            for try await _ in try await client.query(
                "DELETE FROM media_chunks WHERE blob LIKE 'upload:%' AND written_at < \(cutoff) RETURNING part", logger: logger
            ) { removed += 1 }
            return removed
        }
    }

    public func beginUpload() async throws -> any BlobUpload {
        PostgresBlobUpload(store: self, name: "upload:" + UUID().uuidString.lowercased())
    }

    public func size(of sha256: String) async throws -> Int64? {
        guard Media.isSHA256(sha256) else { return nil }
        return try await run { client in
            for try await size in try await client.query("SELECT size FROM media_blobs WHERE sha256 = \(sha256)", logger: logger).decode(Int64.self) {
                return size
            }
            return nil
        }
    }

    public func read(_ sha256: String, range: Range<Int64>, chunkSize: Int, into body: (ByteBuffer) async throws -> Void) async throws {
        guard let size = try await size(of: sha256) else { throw BlobStoreError(.notFound, "no blob \(sha256)") }
        guard range.lowerBound >= 0, range.upperBound <= size else {
            throw BlobStoreError(.notFound, "bytes \(range) are past the end of blob \(sha256) (\(size) bytes)")
        }
        guard !range.isEmpty else { return }
        let piece = max(chunkSize, 1)
        let chunk = Int64(chunkBytes)
        for part in (range.lowerBound / chunk)...((range.upperBound - 1) / chunk) {
            let partStart = part * chunk
            var data: ByteBuffer? = try await run { client in
                for try await data in try await client.query(
                    "SELECT data FROM media_chunks WHERE blob = \(sha256) AND part = \(Int32(part))", logger: logger
                ).decode(ByteBuffer.self) {
                    return data
                }
                return nil
            }
            guard var bytes = data.take() else { throw BlobStoreError(.unavailable, "chunk \(part) of blob \(sha256) is missing") }
            // The part of this chunk inside the range.
            let from = Int(max(range.lowerBound, partStart) - partStart)
            let to = Int(min(range.upperBound, partStart + Int64(bytes.readableBytes)) - partStart)
            guard from < to, var wanted = bytes.getSlice(at: bytes.readerIndex + from, length: to - from) else {
                throw BlobStoreError(.unavailable, "chunk \(part) of blob \(sha256) is shorter than its size says")
            }
            bytes = ByteBuffer()
            while wanted.readableBytes > 0, let next = wanted.readSlice(length: min(piece, wanted.readableBytes)) {
                try await body(next)
            }
        }
    }

    public func delete(_ sha256: String, keptBefore cutoff: Date) async throws -> Bool {
        guard Media.isSHA256(sha256) else { return false }
        let before = cutoff == .distantFuture ? Int64.max : cutoff.millisecondsSince1970
        return try await run { client in
            try await client.withTransaction(logger: logger) { connection in
                var deleted = false
                for try await _ in try await connection.query(
                    "DELETE FROM media_blobs WHERE sha256 = \(sha256) AND created_at < \(before) RETURNING size", logger: logger
                ) {
                    deleted = true
                }
                guard deleted else { return false }
                try await connection.query("DELETE FROM media_chunks WHERE blob = \(sha256)", logger: logger)
                try await connection.query("DELETE FROM media_thumbnails WHERE sha256 = \(sha256)", logger: logger)
                return true
            }
        }
    }

    public func thumbnail(of sha256: String, size: Int) async throws -> ByteBuffer? {
        guard Media.isSHA256(sha256) else { return nil }
        return try await run { client in
            for try await data in try await client.query(
                "SELECT data FROM media_thumbnails WHERE sha256 = \(sha256) AND size = \(Int32(clamping: size))", logger: logger
            ).decode(ByteBuffer.self) {
                return data
            }
            return nil
        }
    }

    public func keepThumbnail(_ bytes: ByteBuffer, of sha256: String, size: Int) async throws {
        guard Media.isSHA256(sha256) else { throw BlobStoreError(.notFound, "no blob \(sha256)") }
        try await run { client in
            try await client.query(
                """
                INSERT INTO media_thumbnails (sha256, size, data) VALUES (\(sha256), \(Int32(clamping: size)), \(bytes))
                ON CONFLICT (sha256, size) DO UPDATE SET data = EXCLUDED.data
                """, logger: logger)
        }
    }

    fileprivate func writeChunk(_ data: ByteBuffer, of name: String, part: Int) async throws {
        let now = wallClock().millisecondsSince1970
        try await run { client in
            try await client.query(
                "INSERT INTO media_chunks (blob, part, data, written_at) VALUES (\(name), \(Int32(part)), \(data), \(now))", logger: logger)
        }
    }

    /// Names the chunks written under `name` as blob `blob`, or drops them if it is kept already.
    fileprivate func keep(_ name: String, as blob: StoredBlob) async throws {
        let now = wallClock().millisecondsSince1970
        try await run { client in
            try await client.withTransaction(logger: logger) { connection in
                // Bytes kept already are kept again now: `created_at` is when they were last kept,
                // which the sweeper goes by. `xmax = 0` on the row answered: it was inserted.
                var created = false
                for try await inserted in try await connection.query(
                    """
                    INSERT INTO media_blobs (sha256, size, created_at) VALUES (\(blob.sha256), \(blob.size), \(now))
                    ON CONFLICT (sha256) DO UPDATE SET created_at = EXCLUDED.created_at RETURNING (xmax = 0)
                    """,
                    logger: logger
                ).decode(Bool.self) { created = inserted }
                if created {
                    try await connection.query("UPDATE media_chunks SET blob = \(blob.sha256) WHERE blob = \(name)", logger: logger)
                } else {
                    try await connection.query("DELETE FROM media_chunks WHERE blob = \(name)", logger: logger)
                }
            }
        }
    }

    fileprivate func drop(_ name: String) async {
        // In a task of its own: an upload is most often abandoned because its client went, and the
        // request's task, cancelled then, would have the query refused before it was sent.
        await Task { [self] in
            do {
                try await run { client in try await client.query("DELETE FROM media_chunks WHERE blob = \(name)", logger: logger) }
            } catch {
                // Left for removeLeftovers(olderThan:).
                logger.warning("an abandoned upload's chunks could not be deleted", metadata: ["error": "\(error)"])
            }
        }.value
    }

    private func run<T>(_ body: (PostgresClient) async throws -> T) async throws -> T {
        do {
            return try await pool.operation(body)
        } catch let error as PostgresPool.Away {
            throw BlobStoreError(.unavailable, error.description)
        } catch let error as BlobStoreError {
            throw error
        } catch let error as PostgresTransactionError where error.closureError is BlobStoreError {
            throw error.closureError as? BlobStoreError ?? BlobStoreError(.unavailable, "\(error)")
        } catch {
            throw BlobStoreError(.unavailable, "PostgreSQL failed: \(String(reflecting: error))")
        }
    }
}

/// One upload to a ``PostgresBlobStore``: chunks under a name of its own, hashed as written.
private final class PostgresBlobUpload: BlobUpload {
    private struct State {
        var pending = ByteBuffer()
        var parts = 0
        var hasher = SHA256()
        var size: Int64 = 0
        var closed = false
    }

    private let store: PostgresBlobStore
    private let name: String
    private let state = Mutex(State())

    init(store: PostgresBlobStore, name: String) {
        self.store = store
        self.name = name
    }

    func write(_ bytes: ByteBuffer) async throws {
        let full: [(ByteBuffer, Int)] = try state.withLock { state in
            guard !state.closed else { throw BlobStoreError(.closed, "the upload is over") }
            bytes.withUnsafeReadableBytes { state.hasher.update(bufferPointer: $0) }
            state.size += Int64(bytes.readableBytes)
            var incoming = bytes
            state.pending.writeBuffer(&incoming)
            var full: [(ByteBuffer, Int)] = []
            while state.pending.readableBytes >= store.chunkBytes, let chunk = state.pending.readSlice(length: store.chunkBytes) {
                full.append((chunk, state.parts))
                state.parts += 1
            }
            if state.pending.readableBytes == 0 { state.pending.clear() } else { state.pending.discardReadBytes() }
            return full
        }
        for (chunk, part) in full { try await store.writeChunk(chunk, of: name, part: part) }
    }

    func finish() async throws -> StoredBlob {
        let (last, blob): ((ByteBuffer, Int)?, StoredBlob) = try state.withLock { state in
            guard !state.closed else { throw BlobStoreError(.closed, "the upload is over") }
            state.closed = true
            let digest = state.hasher.finalize().hex
            let last = state.pending.readableBytes > 0 ? (state.pending, state.parts) : nil
            state.pending = ByteBuffer()
            return (last, StoredBlob(sha256: digest, size: state.size))
        }
        do {
            if let (chunk, part) = last { try await store.writeChunk(chunk, of: name, part: part) }
            try await store.keep(name, as: blob)
        } catch {
            await store.drop(name)
            throw error
        }
        return blob
    }

    func abandon() async {
        let wasOpen = state.withLock { state in
            defer { state.closed = true }
            return !state.closed
        }
        if wasOpen { await store.drop(name) }
    }
}
