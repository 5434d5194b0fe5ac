import Crypto
import Foundation
import NIOCore
import ParleyMedia

/// The one contract every ``BlobStore`` passes: test targets run each case against each store
/// (`@Test(arguments: BlobStoreContract.cases)`). A broken rule throws ``ContractViolation``.
public enum BlobStoreContract {
    public typealias Case = ContractCase<any BlobStore>

    static func check(_ condition: Bool, _ message: @autoclosure () -> String, line: Int = #line) throws {
        try contractCheck(condition, message, file: "BlobStoreContract.swift", line: line)
    }

    /// `count` bytes that differ from one run to the next (a shared store keeps earlier runs'
    /// blobs), in a pattern a misplaced piece would break.
    static func bytes(_ count: Int) -> [UInt8] {
        let salt = UInt8.random(in: 0...255)
        return (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) ^ salt }
    }

    static func sha256(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).hex
    }

    static func store(_ bytes: [UInt8], in store: any BlobStore, pieces: Int = 7) async throws -> StoredBlob {
        let upload = try await store.beginUpload()
        let size = max(1, (bytes.count + pieces - 1) / pieces)
        var offset = 0
        while offset < bytes.count {
            try await upload.write(ByteBuffer(bytes: bytes[offset..<min(offset + size, bytes.count)]))
            offset += size
        }
        return try await upload.finish()
    }

    static func read(_ sha256: String, _ range: Range<Int64>, from store: any BlobStore, chunkSize: Int = 64 * 1024) async throws -> [UInt8] {
        var read: [UInt8] = []
        try await store.read(sha256, range: range, chunkSize: chunkSize) { piece in
            try check(piece.readableBytes <= chunkSize, "a piece of \(piece.readableBytes) bytes, over the \(chunkSize) asked")
            read += piece.readableBytesView
        }
        return read
    }

    public static let cases: [Case] = [
        Case(name: "bytes written in pieces are kept under their SHA-256 and read back whole and by range") { store in
            let bytes = bytes(1_000_003)
            let blob = try await Self.store(bytes, in: store)
            try check(blob == StoredBlob(sha256: sha256(bytes), size: Int64(bytes.count)), "kept as \(blob)")
            try check(try await store.size(of: blob.sha256) == Int64(bytes.count), "its size")
            try check(try await read(blob.sha256, 0..<Int64(bytes.count), from: store) == bytes, "read whole")
            try check(try await read(blob.sha256, 0..<Int64(bytes.count), from: store, chunkSize: 4_096) == bytes, "read in small pieces")
            try check(try await read(blob.sha256, 65_000..<200_001, from: store) == Array(bytes[65_000..<200_001]), "a range inside")
            try check(try await read(blob.sha256, 999_000..<1_000_003, from: store) == Array(bytes[999_000...]), "the last bytes")
            try check(try await read(blob.sha256, 5..<5, from: store).isEmpty, "an empty range")
            do {
                _ = try await read(blob.sha256, 999_000..<1_000_004, from: store)
                try check(false, "a range past the end was read")
            } catch let error as BlobStoreError {
                try check(error.kind == .notFound, "past the end: \(error)")
            }
            try check(try await store.delete(blob.sha256), "deleted")
            try check(try await store.size(of: blob.sha256) == nil, "gone")
        },
        Case(name: "the same bytes twice are kept once; other bytes apart") { store in
            let bytes = bytes(70_000)
            let first = try await Self.store(bytes, in: store, pieces: 3)
            let second = try await Self.store(bytes, in: store, pieces: 11)
            try check(first == second, "\(first) then \(second)")
            var other = bytes
            other[69_999] ^= 1
            let third = try await Self.store(other, in: store)
            try check(third.sha256 != first.sha256 && third.size == first.size, "one byte apart: \(third)")
            try check(try await read(first.sha256, 0..<70_000, from: store) == bytes, "the first")
            try check(try await read(third.sha256, 0..<70_000, from: store) == other, "the other")
            try check(try await store.delete(first.sha256), "deleted once")
            try check(!(try await store.delete(first.sha256)), "nothing left to delete")
            try check(try await store.size(of: third.sha256) == 70_000, "the other stays")
            try await store.delete(third.sha256)
        },
        Case(name: "an abandoned upload leaves nothing; a finished one cannot be written again") { store in
            let bytes = bytes(40_000)
            let upload = try await store.beginUpload()
            try await upload.write(ByteBuffer(bytes: bytes))
            await upload.abandon()
            try check(try await store.size(of: sha256(bytes)) == nil, "abandoned bytes were kept")
            do {
                try await upload.write(ByteBuffer(bytes: bytes))
                try check(false, "an abandoned upload took more bytes")
            } catch let error as BlobStoreError {
                try check(error.kind == .closed, "after abandoning: \(error)")
            }
            let kept = try await Self.store(bytes, in: store)
            try check(kept.sha256 == sha256(bytes), "the same bytes, uploaded again after")
            try await store.delete(kept.sha256)
        },
        Case(name: "a delete with a cutoff leaves bytes kept since; keeping the same bytes again counts as keeping them") { store in
            let bytes = bytes(30_000)
            let first = try await Self.store(bytes, in: store)
            let beforeIt = Date().addingTimeInterval(-60)
            try check(!(try await store.delete(first.sha256, keptBefore: beforeIt)), "kept after the cutoff: not deleted")
            try check(try await store.size(of: first.sha256) == 30_000, "still there")
            try await Task.sleep(for: .milliseconds(20))
            let between = Date()
            try await Task.sleep(for: .milliseconds(20))
            let again = try await Self.store(bytes, in: store)
            try check(again == first, "the same bytes again: \(again)")
            try check(!(try await store.delete(first.sha256, keptBefore: between)), "kept again after the cutoff: not deleted")
            try check(try await store.delete(first.sha256, keptBefore: Date().addingTimeInterval(60)), "kept before the cutoff: deleted")
            try check(try await store.size(of: first.sha256) == nil, "gone")
        },
        Case(name: "thumbnails are kept beside their blob, replaced, read back, and deleted with it") { store in
            let blob = try await Self.store(bytes(5_000), in: store)
            try check(try await store.thumbnail(of: blob.sha256, size: 320) == nil, "none before one is kept")
            let small = bytes(1_234), large = bytes(9_999)
            try await store.keepThumbnail(ByteBuffer(bytes: small), of: blob.sha256, size: 160)
            try await store.keepThumbnail(ByteBuffer(bytes: [1, 2, 3]), of: blob.sha256, size: 640)
            try await store.keepThumbnail(ByteBuffer(bytes: large), of: blob.sha256, size: 640)
            try await store.keepThumbnail(ByteBuffer(), of: blob.sha256, size: 320)
            try check(try await store.thumbnail(of: blob.sha256, size: 160).map { Array($0.readableBytesView) } == small, "the small one")
            try check(try await store.thumbnail(of: blob.sha256, size: 640).map { Array($0.readableBytesView) } == large, "the large one, replaced")
            try check(try await store.thumbnail(of: blob.sha256, size: 320)?.readableBytes == 0, "an empty one: none can be made")
            try check(try await store.thumbnail(of: "../" + blob.sha256, size: 160) == nil, "a name that is no SHA-256")
            try check(try await store.delete(blob.sha256), "the blob deleted")
            for size in [160, 320, 640] {
                try check(try await store.thumbnail(of: blob.sha256, size: size) == nil, "thumbnail \(size) deleted with it")
            }
        },
        Case(name: "an empty blob; names that are no SHA-256 find nothing") { store in
            let empty = try await store.beginUpload().finish()
            try check(empty == StoredBlob(sha256: sha256([]), size: 0), "empty: \(empty)")
            try check(try await read(empty.sha256, 0..<0, from: store).isEmpty, "read empty")
            for name in ["../../etc/passwd", String(repeating: "A", count: 64), "", String(repeating: "0", count: 63), sha256([1, 2, 3])] {
                try check(try await store.size(of: name) == nil, "size of \(name)")
                try check(!(try await store.delete(name)), "delete \(name)")
                do {
                    _ = try await read(name, 0..<1, from: store)
                    try check(false, "read \(name)")
                } catch let error as BlobStoreError {
                    try check(error.kind == .notFound, "\(name): \(error)")
                }
            }
            try await store.delete(empty.sha256)
        },
    ]
}
