/// What a text a client sends may hold to be stored and given back exactly as it was
/// acknowledged: any Unicode scalar but the C0 control characters other than tab, newline and
/// carriage return. U+0000 ends a C string (SQLite and PostgreSQL drivers read and write through
/// them), and PostgreSQL refuses it in `text` outright; the other controls have no place in chat
/// text and confuse terminals and log readers. Swift strings hold no lone surrogates (the JSON
/// readers refuse or replace them), so nothing else needs refusing.
public enum StoredText {
    /// The first scalar `text` may not hold, or nil.
    public static func forbiddenScalar(in text: String) -> Unicode.Scalar? {
        for byte in text.utf8 where byte < 0x20 && byte != 0x09 && byte != 0x0A && byte != 0x0D {
            return Unicode.Scalar(byte)
        }
        return nil
    }

    /// Why `text`, the value of `field`, cannot be stored (nil: it can): the message an API error
    /// carries.
    public static func problem(in text: String, field: String) -> String? {
        guard let scalar = forbiddenScalar(in: text) else { return nil }
        return "\(field) must not contain control character U+\(String(scalar.value, radix: 16, uppercase: true).leftPadded(to: 4)) (only tab, newline and carriage return are allowed)"
    }

    /// Throws `invalid_request` naming `field` when `text` cannot be stored.
    public static func require(_ text: String, field: String) throws(ChatError) {
        if let problem = problem(in: text, field: field) { throw ChatError(.invalidRequest, problem) }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
