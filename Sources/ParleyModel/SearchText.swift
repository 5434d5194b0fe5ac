import Foundation

/// How messages are found by the words typed (`GET /v1/search`), the same in every store: what
/// an index holds of a message, what a query asks of it, and where its words are in a text.
///
/// A word is a run of letters, digits and combining marks; everything else separates words.
/// Words compare without case or accents (`Élodie` finds `elodie`), and each word of a query
/// finds the words it begins (`hel` finds `hello`) — but a word of one character only itself.
/// (`a` would begin a good part of every language's words: a search for it would rank most of
/// the store.) Scripts written without spaces between words (Chinese, Japanese, Thai, Lao, Khmer,
/// Burmese) are indexed one character a word, and a query's
/// run of them is found as that run of characters, wherever it stands: `東京` finds
/// `東京タワーに行った`.
public enum SearchText {
    /// One word, or a run of characters of an unspaced script, as found in a text: its span in
    /// Unicode scalars and its folded form.
    struct Token {
        var range: Range<Int>
        var folded: String
        var unspaced: Bool
    }

    /// What a query asks: each term must be found.
    public enum Term: Hashable, Sendable {
        /// A word, folded: found by the words it begins.
        case word(String)
        /// Characters of an unspaced script, folded: found one after the other.
        case run([String])
    }

    /// Whether a query's word finds the words it begins, not only itself.
    public static func findsByBeginning(_ word: String) -> Bool { word.count > 1 }

    /// The most terms a query may have.
    public static let termsMax = 16

