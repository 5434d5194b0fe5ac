/// The location in the ISO base media files phones write — HEIC/HEIF photos, MP4 and QuickTime
/// videos, M4A audio — found by walking their boxes:
/// - HEIF: the `Exif` item (``EXIFLocation``) and the XMP item (a `mime` item of type
///   `application/rdf+xml`, ``XMPLocation``), found through `iinf` and read where `iloc` says
///   (in the file or in `idat`, over as many extents as it has);
/// - QuickTime and MP4: the `©xyz` and `loci` boxes, and the `com.apple.quicktime.location.*`
///   items of a `meta`'s `keys`/`ilst`, each turned into a `free` box of the same size with its
///   content zeroed; XMP in a `uuid` box or a QuickTime `XMP_` box.
///
/// `moov` may lie anywhere (a camera writes it after the media data): boxes are walked by their
/// sizes, never by reading the media.
enum ISOBMFFMetadata {
    /// Past this many boxes a file is refused: a phone's video has a few hundred.
    static let boxesMax = 100_000
    /// Containers are entered at most this deep.
    static let depthMax = 12

    /// QuickTime's `©xyz` (the © is the byte 0xA9, which is not UTF-8 alone).
    static let placeType: [UInt8] = [0xA9, 0x78, 0x79, 0x7A]

    static let xmpUUID: [UInt8] = [0xBE, 0x7A, 0xCF, 0xCB, 0x97, 0xA9, 0x42, 0xE8, 0x9C, 0x71, 0x99, 0x94, 0x91, 0xE3, 0xAF, 0xAC]

    static func edits<Source: ByteSource>(_ reader: Reader<Source>) throws -> LocationEdits {
        var walk = Walk(reader: reader)
        try walk.boxes(in: 0..<reader.count, depth: 0)
        return walk.edits
    }

    /// A box: its type, where it begins, and where its content lies.
    struct Box {
        var type: [UInt8]
        var start: Int
        var content: Range<Int>
        /// The type as text; a `©xyz` or `loci` box reads as `location`.
        var typeName: String { type == placeType || type == Array("loci".utf8) ? "location" : String(decoding: type, as: UTF8.self) }
    }

    private struct Walk<Source: ByteSource> {
        let reader: Reader<Source>
        var edits = LocationEdits()
        var boxCount = 0

        init(reader: Reader<Source>) {
            self.reader = reader
        }

        /// The boxes one after another in `range`.
        func children(of range: Range<Int>) throws -> [Box] {
            var boxes: [Box] = []
            var index = range.lowerBound
            while index < range.upperBound {
                guard range.upperBound - index >= 8 else { throw LocationRefusal("a box at byte \(index) is cut short") }
                var size = try reader.bigEndian(index, 4, "a box")
                let type = try reader.bytes(index + 4, 4, "a box")
                var header = 8
                if size == 1 {
                    size = try reader.bigEndian(index + 8, 8, "a box's 64-bit size")
                    header = 16
                } else if size == 0 {
                    size = range.upperBound - index  // to the end of its container
                }
                guard size >= header, size <= range.upperBound - index else {
                    throw LocationRefusal("a '\(String(decoding: type, as: UTF8.self))' box at byte \(index) runs past its container")
                }
                boxes.append(Box(type: type, start: index, content: (index + header)..<(index + size)))
                index += size
            }
            return boxes
        }

        mutating func boxes(in range: Range<Int>, depth: Int) throws {
            guard depth <= depthMax else { throw LocationRefusal("its boxes nest more than \(depthMax) deep") }
            let boxes = try children(of: range)
            boxCount += boxes.count
            guard boxCount <= boxesMax else { throw LocationRefusal("it has more than \(boxesMax) boxes") }
            for box in boxes {
                switch box.typeName {
                case "moov", "trak", "mdia", "minf", "udta", "moof", "traf":
                    try self.boxes(in: box.content, depth: depth + 1)
                case "meta":
                    try meta(box, depth: depth)
                case "location":
                    try free(box)
                case "XMP_":
                    try XMPLocation.strip(Span(file: box.content), reader, into: &edits)
                case "uuid":
                    guard box.content.count >= 16, try reader.bytes(box.content.lowerBound, 16, "a uuid box") == xmpUUID else { break }
                    try XMPLocation.strip(Span(file: (box.content.lowerBound + 16)..<box.content.upperBound), reader, into: &edits)
                default:
                    break
                }
            }
        }

