import Foundation
import ParleyFuzzTargets
import ParleyModel
import Testing

/// Every input in the committed corpus (`Fuzz/corpus/TARGET`: what long runs found worth keeping,
/// and every input that was once a finding) and every seed still passes its target: a parser that
/// regresses on any of them fails here, without libFuzzer.
@Suite struct FuzzCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/corpus")

    @Test(arguments: FuzzTarget.allCases)
    func theCorpusAndTheSeedsPass(_ target: FuzzTarget) throws {
        let directory = Self.corpus.appendingPathComponent(target.rawValue)
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
        #expect(!files.isEmpty, "no corpus for \(target.rawValue) in \(directory.path)")
        var findings: [String] = []
        for file in files {
            do {
                try target.run(Array(try Data(contentsOf: file)))
            } catch {
                findings.append("\(file.lastPathComponent): \(error)")
            }
        }
        for (index, seed) in target.seeds.enumerated() {
            do {
                try target.run(seed)
            } catch {
                findings.append("seed \(index): \(error)")
            }
        }
        #expect(findings.isEmpty, "\(findings.joined(separator: "\n"))")
    }

    /// The seeds are inputs the parsers read, not ones they refuse: a run starts from the shapes
    /// the server really gets.
    @Test func theSeedsAreInputsTheParsersRead() {
        #expect(FuzzTarget.sendBody.seeds.allSatisfy { (try? JSONDecoder().decode(API.NewMessage.self, from: Data($0))) != nil })
        #expect(FuzzTarget.cursor.seeds.allSatisfy { StreamCursor(token: String(decoding: $0, as: UTF8.self)) != nil })
        #expect(FuzzTarget.binary.seeds.count == 6)
        #expect(FuzzTarget.frame.seeds.first.map { $0.count > 100 } == true)
    }
}
