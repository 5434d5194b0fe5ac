import Foundation
import NIOCore
import ParleyMedia
import ParleyTestKit
import Testing

@Suite struct FileBlobStoreTests {
    @Test(arguments: BlobStoreContract.cases)
    func contract(_ contractCase: BlobStoreContract.Case) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-blobs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await contractCase.run(try FileBlobStore(directory: directory, now: Date()))
    }

    @Test func blobsAreNamedFilesAndUploadsInProgressAreNot() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-blobs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try FileBlobStore(directory: directory, now: Date())
        let upload = try await store.beginUpload()
        try await upload.write(ByteBuffer(string: "hello"))
        let inProgress = try FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent("uploads").path)
        #expect(inProgress.count == 1 && inProgress[0].hasSuffix(".part"))
        let blob = try await upload.finish()
        #expect(blob.sha256 == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
        let kept = directory.appendingPathComponent("blobs/2c/\(blob.sha256)").path
        #expect(FileManager.default.contents(atPath: kept) == Data("hello".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent("uploads").path).isEmpty)
    }

    @Test func uploadsLeftByADeadProcessAreRemovedOnceOld() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-blobs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try FileBlobStore(directory: directory, now: Date())
        let uploads = directory.appendingPathComponent("uploads")
        let old = uploads.appendingPathComponent("old.part").path
        let recent = uploads.appendingPathComponent("recent.part").path
        #expect(FileManager.default.createFile(atPath: old, contents: Data([1, 2, 3])))
        #expect(FileManager.default.createFile(atPath: recent, contents: Data([4])))
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-7200)], ofItemAtPath: old)
        _ = try FileBlobStore(directory: directory, leftoversAfter: .seconds(3600), now: Date())
        #expect(!FileManager.default.fileExists(atPath: old))
        #expect(FileManager.default.fileExists(atPath: recent), "another node's upload may be under way")
    }
}