        /// Renames `box` to `free` and zeroes its content: readers skip it, and its size keeps
        /// every other offset right.
        private mutating func free(_ box: Box) throws {
            try edits.write(Array("free".utf8), at: box.start + (box.content.lowerBound - box.start == 16 ? 12 : 4))
            try edits.fill(box.content, with: 0)
        }

        /// A `meta` box: ISO's is a full box (4 bytes of version and flags before its children),
        /// QuickTime's is not — told apart by where its first child, `hdlr`, begins.
        private mutating func meta(_ box: Box, depth: Int) throws {
            var content = box.content
            if content.count >= 12, try reader.bytes(content.lowerBound + 4, 4, "a meta box") != Array("hdlr".utf8) {
                content = (content.lowerBound + 4)..<content.upperBound
            }
            let children = try self.children(of: content)
            boxCount += children.count
            guard boxCount <= boxesMax else { throw LocationRefusal("it has more than \(boxesMax) boxes") }
            var keys: [Int: [UInt8]] = [:]
            var items: [Int: Item] = [:]
            var locations: [Int: Location] = [:]
            var idat: Range<Int>?
            for child in children {
                switch child.typeName {
                case "keys": keys = try self.keys(child)
                case "iinf": items = try self.items(child)
                case "iloc": locations = try self.locations(child)
                case "idat": idat = child.content
                default: break
                }
            }
            for child in children {
                switch child.typeName {
                case "ilst": try itemList(child, keys: keys)
                case "location": try free(child)
                case "XMP_", "uuid", "udta": try self.boxes(in: child.start..<child.content.upperBound, depth: depth + 1)
                default: break
                }
            }
            for (id, item) in items.sorted(by: { $0.key < $1.key }) where item.isEXIF || item.isXMP {
                guard let location = locations[id] else { throw LocationRefusal("its \(item.isEXIF ? "Exif" : "XMP") item has no location in 'iloc'") }
                guard item.encoding.isEmpty else { throw LocationRefusal("its XMP item is encoded (\(item.encoding)), which cannot be edited in place") }
                let span = try self.span(of: location, idat: idat)
                if item.isEXIF {
                    // The item begins with the offset of the TIFF header from after that offset.
                    let offset = try span.prefix(4).read(reader, "an Exif item").bigEndian(at: 0, 4) ?? 0
                    guard span.count >= 4, offset <= span.count - 4 else { throw LocationRefusal("its Exif item's TIFF header lies outside it") }
                    try EXIFLocation.strip(span.dropping(4 + offset), reader, into: &edits)
                } else {
                    try XMPLocation.strip(span, reader, into: &edits)
                }
            }
        }

        /// `keys`: version and flags, a count, then each key as size, namespace and name. Keys
        /// are numbered from 1, the type of the `ilst` item that holds the key's value.
        private func keys(_ box: Box) throws -> [Int: [UInt8]] {
            var keys: [Int: [UInt8]] = [:]
            let count = try reader.bigEndian(box.content.lowerBound + 4, 4, "a keys box")
            var index = box.content.lowerBound + 8
            for number in 1...max(1, count) where count > 0 {
                let size = try reader.bigEndian(index, 4, "a key")
                guard size >= 8, size <= box.content.upperBound - index else { throw LocationRefusal("a key at byte \(index) runs past its 'keys' box") }
                keys[number] = try reader.bytes(index + 8, size - 8, "a key")
                index += size
            }
            return keys
        }

        /// `ilst`: items whose type is a key's number (or, in iTunes' lists, a four-letter name).
        private mutating func itemList(_ box: Box, keys: [Int: [UInt8]]) throws {
            let children = try self.children(of: box.content)
            boxCount += children.count
            guard boxCount <= boxesMax else { throw LocationRefusal("it has more than \(boxesMax) boxes") }
            for item in children {
                let number = item.type.reduce(0) { $0 << 8 | Int($1) }
                let located = keys[number].map { $0.starts(with: "com.apple.quicktime.location.") } ?? false
                if located || item.typeName == "location" { try free(item) }
            }
        }

        struct Item {
            var type = ""
            var contentType = ""
            var encoding = ""
            var isEXIF: Bool { type == "Exif" }
            var isXMP: Bool { (type == "mime" || type.isEmpty) && contentType == "application/rdf+xml" }
        }