    /// Whether a scalar belongs to a script written without spaces between words.
    static func isUnspaced(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x3040...0x30FF, 0x31F0...0x31FF, 0xFF66...0xFF9F: true  // kana, halfwidth katakana
        case 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xF900...0xFAFF, 0x20000...0x3FFFF: true  // Han
        case 0x0E00...0x0EFF, 0x1000...0x109F, 0x1780...0x17FF: true  // Thai, Lao, Myanmar, Khmer
        default: false
        }
    }

    static func isWordPart(_ scalar: Unicode.Scalar) -> Bool {
        // ASCII, most of what people write, without the Unicode tables: through them, folding
        // a message's words was half of the CPU its indexing added to a commit (perf over
        // `parley-bench store`, 100,000 appends: 4.8 s of CPU, 3.5 s after, 2.3 s unindexed).
        if scalar.isASCII { return isASCIILetterOrDigit(UInt8(scalar.value)) }
        return switch scalar.properties.generalCategory {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
             .decimalNumber, .letterNumber, .otherNumber, .nonspacingMark, .spacingMark, .enclosingMark:
            true
        default:
            false
        }
    }

    static func isASCIILetterOrDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }

    /// Lowercased, accents and other combining marks dropped.
    static func fold(_ scalars: [Unicode.Scalar]) -> String {
        if scalars.allSatisfy(\.isASCII) {
            return String(unsafeUninitializedCapacity: scalars.count) { buffer in
                for (index, scalar) in scalars.enumerated() {
                    let byte = UInt8(scalar.value)
                    buffer[index] = (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
                }
                return scalars.count
            }
        }
        var text = String.UnicodeScalarView()
        text.append(contentsOf: scalars)
        let folded = String(text).lowercased().decomposedStringWithCanonicalMapping.unicodeScalars.filter {
            !isCombining($0)
        }
        return String(String.UnicodeScalarView(folded))
    }

    static func isCombining(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.isASCII { return false }
        return switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark: true
        default: false
        }
    }

    /// The words of `text`, in order.
    static func tokens(of text: String) -> [Token] {
        var tokens: [Token] = []
        var start: Int?
        var run: [Unicode.Scalar] = []
        func close(at end: Int) {
            if let begun = start, !run.isEmpty {
                let folded = fold(run)
                if !folded.isEmpty { tokens.append(Token(range: begun..<end, folded: folded, unspaced: false)) }
            }
            start = nil
            run = []
        }
        for (offset, scalar) in text.unicodeScalars.enumerated() {
            if isUnspaced(scalar) && !isCombining(scalar) {
                close(at: offset)
                tokens.append(Token(range: offset..<(offset + 1), folded: fold([scalar]), unspaced: true))
            } else if isWordPart(scalar) {
                if start == nil { start = offset }
                run.append(scalar)
            } else {
                close(at: offset)
            }
        }
        close(at: text.unicodeScalars.count)
        return tokens
    }

    /// What an index keeps of a message to find it by: its text and its attachments' captions,
    /// folded, one word apart from the next by a space (so a character of an unspaced script is
    /// a word of its own).
    public static func indexable(text: String, captions: [String] = []) -> String {
        ([text] + captions).flatMap { tokens(of: $0).map(\.folded) }.joined(separator: " ")
    }

    /// The terms of what was typed, in order, each once; at most ``termsMax``.
    public static func terms(of query: String) -> [Term] {
        var terms: [Term] = []
        var run: [String] = []
        func closeRun() {
            if !run.isEmpty { terms.append(.run(run)) }
            run = []
        }
        var previousEnd: Int?
        for token in tokens(of: query) {
            if token.unspaced {
                // Characters side by side in the query are a run; apart, two.
                if previousEnd != token.range.lowerBound { closeRun() }
                run.append(token.folded)
            } else {
                closeRun()
                terms.append(.word(token.folded))
            }
            previousEnd = token.range.upperBound
        }
        closeRun()
        var seen: Set<Term> = []
        return Array(terms.filter { seen.insert($0).inserted }.prefix(termsMax))
    }

    /// The terms as an FTS5 query over ``indexable(text:captions:)``: every term, a word as a
    /// prefix, a run as a phrase.
    public static func fts5Query(_ terms: [Term]) -> String {
        func quoted(_ text: String) -> String { "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
        return terms.map { term in
            switch term {
            case .word(let word): quoted(word) + (findsByBeginning(word) ? "*" : "")
            case .run(let characters): characters.map(quoted).joined(separator: " + ")
            }
        }.joined(separator: " AND ")
    }

    /// Where the terms are in `text`: the spans (in Unicode scalars) of the words a word term
    /// begins and of the runs a run term is, in order, not overlapping.
    public static func matches(of terms: [Term], in text: String) -> [Range<Int>] {
        let tokens = tokens(of: text)
        var found: [Range<Int>] = []
        for term in terms {
            switch term {
            case .word(let word):
                for token in tokens where !token.unspaced && (findsByBeginning(word) ? token.folded.hasPrefix(word) : token.folded == word) {
                    found.append(token.range)
                }
            case .run(let characters):
                guard !characters.isEmpty, tokens.count >= characters.count else { continue }
                for start in 0...(tokens.count - characters.count) {
                    let slice = tokens[start..<(start + characters.count)]
                    guard zip(slice, characters).allSatisfy({ $0.unspaced && $0.folded == $1 }),
                          zip(slice.dropFirst(), slice).allSatisfy({ $0.range.lowerBound == $1.range.upperBound })
                    else { continue }
                    found.append(slice.first!.range.lowerBound..<slice.last!.range.upperBound)
                }
            }
        }
        var merged: [Range<Int>] = []
        for range in found.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, range.lowerBound < last.upperBound {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        return merged
    }

    /// A piece of `text` around its first match, at most about `length` scalars, `…` where it
    /// was cut, with the matches' spans within it.
    public static func snippet(of text: String, terms: [Term], length: Int = 160) -> (text: String, highlights: [Range<Int>]) {
        let scalars = Array(text.unicodeScalars)
        let matches = matches(of: terms, in: text)
        guard scalars.count > length else { return (text, matches) }
        let first = matches.first?.lowerBound ?? 0
        var start = max(0, min(first - length / 4, scalars.count - length))
        // Not inside a word, when a space is near.
        if start > 0, let space = scalars[max(0, start - 12)..<start].lastIndex(where: { $0.properties.isWhitespace }) { start = space + 1 }
        let end = min(scalars.count, start + length)
        var piece = String.UnicodeScalarView()
        let lead = start > 0
        if lead { piece.append("…") }
        piece.append(contentsOf: scalars[start..<end])
        if end < scalars.count { piece.append("…") }
        let shift = start - (lead ? 1 : 0)
        let inside = matches.filter { $0.lowerBound >= start && $0.upperBound <= end }.map { ($0.lowerBound - shift)..<($0.upperBound - shift) }
        return (String(piece), inside)
    }
}
