/// Where a photo was taken, as XMP holds it: every element and attribute whose local name (after
/// its prefix) begins with `GPS`, in any case — `exif:GPSLatitude`, `exif:GPSLongitude`, …,
/// IPTC's `Iptc4xmpExt:GPSLatitude` inside a location, DJI's `drone-dji:GpsLatitude`. Each is
/// overwritten with spaces, whole (a start tag through its end tag, or `name="value"`), which XML
/// reads as whitespace: the packet keeps its length and stays well-formed.
enum XMPLocation {
    /// The ranges of `xml` (an XMP packet) to overwrite with spaces. A packet that is not
    /// well-formed enough to walk is refused.
    static func ranges(in xml: [UInt8]) throws -> [Range<Int>] {
        var blanked: [Range<Int>] = []
        // Open elements: their names, and where a located element's start tag began.
        var open: [(name: ArraySlice<UInt8>, locatedFrom: Int?)] = []
        var index = 0
        let count = xml.count
        func find(_ text: String, from start: Int) throws -> Int {
            let needle = Array(text.utf8)
            var at = start
            while at <= count - needle.count {
                if xml[at] == needle[0], xml[at..<(at + needle.count)].elementsEqual(needle) { return at + needle.count }
                at += 1
            }
            throw LocationRefusal("its XMP is not well-formed: no \(text) after byte \(start)")
        }
        func name(from start: Int) -> Int {
            var end = start
            while end < count, !isSpace(xml[end]), xml[end] != UInt8(ascii: ">"), xml[end] != UInt8(ascii: "/"), xml[end] != UInt8(ascii: "=") {
                end += 1
            }
            return end
        }
        while index < count {
            guard xml[index] == UInt8(ascii: "<") else {
                index += 1
                continue
            }
            let tag = index
            if xml.starts(with: "<!--", at: index) {
                index = try find("-->", from: index + 4)
            } else if xml.starts(with: "<![CDATA[", at: index) {
                index = try find("]]>", from: index + 9)
            } else if xml.starts(with: "<?", at: index) {
                index = try find("?>", from: index + 2)
            } else if xml.starts(with: "<!", at: index) {
                index = try find(">", from: index + 2)
            } else if xml.starts(with: "</", at: index) {
                let end = name(from: index + 2)
                let closing = xml[(index + 2)..<end]
                index = try find(">", from: end)
                guard let last = open.popLast(), last.name.elementsEqual(closing) else {
                    throw LocationRefusal("its XMP is not well-formed: </\(String(decoding: closing, as: UTF8.self))> closes nothing open")
                }
                // Only the outermost located element is blanked: it covers those inside.
                if let from = last.locatedFrom, open.last?.locatedFrom == nil { blanked.append(from..<index) }
            } else {
                let end = name(from: index + 1)
                let element = xml[(index + 1)..<end]
                guard !element.isEmpty else { throw LocationRefusal("its XMP is not well-formed: a tag without a name at byte \(index)") }
                index = end
                // Attributes, up to `>` or `/>`.
                var selfClosing = false
                while true {
                    while index < count, isSpace(xml[index]) { index += 1 }
                    guard index < count else { throw LocationRefusal("its XMP is not well-formed: a tag cut off") }
                    if xml[index] == UInt8(ascii: ">") {
                        index += 1
                        break
                    }
                    if xml.starts(with: "/>", at: index) {
                        index += 2
                        selfClosing = true
                        break
                    }
                    let attribute = index
                    let nameEnd = name(from: index)
                    guard nameEnd > index else { throw LocationRefusal("its XMP is not well-formed at byte \(index)") }
                    index = nameEnd
                    while index < count, isSpace(xml[index]) { index += 1 }
                    guard index < count, xml[index] == UInt8(ascii: "=") else { throw LocationRefusal("its XMP is not well-formed: an attribute without a value") }
                    index += 1
                    while index < count, isSpace(xml[index]) { index += 1 }
                    guard index < count, xml[index] == UInt8(ascii: "\"") || xml[index] == UInt8(ascii: "'") else {
                        throw LocationRefusal("its XMP is not well-formed: an attribute's value is not quoted")
                    }
                    let quote = xml[index] == UInt8(ascii: "\"") ? "\"" : "'"
                    index = try find(quote, from: index + 1)
                    if open.last?.locatedFrom == nil, isLocated(xml[attribute..<nameEnd]) { blanked.append(attribute..<index) }
                }
                let located = isLocated(element)
                if selfClosing {
                    if located, open.last?.locatedFrom == nil { blanked.append(tag..<index) }
                } else {
                    guard open.count < 256 else { throw LocationRefusal("its XMP nests more than 256 elements deep") }
                    open.append((element, located ? (open.last?.locatedFrom ?? tag) : open.last?.locatedFrom))
                }
            }
        }
        guard open.isEmpty else { throw LocationRefusal("its XMP is not well-formed: <\(String(decoding: open[open.count - 1].name, as: UTF8.self))> is never closed") }
        return blanked
    }

    /// Whether a qualified name's local part begins with `gps`, in any case.
    static func isLocated(_ name: ArraySlice<UInt8>) -> Bool {
        // `xmlns:gps="…"` declares a prefix: blanking it would leave the elements using it unbound.
        guard !name.starts(with: "xmlns".utf8) else { return false }
        let local = name.lastIndex(of: UInt8(ascii: ":")).map { name[name.index(after: $0)...] } ?? name
        guard local.count >= 3 else { return false }
        let start = local.startIndex
        return local[start] | 0x20 == UInt8(ascii: "g") && local[start + 1] | 0x20 == UInt8(ascii: "p") && local[start + 2] | 0x20 == UInt8(ascii: "s")
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    /// Overwrites the located parts of the XMP packet that `span` holds with spaces.
    static func strip<Source: ByteSource>(_ span: Span, _ reader: Reader<Source>, into edits: inout LocationEdits) throws {
        let xml = try span.read(reader, "an XMP packet")
        for range in try ranges(in: xml) {
            try span.fill(range, with: 0x20, in: &edits)
        }
    }
}
