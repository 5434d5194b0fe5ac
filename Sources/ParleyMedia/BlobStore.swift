import Crypto
import Foundation
import NIOCore

/// Where uploads' bytes are kept, by their SHA-256: the same bytes uploaded twice are kept once.
/// What describes an upload (its ID, type, uploader) is in the ``ChatStore``; a blob store knows
/// only bytes. Every store passes `BlobStoreContract` (in ParleyTestKit).
public protocol BlobStore: Sendable {
    /// Starts a new blob: its bytes go through the upload's ``BlobUpload/write(_:)``, and are kept
    /// once ``BlobUpload/finish()`` returns. Until then nothing of it can be read.
    func beginUpload() async throws -> any BlobUpload

    /// The size of the blob `sha256` names; nil when none is kept.
    func size(of sha256: String) async throws -> Int64?

    /// Bytes `range` of blob `sha256`, handed to `body` in order, at most `chunkSize` at a time
    /// (the next piece is read once `body` returned: a slow reader holds one piece). Throws
    /// ``BlobStoreError/Kind/notFound`` when there is no such blob, or the range passes its end.
    func read(_ sha256: String, range: Range<Int64>, chunkSize: Int, into body: (ByteBuffer) async throws -> Void) async throws

    /// Deletes blob `sha256` and its thumbnails, unless its bytes were last kept at or after
    /// `cutoff`: finishing an upload of bytes kept already counts as keeping them again, so the
    /// sweeper, deleting bytes no upload has, leaves those an upload just finished and is about to
    /// record. False when nothing was deleted.
    func delete(_ sha256: String, keptBefore cutoff: Date) async throws -> Bool

    /// Blob `sha256`'s thumbnail `size` pixels on its longer side: nil when none was kept, empty
    /// when the blob cannot be made one (kept so that it is not tried again).
    func thumbnail(of sha256: String, size: Int) async throws -> ByteBuffer?

    /// Keeps a thumbnail of blob `sha256` (empty bytes: it cannot be made one), replacing one
    /// kept already. Deleting the blob deletes it.
    func keepThumbnail(_ bytes: ByteBuffer, of sha256: String, size: Int) async throws
}

extension BlobStore {
    /// Deletes blob `sha256` and its thumbnails, however recently it was kept; false when there
    /// was none.
    @discardableResult
    public func delete(_ sha256: String) async throws -> Bool {
        try await delete(sha256, keptBefore: .distantFuture)
    }
}

/// A blob being written: one writer, writes in order.
public protocol BlobUpload: Sendable {
    /// Appends bytes.
    func write(_ bytes: ByteBuffer) async throws
    /// Makes every byte written durable under its SHA-256, and says what was kept. Bytes kept
    /// already (the same file uploaded before) are kept once.
    func finish() async throws -> StoredBlob
    /// Drops what was written: the upload was refused or cut off. Nothing of it stays.
    func abandon() async
}

/// A blob as kept: its name (SHA-256, 64 lowercase hex digits) and size.
public struct StoredBlob: Hashable, Sendable {
    public var sha256: String
    public var size: Int64

    public init(sha256: String, size: Int64) {
        self.sha256 = sha256
        self.size = size
    }
}

/// Why a blob store failed.
public struct BlobStoreError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// No such blob, or a range past its end.
        case notFound
        /// The upload was finished or abandoned already.
        case closed
        /// The disk or database refused (full, unreadable, unreachable).
        case unavailable
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { "\(kind.rawValue): \(message)" }
}

extension SHA256.Digest {
    /// 64 lowercase hex digits: a blob's name.
    public var hex: String {
        map { $0 < 16 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
    }
}
