import NIOCore
import ParleyCluster

/// One unit on the cluster wire. On the wire a frame is a 4-byte big-endian length, then a
/// 1-byte type, then the body; the length counts the type byte and the body.
public enum Frame: Equatable, Sendable {
    /// The dialer's first frame: who it is. Nothing else may come before the answer.
    case hello(Hello)
    /// The acceptor agrees, saying who it is.
    case helloAccepted(Hello)
    /// The acceptor refuses (a duplicate connection, a wrong protocol version); it closes next.
    case helloRejected(String)
    /// Cluster traffic, allowed once the hello exchange is done.
    case message(ClusterMessage)

    /// The cluster protocol version; a node refuses hellos of another version. 2: call arguments
    /// and results in ``BinaryClusterSerialization`` (1 had JSON); 3: a chat message's send, result
    /// and deliveries in their hand-written forms (``ClusterWireCodable``); 4: gossip carries each
    /// member's heartbeat counter; 5: a message, and a send, carry their attachments; 6: changes
    /// to messages (a conversation's last change number, change events, a changed message's form).
    public static let protocolVersion: UInt16 = 8
}

/// What a node says about itself when a connection opens.
public struct Hello: Equatable, Sendable {
    public var protocolVersion: UInt16 = Frame.protocolVersion
    public var identity: PeerIdentity

    public init(protocolVersion: UInt16 = Frame.protocolVersion, identity: PeerIdentity) {
        self.protocolVersion = protocolVersion
        self.identity = identity
    }
}

/// Why bytes from a peer are not a frame. The connection that sent them is closed; nothing else.
public struct FrameError: Error, Equatable, CustomStringConvertible {
    public var message: String
    public var description: String { message }

    public init(message: String) { self.message = message }

    static func truncated(_ what: String) -> FrameError { FrameError(message: "truncated \(what)") }
}

enum FrameType: UInt8 {
    case hello = 1
    case helloAccepted = 2
    case helloRejected = 3
    case call = 4
    case reply = 5
    case gossip = 6
}

// MARK: Encoding

extension Frame {
    /// The frame with its length prefix, ready to write.
    public func encoded(allocator: ByteBufferAllocator) -> ByteBuffer {
        var buffer = allocator.buffer(capacity: 128)
        buffer.writeInteger(UInt32(0))  // patched below
        switch self {
        case .hello(let hello):
            buffer.writeInteger(FrameType.hello.rawValue)
            buffer.writeHello(hello)
        case .helloAccepted(let hello):
            buffer.writeInteger(FrameType.helloAccepted.rawValue)
            buffer.writeHello(hello)
        case .helloRejected(let reason):
            buffer.writeInteger(FrameType.helloRejected.rawValue)
            buffer.writeFrameString(reason)
        case .message(.call(let call)):
            buffer.writeInteger(FrameType.call.rawValue)
            buffer.writeInteger(call.callID)
            buffer.writeActorID(call.recipient)
            buffer.writeFrameString(call.target)
            buffer.writeInteger(UInt64(clamping: call.timeout.nanoseconds))
            buffer.writeInteger(UInt16(call.arguments.count))
            for argument in call.arguments { buffer.writeFrameBytes(argument) }
        case .message(.reply(let reply)):
            buffer.writeInteger(FrameType.reply.rawValue)
            buffer.writeInteger(reply.callID)
            switch reply.outcome {
            case .value(let bytes):
                buffer.writeInteger(UInt8(0))
                buffer.writeFrameBytes(bytes)
            case .void:
                buffer.writeInteger(UInt8(1))
            case .error(let error):
                buffer.writeInteger(UInt8(2))
                buffer.writeFrameString(error.code.rawValue)
                buffer.writeFrameString(error.message)
            }
        case .message(.gossip(let gossip)):
            buffer.writeInteger(FrameType.gossip.rawValue)
            buffer.writeNodeID(gossip.from)
            buffer.writeInteger(UInt32(gossip.members.count))
            for (member, heartbeat) in zip(gossip.members, gossip.heartbeats) {
                buffer.writeNodeID(member.id)
                buffer.writeInteger(heartbeat)
                buffer.writeFrameString(member.address.host)
                buffer.writeInteger(UInt16(clamping: member.address.port))
                buffer.writeInteger(member.roles.rawValue)
                buffer.writeInteger(member.status.wireCode)
            }
        }
        buffer.setInteger(UInt32(buffer.readableBytes - 4), at: buffer.readerIndex)
        return buffer
    }
}

// MARK: Decoding