        /// `iinf`: each item's ID and type (`infe` boxes).
        private func items(_ box: Box) throws -> [Int: Item] {
            let version = try reader.bigEndian(box.content.lowerBound, 1, "an iinf box")
            let countSize = version == 0 ? 2 : 4
            let start = box.content.lowerBound + 4 + countSize
            guard start <= box.content.upperBound else { throw LocationRefusal("an 'iinf' box is cut short") }
            var items: [Int: Item] = [:]
            for entry in try children(of: start..<box.content.upperBound) where entry.typeName == "infe" {
                let bytes = try reader.bytes(entry.content.lowerBound, entry.content.count, "an infe box")
                guard let version = bytes.first else { throw LocationRefusal("an 'infe' box is empty") }
                var item = Item()
                var index: Int
                let id: Int?
                func string() -> String {
                    guard index < bytes.count else { return "" }
                    let end = bytes[index...].firstIndex(of: 0) ?? bytes.count
                    defer { index = min(bytes.count, end + 1) }
                    return String(decoding: bytes[index..<end], as: UTF8.self)
                }
                if version >= 2 {
                    let idSize = version == 2 ? 2 : 4
                    id = bytes.bigEndian(at: 4, idSize)
                    index = 4 + idSize + 2
                    guard index + 4 <= bytes.count else { throw LocationRefusal("an 'infe' box is cut short") }
                    item.type = String(decoding: bytes[index..<(index + 4)], as: UTF8.self)
                    index += 4
                    _ = string()  // the item's name
                    if item.type == "mime" {
                        item.contentType = string()
                        item.encoding = string()
                    }
                } else {
                    id = bytes.bigEndian(at: 4, 2)
                    index = 8
                    _ = string()
                    item.contentType = string()
                    item.encoding = string()
                }
                guard let id else { throw LocationRefusal("an 'infe' box is cut short") }
                items[id] = item
            }
            return items
        }

        /// Where an item's bytes are: in the file, or in `idat`; a base offset and its extents.
        struct Location {
            var inItemData: Bool
            var extents: [(offset: Int, length: Int)]
        }

        /// `iloc`: each item's extents.
        private func locations(_ box: Box) throws -> [Int: Location] {
            var index = box.content.lowerBound
            let end = box.content.upperBound
            func read(_ size: Int) throws -> Int {
                guard size <= end - index else { throw LocationRefusal("an 'iloc' box is cut short") }
                defer { index += size }
                return size == 0 ? 0 : try reader.bigEndian(index, size, "an iloc box")
            }
            let version = try read(1)
            _ = try read(3)
            let sizes = try read(2)
            let offsetSize = sizes >> 12, lengthSize = sizes >> 8 & 0xF, baseOffsetSize = sizes >> 4 & 0xF
            let indexSize = version >= 1 ? sizes & 0xF : 0
            for size in [offsetSize, lengthSize, baseOffsetSize, indexSize] where ![0, 4, 8].contains(size) {
                throw LocationRefusal("an 'iloc' box has a field of \(size) bytes")
            }
            let count = try read(version < 2 ? 2 : 4)
            var locations: [Int: Location] = [:]
            for _ in 0..<count {
                let id = try read(version < 2 ? 2 : 4)
                let method = version >= 1 ? try read(2) & 0xF : 0
                guard method <= 1 else { throw LocationRefusal("an item is built from other items ('iloc' construction method \(method))") }
                _ = try read(2)  // data reference index
                let base = try read(baseOffsetSize)
                let extentCount = try read(2)
                var extents: [(Int, Int)] = []
                for _ in 0..<extentCount {
                    _ = try read(indexSize)
                    let offset = try read(offsetSize), length = try read(lengthSize)
                    guard base <= Int.max / 2, offset <= Int.max / 2 else { throw LocationRefusal("an item's extent lies outside the file") }
                    extents.append((base + offset, length))
                }
                locations[id] = Location(inItemData: method == 1, extents: extents)
            }
            return locations
        }

        /// An item's bytes, wherever its extents put them. A length of 0 means "to the end of
        /// the file" (or of `idat`).
        private func span(of location: Location, idat: Range<Int>?) throws -> Span {
            let within: Range<Int>
            if location.inItemData {
                guard let idat else { throw LocationRefusal("an item lies in an 'idat' box that is not there") }
                within = idat
            } else {
                within = 0..<reader.count
            }
            var pieces: [Span.Piece] = []
            var virtual = 0
            for (offset, length) in location.extents {
                let start = within.lowerBound + offset
                let count = length == 0 ? within.upperBound - start : length
                guard offset < within.count, count >= 0, count <= within.upperBound - start else {
                    throw LocationRefusal("an item's extent lies outside the file")
                }
                pieces.append(Span.Piece(virtual: virtual, file: start, length: count))
                virtual += count
                guard virtual <= reader.count else { throw LocationRefusal("an item's extents add up to more than the file") }
            }
            return Span(pieces: pieces)
        }
    }
}
