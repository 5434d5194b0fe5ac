import NIOCore
import NIOPosix
import ParleyMetadata
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An upload held on local disk while its metadata is looked at, so that any byte of it can be
/// read (a video's `moov` comes after its media; a HEIF's Exif item lies where `iloc` says), then
/// copied to the blob store with ``LocationEdits`` applied. The file is unlinked as soon as it is
/// made: it goes away when it is closed, or when the process dies, and leaves nothing behind.
///
/// Every file operation runs on a thread pool, never on the event loop that called.
public final class UploadSpool: Sendable {
    private let fd: Mutex<Int32?>
    private let pool: NIOThreadPool
    private let size = Atomic<Int>(0)

    private init(fd: Int32, pool: NIOThreadPool) {
        self.fd = Mutex(fd)
        self.pool = pool
    }

    /// A new, empty spool file in `directory`.
    public static func create(in directory: String, pool: NIOThreadPool = .singleton) async throws -> UploadSpool {
        let fd: Int32 = try await pool.runIfActive {
            let path = directory + "/parley-upload-XXXXXX"
            var template = Array(path.utf8CString)
            let fd = template.withUnsafeMutableBufferPointer { name in name.baseAddress.map { mkstemp($0) } ?? -1 }
            guard fd >= 0 else { throw FileBlobStore.failure("cannot create a spool file in \(directory)") }
            unlink(String(cString: template))
            return fd
        }
        return UploadSpool(fd: fd, pool: pool)
    }

    /// How many bytes were written.
    public var count: Int { size.load(ordering: .relaxed) }

    /// Appends bytes (one writer, in order).
    public func write(_ bytes: ByteBuffer) async throws {
        let offset = count
        try await pool.runIfActive { [self] in
            let fd = try open()
            let written = bytes.withUnsafeReadableBytes { raw in
                guard let base = raw.baseAddress else { return true }
                return Bytes.moveAll(raw.count) { done in pwrite(fd, base + done, raw.count - done, off_t(offset + done)) }
            }
            guard written else { throw FileBlobStore.failure("cannot write a spool file") }
        }
        size.add(bytes.readableBytes, ordering: .relaxed)
    }

    /// Runs `body` on the thread pool with the spooled bytes to read.
    public func read<T: Sendable>(_ body: @escaping @Sendable (Bytes) throws -> T) async throws -> T {
        let count = self.count
        return try await pool.runIfActive { [self] in try body(Bytes(fd: try open(), count: count)) }
    }

    /// Copies the spooled bytes to `upload` in pieces of `chunkSize`, with `edits` applied.
    public func copy(to upload: any BlobUpload, applying edits: LocationEdits, chunkSize: Int = 64 * 1024) async throws {
        let count = self.count
        var offset = 0
        while offset < count {
            let start = offset, length = min(chunkSize, count - offset)
            let piece: ByteBuffer = try await pool.runIfActive { [self] in
                let fd = try open()
                var buffer = ByteBufferAllocator().buffer(capacity: length)
                let read = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { raw in
                    let slice = UnsafeMutableRawBufferPointer(rebasing: raw[..<length])
                    guard Bytes.readAll(fd, into: slice, at: start) else { return 0 }
                    edits.apply(to: slice, at: start)
                    return length
                }
                guard read == length else { throw FileBlobStore.failure("cannot read a spool file") }
                return buffer
            }
            try await upload.write(piece)
            offset += length
        }
    }

    /// Closes (and so removes) the file; later calls fail.
    public func close() {
        guard let fd = fd.withLock({ fd -> Int32? in defer { fd = nil }; return fd }) else { return }
        closeDescriptor(fd)
    }

    private func open() throws -> Int32 {
        guard let fd = fd.withLock({ $0 }) else { throw BlobStoreError(.closed, "the spool file is closed") }
        return fd
    }

    deinit {
        close()
    }

    /// The spooled bytes, read with `pread` (on the pool: ``UploadSpool/read(_:)``).
    public struct Bytes: ByteSource {
        let fd: Int32
        public let count: Int

        public func bytes(_ range: Range<Int>) throws -> [UInt8] {
            var bytes = [UInt8](repeating: 0, count: range.count)
            let read = bytes.withUnsafeMutableBytes { Self.readAll(fd, into: $0, at: range.lowerBound) }
            guard read else { throw FileBlobStore.failure("cannot read a spool file") }
            return bytes
        }

        /// Fills `buffer` from `offset`; false on an error or an early end.
        static func readAll(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int) -> Bool {
            guard let base = buffer.baseAddress else { return true }
            return moveAll(buffer.count) { done in pread(fd, base + done, buffer.count - done, off_t(offset + done)) }
        }

        /// Calls `move` (a `pread` or `pwrite` of what is left, given how much is done) until
        /// `count` bytes have moved, going on after a short count or an interruption; false on an
        /// error or an early end.
        static func moveAll(_ count: Int, _ move: (_ done: Int) -> Int) -> Bool {
            var done = 0
            while done < count {
                let moved = move(done)
                if moved < 0, errno == EINTR { continue }
                guard moved > 0 else { return false }
                done += moved
            }
            return true
        }
    }
}

/// `close(2)`, under a name the spool's own `close()` does not hide.
private func closeDescriptor(_ fd: Int32) {
    close(fd)
}
