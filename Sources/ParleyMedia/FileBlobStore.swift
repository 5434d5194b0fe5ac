import Crypto
import Foundation
import NIOCore
import NIOPosix
import ParleyModel
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Blobs as files under one directory (the embedded default, shared by the nodes of one
/// machine): `blobs/ab/abcdef…` by SHA-256. An upload is written to `uploads/` as it comes,
/// hashed on the way, then fsynced and renamed to its name, and the directory fsynced: a blob
/// is either whole under its name or absent, whatever dies when. A file already under that
/// name holds the same bytes, so the upload's copy is dropped and the file's modification time
/// set to now (when its bytes were last kept). Thumbnails are `thumbnails/ab/abcdef….SIZE`,
/// written the same way.
///
/// Every file operation runs on a thread pool, never on the event loop that called.
public final class FileBlobStore: BlobStore {
    public let directory: URL
    private let blobs: String
    private let uploads: String
    private let thumbnails: String
    private let pool: NIOThreadPool

    /// Opens (creating) the store under `directory`, and removes uploads left over by a process
    /// that died mid-upload more than `leftoversAfter` before `now` (other nodes sharing the
    /// directory may be writing theirs now).
    public init(directory: URL, pool: NIOThreadPool = .singleton, leftoversAfter: Duration = .seconds(3600), now: Date) throws {
        self.directory = directory
        self.blobs = directory.appendingPathComponent("blobs").path
        self.uploads = directory.appendingPathComponent("uploads").path
        self.thumbnails = directory.appendingPathComponent("thumbnails").path
        self.pool = pool
        let files = FileManager.default
        for folder in [blobs, uploads, thumbnails] { try files.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        let cutoff = now.addingTimeInterval(-Double(leftoversAfter.components.seconds))
        for name in (try? files.contentsOfDirectory(atPath: uploads)) ?? [] where name.hasSuffix(".part") || name.hasSuffix(".thumbnail") {
            let path = uploads + "/" + name
            if let modified = (try? files.attributesOfItem(atPath: path))?[.modificationDate] as? Date, modified < cutoff {
                unlink(path)
            }
        }
    }

    public func beginUpload() async throws -> any BlobUpload {
        let path = uploads + "/" + UUID().uuidString.lowercased() + ".part"
        let fd = try await pool.runIfActive {
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o640)
            guard fd >= 0 else { throw Self.failure("cannot create \(path)") }
            return fd
        }
        return FileUpload(store: self, fd: fd, path: path)
    }

    public func size(of sha256: String) async throws -> Int64? {
        guard let path = path(of: sha256) else { return nil }
        return try await pool.runIfActive {
            var info = stat()
            guard stat(path, &info) == 0 else {
                if errno == ENOENT { return nil }
                throw Self.failure("cannot stat \(path)")
            }
            return Int64(info.st_size)
        }
    }

    public func read(_ sha256: String, range: Range<Int64>, chunkSize: Int, into body: (ByteBuffer) async throws -> Void) async throws {
        guard let path = path(of: sha256) else { throw BlobStoreError(.notFound, "no blob \(sha256)") }
        let pool = self.pool
        let fd: Int32 = try await pool.runIfActive {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                if errno == ENOENT { throw BlobStoreError(.notFound, "no blob \(sha256)") }
                throw Self.failure("cannot open \(path)")
            }
            var info = stat()
            guard fstat(fd, &info) == 0 else { close(fd); throw Self.failure("cannot stat \(path)") }
            guard range.lowerBound >= 0, range.upperBound <= Int64(info.st_size) else {
                close(fd)
                throw BlobStoreError(.notFound, "bytes \(range) are past the end of blob \(sha256) (\(info.st_size) bytes)")
            }
            return fd
        }
        defer { close(fd) }
        var offset = range.lowerBound
        while offset < range.upperBound {
            let length = Int(min(Int64(max(chunkSize, 1)), range.upperBound - offset))
            let start = offset
            let piece: ByteBuffer = try await pool.runIfActive {
                var buffer = ByteBufferAllocator().buffer(capacity: length)
                let count = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { bytes in
                    pread(fd, bytes.baseAddress, length, off_t(start))
                }
                guard count > 0 else { throw Self.failure("cannot read \(path) at \(start)") }
                return buffer
            }
            offset += Int64(piece.readableBytes)
            try await body(piece)
        }
    }

    public func delete(_ sha256: String, keptBefore cutoff: Date) async throws -> Bool {
        guard let path = path(of: sha256) else { return false }
        let thumbnailShard = thumbnailFolder(of: sha256)
        return try await pool.runIfActive {
            var info = stat()
            guard stat(path, &info) == 0 else {
                if errno == ENOENT { return false }
                throw Self.failure("cannot stat \(path)")
            }
            guard Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9 < cutoff.timeIntervalSince1970 else { return false }
            guard unlink(path) == 0 else {
                if errno == ENOENT { return false }
                throw Self.failure("cannot delete \(path)")
            }
            for name in (try? FileManager.default.contentsOfDirectory(atPath: thumbnailShard)) ?? [] where name.hasPrefix(sha256 + ".") {
                unlink(thumbnailShard + "/" + name)
            }
            return true
        }
    }

    public func thumbnail(of sha256: String, size: Int) async throws -> ByteBuffer? {
        guard let path = thumbnailPath(of: sha256, size: size) else { return nil }
        return try await pool.runIfActive {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                if errno == ENOENT { return nil }
                throw Self.failure("cannot open \(path)")
            }
            defer { close(fd) }
            var info = stat()
            guard fstat(fd, &info) == 0 else { throw Self.failure("cannot stat \(path)") }
            let length = Int(info.st_size)
            var buffer = ByteBufferAllocator().buffer(capacity: length)
            var read = 0
            while read < length {
                let count = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length - read) { bytes in
                    max(0, pread(fd, bytes.baseAddress, length - read, off_t(read)))
                }
                guard count > 0 else { throw Self.failure("cannot read \(path)") }
                read += count
            }
            return buffer
        }
    }

    public func keepThumbnail(_ bytes: ByteBuffer, of sha256: String, size: Int) async throws {
        guard let target = thumbnailPath(of: sha256, size: size) else { throw BlobStoreError(.notFound, "no blob \(sha256)") }
        let temporary = uploads + "/" + UUID().uuidString.lowercased() + ".thumbnail"
        try await pool.runIfActive {
            let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o640)
            guard fd >= 0 else { throw Self.failure("cannot create \(temporary)") }
            // Synced before the rename: a thumbnail that came back empty after a crash would read
            // as "cannot be made one" for good.
            let written = bytes.withUnsafeReadableBytes { writeAll(fd, $0) } && fsync(fd) == 0
            close(fd)
            guard written else {
                let failure = Self.failure("cannot write \(temporary)")
                unlink(temporary)
                throw failure
            }
            try self.move(temporary, to: target)
        }
    }

    /// Where blob `sha256` lives; nil for a name that is not a SHA-256 (never a path outside).
    func path(of sha256: String) -> String? {
        guard Media.isSHA256(sha256) else { return nil }
        return blobs + "/" + sha256.prefix(2) + "/" + sha256
    }

    private func thumbnailPath(of sha256: String, size: Int) -> String? {
        guard Media.isSHA256(sha256), size >= 0 else { return nil }
        return thumbnailFolder(of: sha256) + "/" + sha256 + "." + String(size)
    }

    /// The folder of a blob's thumbnails (`sha256` already checked to be one).
    private func thumbnailFolder(of sha256: String) -> String {
        thumbnails + "/" + sha256.prefix(2)
    }

    private static func folder(of path: String) -> String {
        String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
    }

    /// Renames `temporary` to `target`, making the shard folder first, and fsyncs the folder
    /// (run on the pool).
    private func move(_ temporary: String, to target: String) throws {
        let shard = Self.folder(of: target)
        if mkdir(shard, 0o750) != 0 && errno != EEXIST { throw Self.failure("cannot create \(shard)") }
        guard rename(temporary, target) == 0 else {
            let failure = Self.failure("cannot rename \(temporary) to \(target)")
            unlink(temporary)
            throw failure
        }
        let directory = open(shard, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { throw Self.failure("cannot open \(shard)") }
        defer { close(directory) }
        guard fsync(directory) == 0 else { throw Self.failure("cannot fsync \(shard)") }
    }

    /// Moves a finished upload to its name and makes both durable (run on the pool).
    fileprivate func keep(_ temporary: String, as sha256: String) throws {
        guard let target = path(of: sha256) else { throw Self.failure("not a SHA-256: \(sha256)") }
        // The same bytes are kept already: they are kept again now (the sweeper goes by this time).
        if utimensat(AT_FDCWD, target, nil, 0) == 0 {
            unlink(temporary)
            return
        }
        try move(temporary, to: target)
    }

    fileprivate func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await pool.runIfActive(work)
    }

    static func failure(_ what: String) -> BlobStoreError {
        BlobStoreError(.unavailable, "\(what): \(String(cString: strerror(errno)))")
    }
}

