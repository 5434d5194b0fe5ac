import Foundation
import ParleyModel
import Testing

/// Apps' fields: what a client may send, and that they come back as sent.
@Suite struct MetadataTests {
    func decoded(_ json: String) throws -> Metadata {
        try API.makeDecoder().decode(Metadata.self, from: Data(json.utf8))
    }

    func refusal(_ json: String) -> String? {
        do {
            try decoded(json).validate(field: "metadata")
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func everyKindOfJSONValueReadsBackExactly() throws {
        let json = #"{"a":null,"b":true,"c":9007199254740993,"d":-0.25,"e":"é \"q\" / 😀","f":[1,[2,{"g":[]}]],"h":{}}"#
        let metadata = try decoded(json)
        #expect(metadata.json == json, "compact, keys sorted, an integer past 2^53 exact")
        #expect(metadata.fields["c"] == .integer(9_007_199_254_740_993) && metadata.fields["d"] == .number(-0.25) && metadata.fields["b"] == .bool(true))
        #expect(Metadata(json: metadata.json) == metadata)
        #expect(try API.makeEncoder().encode(metadata) == Data(json.utf8), "the API writes the object itself")
        #expect(try decoded(#"{"z":1,"a":2}"#).json == #"{"a":2,"z":1}"#, "the same fields are the same bytes")
        #expect(Metadata(json: "[1]") == nil && Metadata(json: "7") == nil && Metadata(json: "{") == nil, "only an object is metadata")
    }

    @Test func whatIsRefusedIsNamed() throws {
        #expect(refusal(#"{"bio":"hi","n":[1,2,{"x":null}]}"#) == nil)
        let big = "{\"k\":\"" + String(repeating: "x", count: Metadata.bytesMax) + "\"}"
        #expect(refusal(big)?.contains("at most 4096 bytes of JSON") == true, "\(refusal(big) ?? "")")
        let fits = "{\"k\":\"" + String(repeating: "x", count: Metadata.bytesMax - 8) + "\"}"
        #expect(refusal(fits) == nil, "4,096 bytes exactly")
        let deep = String(repeating: "{\"a\":", count: Metadata.depthMax) + "1" + String(repeating: "}", count: Metadata.depthMax)
        #expect(refusal(deep) == nil, "\(Metadata.depthMax) levels")
        let deeper = String(repeating: "{\"a\":", count: Metadata.depthMax) + "[1]" + String(repeating: "}", count: Metadata.depthMax)
        #expect(refusal(deeper)?.contains("nested deeper than 8 levels") == true, "\(refusal(deeper) ?? "")")
        #expect(refusal(#"{"":1}"#)?.contains("keys are 1–128 bytes") == true)
        #expect(refusal("{\"" + String(repeating: "k", count: 129) + "\":1}")?.contains("keys are 1–128 bytes") == true)
        #expect(refusal(#"{"bell":"\u0007"}"#)?.contains("metadata.bell") == true, "a control character in a string, named by its path")
        #expect(refusal(#"{"a\u0001":1}"#)?.contains("metadata key") == true, "and in a key")
        #expect(refusal(#"{"tab\tok":"line\nbreak"}"#) == nil, "tab and newline are text")
        #expect(throws: (any Error).self) { try decoded(#"{"n":1e999}"#) }
    }
}