extension Frame {
    /// Decodes one frame body (type byte first, no length prefix). Every field is checked:
    /// a peer's bytes are never trusted.
    public init(decoding body: inout ByteBuffer) throws(FrameError) {
        guard let rawType: UInt8 = body.readInteger() else { throw .truncated("frame type") }
        guard let type = FrameType(rawValue: rawType) else {
            throw FrameError(message: "unknown frame type \(rawType)")
        }
        switch type {
        case .hello:
            self = .hello(try body.readHello())
        case .helloAccepted:
            self = .helloAccepted(try body.readHello())
        case .helloRejected:
            self = .helloRejected(try body.readFrameString("reject reason"))
        case .call:
            guard let callID: UInt64 = body.readInteger() else { throw .truncated("call id") }
            let recipient = try body.readActorID()
            let target = try body.readFrameString("call target")
            guard let timeout: UInt64 = body.readInteger() else { throw .truncated("call timeout") }
            guard let count: UInt16 = body.readInteger() else { throw .truncated("argument count") }
            var arguments: [[UInt8]] = []
            arguments.reserveCapacity(Int(count))
            for _ in 0..<count { arguments.append(try body.readFrameBytes("argument")) }
            self = .message(.call(CallEnvelope(
                callID: callID, recipient: recipient, target: target, arguments: arguments,
                timeout: .nanoseconds(Int64(clamping: timeout)))))
        case .reply:
            guard let callID: UInt64 = body.readInteger() else { throw .truncated("reply call id") }
            guard let kind: UInt8 = body.readInteger() else { throw .truncated("reply kind") }
            let outcome: ReplyEnvelope.Outcome
            switch kind {
            case 0: outcome = .value(try body.readFrameBytes("reply value"))
            case 1: outcome = .void
            case 2:
                let code = try body.readFrameString("error code")
                let message = try body.readFrameString("error message")
                outcome = .error(ClusterCallError(code: .init(rawValue: code), message: message))
            default: throw FrameError(message: "unknown reply kind \(kind)")
            }
            self = .message(.reply(ReplyEnvelope(callID: callID, outcome: outcome)))
        case .gossip:
            let from = try body.readNodeID()
            guard let count: UInt32 = body.readInteger() else { throw .truncated("member count") }
            // Each member takes at least 25 bytes: a count beyond that is a lie, not an allocation.
            guard Int(count) <= body.readableBytes / 25 else { throw FrameError(message: "gossip claims \(count) members") }
            var members: [Member] = []
            var heartbeats: [UInt64] = []
            for _ in 0..<count {
                let id = try body.readNodeID()
                guard let heartbeat: UInt64 = body.readInteger() else { throw .truncated("member heartbeat") }
                heartbeats.append(heartbeat)
                let host = try body.readFrameString("member host")
                guard let port: UInt16 = body.readInteger(), let roles: UInt8 = body.readInteger(),
                    let statusCode: UInt8 = body.readInteger()
                else { throw .truncated("member") }
                guard let status = MemberStatus(wireCode: statusCode) else {
                    throw FrameError(message: "unknown member status \(statusCode)")
                }
                members.append(Member(id: id, address: NodeAddress(host: host, port: Int(port)), roles: NodeRoles(rawValue: roles), status: status))
            }
            self = .message(.gossip(Gossip(from: from, members: members, heartbeats: heartbeats)))
        }
        guard body.readableBytes == 0 else {
            throw FrameError(message: "\(body.readableBytes) unexpected bytes after a \(type) frame")
        }
    }
}

extension MemberStatus {
    var wireCode: UInt8 {
        switch self {
        case .joining: 0
        case .up: 1
        case .suspect: 1  // never gossiped as such: a suspect member is still up for others
        case .left: 2
        case .down: 3
        }
    }

    init?(wireCode: UInt8) {
        switch wireCode {
        case 0: self = .joining
        case 1: self = .up
        case 2: self = .left
        case 3: self = .down
        default: return nil
        }
    }
}

extension ByteBuffer {
    mutating func writeFrameString(_ string: String) {
        let lengthIndex = writerIndex
        writeInteger(UInt32(0))
        let count = writeString(string)
        setInteger(UInt32(count), at: lengthIndex)
    }

    mutating func writeFrameBytes(_ bytes: [UInt8]) {
        writeInteger(UInt32(bytes.count))
        writeBytes(bytes)
    }

    mutating func readFrameString(_ what: String) throws(FrameError) -> String {
        guard let length: UInt32 = readInteger() else { throw .truncated(what) }
        guard let string = readString(length: Int(length)) else { throw .truncated(what) }
        return string
    }

    mutating func readFrameBytes(_ what: String) throws(FrameError) -> [UInt8] {
        guard let length: UInt32 = readInteger() else { throw .truncated(what) }
        guard let bytes = readBytes(length: Int(length)) else { throw .truncated(what) }
        return bytes
    }

    mutating func writeNodeID(_ id: NodeID) {
        writeFrameString(id.name)
        writeInteger(id.incarnation)
    }

    mutating func readNodeID() throws(FrameError) -> NodeID {
        let name = try readFrameString("node name")
        guard let incarnation: UInt64 = readInteger() else { throw .truncated("incarnation") }
        return NodeID(name: name, incarnation: incarnation)
    }

    mutating func writeActorID(_ id: ClusterActorID) {
        writeFrameString(id.kind)
        writeFrameString(id.key)
        if let node = id.node {
            writeInteger(UInt8(1))
            writeFrameString(node)
        } else {
            writeInteger(UInt8(0))
        }
    }

    mutating func readActorID() throws(FrameError) -> ClusterActorID {
        let kind = try readFrameString("actor kind")
        let key = try readFrameString("actor key")
        guard let hasNode: UInt8 = readInteger() else { throw .truncated("actor id") }
        switch hasNode {
        case 0: return ClusterActorID(kind: kind, key: key)
        case 1: return ClusterActorID(kind: kind, key: key, node: try readFrameString("actor node"))
        default: throw FrameError(message: "bad actor id flag \(hasNode)")
        }
    }

    mutating func writeHello(_ hello: Hello) {
        writeInteger(hello.protocolVersion)
        writeNodeID(hello.identity.id)
        writeInteger(hello.identity.roles.rawValue)
        writeFrameString(hello.identity.address.host)
        writeInteger(UInt16(clamping: hello.identity.address.port))
    }

    mutating func readHello() throws(FrameError) -> Hello {
        guard let version: UInt16 = readInteger() else { throw .truncated("hello version") }
        let id = try readNodeID()
        guard let roles: UInt8 = readInteger() else { throw .truncated("hello roles") }
        let host = try readFrameString("hello host")
        guard let port: UInt16 = readInteger() else { throw .truncated("hello port") }
        return Hello(
            protocolVersion: version,
            identity: PeerIdentity(id: id, roles: NodeRoles(rawValue: roles), address: NodeAddress(host: host, port: Int(port))))
    }
}
