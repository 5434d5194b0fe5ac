import Foundation

/// One folder for the files a test process makes (databases, certificates), removed when the
/// process exits, so test runs do not pile up folders in the temporary directory.
public enum Scratch {
    /// `parley-tests-PID-…` in the temporary directory, made on first use.
    public static let folder: URL = {
        let folder = FileManager.default.temporaryDirectory
            .appendingPathComponent("parley-tests-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8))")
        try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        atexit {
            // Stores' background threads may still be writing (a WAL file made anew while the
            // folder is emptied): try a few times.
            for _ in 0..<5 {
                do {
                    try FileManager.default.removeItem(at: Scratch.folder)
                    return
                } catch {
                    usleep(20_000)
                }
            }
        }
        return folder
    }()

    /// A fresh path in the folder: `prefix-UUID` plus `suffix` (e.g. `.sqlite`); nothing is created.
    public static func path(_ prefix: String, suffix: String = "") -> String {
        folder.appendingPathComponent("\(prefix)-\(UUID().uuidString)\(suffix)").path
    }
}
