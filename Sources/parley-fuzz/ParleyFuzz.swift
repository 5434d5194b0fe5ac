import Foundation
import ParleyFuzzTargets

#if PARLEY_LIBFUZZER
import CLibFuzzer

// Built by Scripts/fuzz with -sanitize=fuzzer: libFuzzer's driver runs the target named by
// PARLEY_FUZZ_TARGET; a finding aborts, which libFuzzer records as a crash. The package manager
// names an executable's entry point after its module (and points `main` at it), so the entry
// point is that name, handing the command line to libFuzzer.
private let target: FuzzTarget = {
    let name = ProcessInfo.processInfo.environment["PARLEY_FUZZ_TARGET"] ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        FileHandle.standardError.write(Data("PARLEY_FUZZ_TARGET must be one of \(FuzzTarget.allCases.map(\.rawValue))\n".utf8))
        exit(2)
    }
    return target
}()

@_cdecl("parley_fuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    // `--write-seeds DIR`: the target's seeds as files, for the run to start from.
    if argc == 3, let flag = argv?[1], String(cString: flag) == "--write-seeds", let directory = argv?[2] {
        let path = String(cString: directory)
        for (index, seed) in target.seeds.enumerated() {
            guard FileManager.default.createFile(atPath: "\(path)/seed-\(index)", contents: Data(seed)) else {
                FileHandle.standardError.write(Data("cannot write \(path)/seed-\(index)\n".utf8))
                return 1
            }
        }
        return 0
    }
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in fuzzOneInput(data, size) }
}

func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    do {
        try target.run(bytes)
    } catch {
        FileHandle.standardError.write(Data("finding in \(target.rawValue): \(error)\n".utf8))
        abort()
    }
    return 0
}
#else
/// Without libFuzzer: runs inputs through a target, one file each (a corpus, or a crash to
/// reproduce), and reports what did not hold.
@main
struct ParleyFuzz {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard let name = arguments.first, let target = FuzzTarget(rawValue: name), arguments.count > 1 else {
            print("""
                usage: parley-fuzz TARGET FILE-OR-DIRECTORY...
                Runs each input through TARGET once (Scripts/fuzz runs them under libFuzzer).
                Targets: \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", "))
                """)
            exit(arguments.first == "--help" ? 0 : 2)
        }
        var inputs = 0
        var findings = 0
        for path in arguments.dropFirst() {
            let files: [String]
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
                files = ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { "\(path)/\($0)" }
            } else {
                files = [path]
            }
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else {
                    print("cannot read \(file)")
                    findings += 1
                    continue
                }
                inputs += 1
                do {
                    try target.run(Array(data))
                } catch {
                    findings += 1
                    print("\(file): \(error)")
                }
            }
        }
        print("\(target.rawValue): \(inputs) inputs, \(findings) findings")
        exit(findings == 0 ? 0 : 1)
    }
}
#endif
