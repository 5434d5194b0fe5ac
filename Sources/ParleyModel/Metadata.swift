import Foundation

/// A JSON value, as an app's ``Metadata`` holds it.
public enum JSONValue: Hashable, Sendable, Codable {
    case null
    case bool(Bool)
    /// A number that is an integer JSON can carry exactly (an app's counter).
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}

/// An app's own fields on a user, a conversation, a member or a message (`metadata`): a JSON
/// object of at most ``bytesMax`` bytes as stored, nested at most ``depthMax`` deep, its keys
/// and strings texts as the API accepts them. The server keeps it and hands it back; it reads
/// nothing in it.
///
/// In the API it is the object itself. On the cluster wire and in the stores it is its text
/// (``json``): the cluster's binary `Codable` form has no types to tell a JSON value's kinds
/// apart, so an encoder that says ``binaryWireKey`` gets the text.
public struct Metadata: Hashable, Sendable, Codable {
    public let fields: [String: JSONValue]

    /// The most bytes of its JSON text (compact, keys sorted).
    public static let bytesMax = 4096
    /// The most levels of objects and arrays, the outer object the first.
    public static let depthMax = 8
    /// The most UTF-8 bytes of a key.
    public static let keyBytesMax = 128

    /// The `userInfo` key of an encoder or decoder that wants the text form.
    public static let binaryWireKey = CodingUserInfoKey(rawValue: "parley.binaryWire")!

    public init(_ fields: [String: JSONValue]) {
        self.fields = fields
    }

    /// Its JSON text: compact, keys sorted, so the same fields are the same bytes.
    public var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(fields)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    /// The fields of a stored or sent text; nil for text that is no JSON object.
    public init?(json: String) {
        guard let fields = try? JSONDecoder().decode([String: JSONValue].self, from: Data(json.utf8)) else { return nil }
        self.fields = fields
    }

    /// A column's value: its text, or nil for none or empty (an empty object is no metadata).
    public static func column(_ metadata: Metadata?) -> String? {
        guard let metadata, !metadata.fields.isEmpty else { return nil }
        return metadata.json
    }

    /// `metadata` as an API input gives it: nil stays nil (unchanged), `{}` means none.
    public var orNilWhenEmpty: Metadata? { fields.isEmpty ? nil : self }

    /// Checks what a client sent as `field`: its size as stored, its depth, its keys and strings.
    public func validate(field: String) throws(ChatError) {
        let size = json.utf8.count
        guard size <= Self.bytesMax else {
            throw ChatError(.invalidRequest, "\(field): at most \(Self.bytesMax) bytes of JSON, not \(size)")
        }
        try Self.check(.object(fields), depth: 1, at: field)
    }

    private static func check(_ value: JSONValue, depth: Int, at path: String) throws(ChatError) {
        switch value {
        case .null, .bool, .integer:
            return
        case .number(let number):
            guard number.isFinite else { throw ChatError(.invalidRequest, "\(path): a number JSON can carry") }
        case .string(let text):
            try StoredText.require(text, field: path)
        case .array(let values):
            guard depth <= depthMax else { throw ChatError(.invalidRequest, "\(path): nested deeper than \(depthMax) levels") }
            for (index, element) in values.enumerated() { try check(element, depth: depth + 1, at: "\(path)[\(index)]") }
        case .object(let members):
            guard depth <= depthMax else { throw ChatError(.invalidRequest, "\(path): nested deeper than \(depthMax) levels") }
            for (key, element) in members {
                guard !key.isEmpty, key.utf8.count <= keyBytesMax else {
                    throw ChatError(.invalidRequest, "\(path): keys are 1–\(keyBytesMax) bytes, not \(key.utf8.count)")
                }
                try StoredText.require(key, field: "\(path) key")
                try check(element, depth: depth + 1, at: "\(path).\(key)")
            }
        }
    }

    public init(from decoder: any Decoder) throws {
        if decoder.userInfo[Self.binaryWireKey] != nil {
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let read = Metadata(json: text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "metadata that is no JSON object"))
            }
            self = read
        } else {
            fields = try decoder.singleValueContainer().decode([String: JSONValue].self)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if encoder.userInfo[Self.binaryWireKey] != nil {
            try container.encode(json)
        } else {
            try container.encode(fields)
        }
    }
}
