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
/// name holds the same bytes, so the upload's copy is dropped.
///
/// Every file operation runs on a thread pool, never on the event loop that called.
public final class FileBlobStore: BlobStore {
    public let directory: URL
    private let blobs: String
    private let uploads: String
    private let pool: NIOThreadPool

    /// Opens (creating) the store under `directory`, and removes uploads left over by a process
    /// that died mid-upload more than `leftoversAfter` ago (other nodes sharing the directory may
    /// be writing theirs now).
    public init(directory: URL, pool: NIOThreadPool = .singleton, leftoversAfter: Duration = .seconds(3600)) throws {
        self.directory = directory
        self.blobs = directory.appendingPathComponent("blobs").path
        self.uploads = directory.appendingPathComponent("uploads").path
        self.pool = pool
        let files = FileManager.default
        try files.createDirectory(atPath: blobs, withIntermediateDirectories: true)
        try files.createDirectory(atPath: uploads, withIntermediateDirectories: true)
        let cutoff = Date().addingTimeInterval(-Double(leftoversAfter.components.seconds))
        for name in (try? files.contentsOfDirectory(atPath: uploads)) ?? [] where name.hasSuffix(".part") {
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

    @discardableResult
    public func delete(_ sha256: String) async throws -> Bool {
        guard let path = path(of: sha256) else { return false }
        return try await pool.runIfActive {
            guard unlink(path) == 0 else {
                if errno == ENOENT { return false }
                throw Self.failure("cannot delete \(path)")
            }
            return true
        }
    }

    /// Where blob `sha256` lives; nil for a name that is not a SHA-256 (never a path outside).
    func path(of sha256: String) -> String? {
        guard Media.isSHA256(sha256) else { return nil }
        return blobs + "/" + sha256.prefix(2) + "/" + sha256
    }

    /// Moves a finished upload to its name and makes both durable (run on the pool).
    fileprivate func keep(_ temporary: String, as sha256: String) throws {
        guard let target = path(of: sha256) else { throw Self.failure("not a SHA-256: \(sha256)") }
        let shard = String(target[..<(target.lastIndex(of: "/") ?? target.endIndex)])
        if mkdir(shard, 0o750) != 0 && errno != EEXIST { throw Self.failure("cannot create \(shard)") }
        if access(target, F_OK) == 0 {
            unlink(temporary)  // the same bytes are kept already
            return
        }
        guard rename(temporary, target) == 0 else { throw Self.failure("cannot rename \(temporary) to \(target)") }
        let directory = open(shard, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { throw Self.failure("cannot open \(shard)") }
        defer { close(directory) }
        guard fsync(directory) == 0 else { throw Self.failure("cannot fsync \(shard)") }
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
