import Foundation
import ParleyModel
import Testing

/// What an index keeps of a text, what a query asks, and where a query's words are.
@Suite struct SearchTextTests {
    /// ASCII takes a shorter way than the Unicode tables: it must end where they would. Each
    /// ASCII character, alone and between letters, upper and lower case, is folded as the
    /// general rule (lowercase, then letters and digits kept) folds it.
    @Test func asciiIsFoldedAsTheUnicodeRulesFoldIt() {
        for value in UInt8(0)..<128 {
            let character = String(UnicodeScalar(value))
            let text = "Ab\(character)Yz \(character)"
            let expected = text.lowercased().unicodeScalars
                .split { !($0.properties.isAlphabetic || $0.properties.numericType != nil) }
                .map { String(String.UnicodeScalarView($0)) }.joined(separator: " ")
            #expect(SearchText.indexable(text: text) == expected, "\(value)")
        }
        #expect(SearchText.indexable(text: "MiXeD 123 Çava") == "mixed 123 cava", "ASCII beside a word that is not")
    }

    @Test func wordsAreFoldedAndUnspacedScriptsKeptOneCharacterAWord() {
        #expect(SearchText.indexable(text: "Élodie's CAFÉ, 2nd floor!") == "elodie s cafe 2nd floor")
        #expect(SearchText.indexable(text: "東京タワーに行った") == "東 京 タ ワ ー に 行 っ た")
        #expect(SearchText.indexable(text: "see ภาษาไทย ok") == "see ภ า ษ า ไ ท ย ok")
        #expect(SearchText.indexable(text: "서울에서 만나요") == "서울에서 만나요", "Korean is written with spaces: its words are words")
        #expect(SearchText.indexable(text: "photo", captions: ["la vue 🏔", "Zürich"]) == "photo la vue zurich", "captions too; emoji are no words")
    }

    @Test func aQueryIsWordsAndRuns() {
        #expect(SearchText.terms(of: "  Hello, WÖRLD hello ") == [.word("hello"), .word("world")], "each once")
        #expect(SearchText.terms(of: "東京 タワー") == [.run(["東", "京"]), .run(["タ", "ワ", "ー"])])
        #expect(SearchText.terms(of: "meet東京") == [.word("meet"), .run(["東", "京"])])
        #expect(SearchText.terms(of: "!!! ...").isEmpty)
        #expect(SearchText.terms(of: (0..<40).map { "w\($0)" }.joined(separator: " ")).count == SearchText.termsMax)
        #expect(SearchText.fts5Query([.word("he said \"hi"), .run(["東", "京"])]) == #""he said ""hi"* AND "東" + "京""#,
                "quotes doubled inside FTS5 strings")
    }

    @Test func matchesAreTheWordsAQueryBeginsAndTheRunsItIs() {
        let text = "Hello Élodie — hello again! 東京タワー, not 京東"
        let terms = SearchText.terms(of: "hel elo 東京")
        let scalars = Array(text.unicodeScalars)
        let marked = SearchText.matches(of: terms, in: text).map { String(String.UnicodeScalarView(scalars[$0])) }
        #expect(marked == ["Hello", "Élodie", "hello", "東京"], "\(marked)")
        #expect(SearchText.matches(of: [.word("lo")], in: "hello").isEmpty, "a word is found by its beginning only")
        #expect(SearchText.matches(of: [.word("a")], in: "an apple a day").count == 1, "a word of one letter only itself")
        #expect(SearchText.fts5Query([.word("a"), .word("ab")]) == #""a" AND "ab"*"#)
    }

    @Test func aLongTextIsCutAroundItsFirstMatch() {
        let text = String(repeating: "filler words here ", count: 30) + "the needle is here " + String(repeating: "and more after ", count: 30)
        let (piece, highlights) = SearchText.snippet(of: text, terms: [.word("needle")], length: 80)
        let scalars = Array(piece.unicodeScalars)
        #expect(piece.hasPrefix("…") && piece.hasSuffix("…") && scalars.count <= 84, "\(piece)")
        #expect(highlights.map { String(String.UnicodeScalarView(scalars[$0])) } == ["needle"])
        let short = SearchText.snippet(of: "a needle", terms: [.word("needle")])
        #expect(short.text == "a needle" && short.highlights == [2..<8])
    }
}