/// One upload to a ``FileBlobStore``: a temporary file, hashed as it is written.
private final class FileUpload: BlobUpload {
    private struct State {
        var fd: Int32
        var hasher = SHA256()
        var size: Int64 = 0
        var closed = false
    }

    private let store: FileBlobStore
    private let path: String
    private let state: Mutex<State>

    init(store: FileBlobStore, fd: Int32, path: String) {
        self.store = store
        self.path = path
        self.state = Mutex(State(fd: fd))
    }

    func write(_ bytes: ByteBuffer) async throws {
        let path = self.path
        try await store.run { [self] in
            try state.withLock { state in
                guard !state.closed else { throw BlobStoreError(.closed, "the upload is over") }
                try bytes.withUnsafeReadableBytes { raw in
                    state.hasher.update(bufferPointer: raw)
                    guard writeAll(state.fd, raw) else { throw FileBlobStore.failure("cannot write \(path)") }
                }
                state.size += Int64(bytes.readableBytes)
            }
        }
    }

    func finish() async throws -> StoredBlob {
        let path = self.path
        let blob: StoredBlob = try await store.run { [self] in
            try state.withLock { state in
                guard !state.closed else { throw BlobStoreError(.closed, "the upload is over") }
                state.closed = true
                let synced = fsync(state.fd) == 0
                close(state.fd)
                guard synced else {
                    unlink(path)
                    throw FileBlobStore.failure("cannot fsync \(path)")
                }
                let digest = state.hasher.finalize().hex
                return StoredBlob(sha256: digest, size: state.size)
            }
        }
        do {
            try await store.run { [store] in try store.keep(path, as: blob.sha256) }
        } catch {
            unlink(path)
            throw error
        }
        return blob
    }

    func abandon() async {
        let path = self.path
        let open = state.withLock { state -> Int32? in
            guard !state.closed else { return nil }
            state.closed = true
            return state.fd
        }
        guard let fd = open else { return }
        close(fd)
        unlink(path)
    }
}

/// Writes all of `bytes` to `fd`, going on after a short write or an interruption; false on an
/// error (`errno` says which).
private func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
    guard var next = bytes.baseAddress else { return true }
    var left = bytes.count
    while left > 0 {
        let count = write(fd, next, left)
        if count < 0 {
            if errno == EINTR { continue }
            return false
        }
        next += count
        left -= count
    }
    return true
}
