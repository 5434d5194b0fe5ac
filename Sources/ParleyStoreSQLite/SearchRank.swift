import GRDB
import GRDBSQLite

/// `parley_rank(message_search)`: how well a row of the search index matches, lower first as
/// FTS5's `bm25` orders — BM25's part for how often each term is in the text and how long the
/// text is, without its part for how rare each term is in the whole index.
///
/// Every result holds every term, so that missing part only weighs the terms against each other;
/// `bm25` computes it by running each term's query over the whole index once more. For a word in
/// four of ten messages, over a million, that was half a search: p50 18.6 and p99 47.7 ms with
/// `bm25`, 12.0 and 25.1 ms with this function (`Scripts/bench-search`, docs/BENCHMARKS.md).
enum SearchRank {
    static let name = "parley_rank"

    /// BM25's usual constants: how fast repeats stop counting, and how much length counts.
    static let k1 = 1.2
    static let b = 0.75

    /// Adds the function to a connection (every connection of the pool).
    static func register(_ db: Database) {
        let api = FTS5.api(db)
        guard let create = api.pointee.xCreateFunction else { return }
        _ = create(UnsafeMutablePointer(mutating: api), name, nil, { extensionAPI, fts, context, _, _ in
            guard let api = extensionAPI?.pointee, let fts, let instanceCount = api.xInstCount, let instance = api.xInst,
                  let phraseCount = api.xPhraseCount, let columnSize = api.xColumnSize, let totalSize = api.xColumnTotalSize,
                  let rowCount = api.xRowCount
            else {
                sqlite3_result_error(context, "parley_rank: FTS5 API missing", -1)
                return
            }
            // Column 0 is the text; the conversation words in column 1 do not rank.
            var instances: Int32 = 0, length: Int32 = 0, tokens: Int64 = 0, rows: Int64 = 0
            guard instanceCount(fts, &instances) == SQLITE_OK, columnSize(fts, 0, &length) == SQLITE_OK,
                  totalSize(fts, 0, &tokens) == SQLITE_OK, rowCount(fts, &rows) == SQLITE_OK
            else {
                sqlite3_result_error(context, "parley_rank: could not read the row's matches", -1)
                return
            }
            var counts = [Int32](repeating: 0, count: Int(max(0, phraseCount(fts))))
            for index in 0..<instances {
                var phrase: Int32 = 0, column: Int32 = 0, offset: Int32 = 0
                guard instance(fts, index, &phrase, &column, &offset) == SQLITE_OK else { continue }
                if column == 0, counts.indices.contains(Int(phrase)) { counts[Int(phrase)] += 1 }
            }
            let average = rows > 0 ? max(1, Double(tokens) / Double(rows)) : 1
            let (k1, b) = (SearchRank.k1, SearchRank.b)
            let norm = k1 * (1 - b + b * Double(length) / average)
            let score = counts.reduce(0.0) { sum, count in count > 0 ? sum + Double(count) * (k1 + 1) / (Double(count) + norm) : sum }
            sqlite3_result_double(context, -score)
        }, nil)
    }
}
