import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ParleyChat
import ParleyCluster
import ParleyImaging
import ParleyMedia
import ParleyMetadata
import ParleyModel

/// Where a gateway keeps uploads, and their limits.
public struct MediaSettings: Sendable {
    public var blobs: any BlobStore
    /// The largest upload accepted, in bytes; a larger one is `413`.
    public var maxBytes: Int64 = 25 << 20
    /// Uploads per user.
    public var uploadRate = RateLimiter.Rule(perSecond: 2, burst: 20)
    /// Whether where a photo or video was taken is removed before it is kept
    /// (``LocationStripper``).
    public var stripLocation = true
    /// Where an upload whose location is removed waits on local disk until it is looked at
    /// (``UploadSpool``: unlinked at once, so nothing is left behind).
    public var spoolDirectory = FileManager.default.temporaryDirectory.path
    /// The bytes of all of one user's uploads together, those under way on this gateway
    /// included; past it an upload is `413 quota_exceeded`. Nil: no quota.
    public var quotaBytes: Int64? = 1 << 30
    /// The slowest an upload may come, on average, once ``uploadGrace`` has passed: a body
    /// trickled a byte now and then (never idle long enough for the request timeout) would
    /// otherwise hold its connection, its spool file and its share of the quota for ever.
    public var uploadBytesPerSecondMin: Int64 = 16 * 1024
    public var uploadGrace: Duration = .seconds(10)
    /// Downloads one user may have being written at once on a gateway; one more is `429`. Each
    /// holds a file (or a database read) and a task until its client has taken it.
    public var downloadsPerUserMax = 16

    public init(blobs: any BlobStore) {
        self.blobs = blobs
    }
}

extension Gateway {
    /// `POST /v1/media` and the send stream (`POST /v1/sends`, or its WebSocket: `CONNECT`) are
    /// read as they arrive (``HTTP2Responder/streamsBody``), never whole.
    static func streamsBody(_ request: HTTPRequest) -> HTTP2Responder.StreamedBody? {
        guard let path = request.path else { return nil }
        // The WebSocket's route keeps its own deadline for the first message (its token).
        if path == Self.sendStreamPath && (request.method == .post || request.method == .connect) { return .open }
        guard request.method == .post else { return nil }
        if path == "/v1/media" || path.hasPrefix("/v1/media?") { return .timed }
        return nil
    }

    func addMediaRoutes(to v1: RouterGroup<GatewayContext>) {
        // Uploads are counted against a limit of their own, not the write limit.
        v1.authenticated(by: self, writes: .ownLimit).post("media") { request, context in try await self.upload(request, context) }
        let reads = v1.authenticated(by: self)
        reads.get("media/:id") { request, context in try await self.download(request, context) }
        reads.get("media/:id/thumbnail") { request, context in try await self.thumbnail(request, context) }
    }

    private func mediaSettings() throws -> MediaSettings {
        guard let media = configuration.media else { throw APIError.notFound("this server keeps no media") }
        return media
    }

    /// Keeps the body's bytes under their SHA-256, once its first bytes showed it is what its
    /// `Content-Type` says, then records the upload as the caller's. Nothing is recorded for an
    /// upload refused or cut off, and its bytes are dropped.
    private func upload(_ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        let settings = try mediaSettings()
        let caller = context.caller
        if let wait = uploadLimiter.acquire(caller.id.rawValue, now: system.clock.now) { throw APIError.rateLimited(retryAfter: wait, "too many uploads; slow down") }
        let declared = (request.headers[.contentType] ?? "").split(separator: ";").first.map {
            $0.trimmingCharacters(in: .whitespaces).lowercased()
        } ?? ""
        guard MediaSniffing.contentTypes.contains(declared) else {
            throw APIError(.unsupportedMediaType, "unsupported_media_type",
                           "Content-Type must be one of \(MediaSniffing.contentTypes.sorted().joined(separator: ", "))\(declared.isEmpty ? "" : ", not \(declared)")")
        }
        guard let lengthText = request.headers[.contentLength], let length = Int64(lengthText), length >= 0 else {
            throw APIError(.lengthRequired, "length_required", "Content-Length is required: the upload's size in bytes")
        }
        guard length > 0 else { throw APIError.invalid("the body is empty") }
        guard length <= settings.maxBytes else {
            throw APIError(.contentTooLarge, "payload_too_large", "an upload is at most \(settings.maxBytes) bytes; this one is \(length)")
        }
        if let quota = settings.quotaBytes {
            // What is kept, and what is under way on this gateway (each whole, by its
            // Content-Length): uploads started together cannot pass the quota together.
            let used = try await UserActor.resolve(caller.id, using: system).mediaBytes()
            guard uploadsUnderWay.reserve(length, for: caller.id, within: quota - used) else {
                throw APIError(.contentTooLarge, "quota_exceeded",
                               "your uploads hold \(used) of your \(quota) bytes, and more are under way; this one (\(length)) does not fit")
            }
        }
        defer { if settings.quotaBytes != nil { uploadsUnderWay.release(length, for: caller.id) } }
        let upload = try await settings.blobs.beginUpload()
        // A type that can carry a location is held whole before it is kept: its metadata may lie
        // anywhere in it (a video's `moov` after its media, a HEIF's Exif item where `iloc` says).
        let spool = settings.stripLocation && LocationStripper.contentTypes.contains(declared)
            ? try await UploadSpool.create(in: settings.spoolDirectory) : nil
        defer { spool?.close() }
        do {
            let headLength = Int(min(Int64(MediaSniffing.headLength), length))
            var head: [UInt8] = []
            head.reserveCapacity(headLength)
            var dimensions: (width: Int, height: Int)?
            var received: Int64 = 0
            let started = system.clock.now
            func keep(_ bytes: ByteBuffer) async throws {
                if let spool { try await spool.write(bytes) } else { try await upload.write(bytes) }
            }
            for try await var piece in request.body {
                received += Int64(piece.readableBytes)
                guard received <= length else { throw APIError.invalid("the body is longer than its Content-Length, \(length)") }
                let late = system.clock.now - started - settings.uploadGrace
                if late > .zero, Double(received) < late.seconds * Double(settings.uploadBytesPerSecondMin) {
                    throw APIError(.requestTimeout, "request_timeout",
                                   "the upload came slower than \(settings.uploadBytesPerSecondMin) bytes a second on average; it was dropped")
                }
                if head.count < headLength {
                    // The first bytes wait until there are enough to tell what they are.
                    let taken = min(headLength - head.count, piece.readableBytes)
                    head += piece.readBytes(length: taken) ?? []
                    guard head.count == headLength else { continue }
                    let detected = MediaSniffing.contentType(of: head)
                    guard detected == declared else {
                        throw APIError(.unsupportedMediaType, "unsupported_media_type",
                                       "the body is \(detected ?? "none of the accepted types"), not \(declared) as its Content-Type says")
                    }
                    dimensions = MediaSniffing.dimensions(of: head, contentType: declared)
                    try await keep(ByteBuffer(bytes: head))
                }
                if piece.readableBytes > 0 { try await keep(piece) }
            }
            guard received == length else { throw APIError.invalid("the body ended after \(received) of its \(length) bytes") }
            if let spool { try await keepWithoutLocation(spool, declared, to: upload) }
            let blob = try await upload.finish()
            let media = Media(
                id: .make(), contentType: declared, size: blob.size, sha256: blob.sha256, width: dimensions?.width, height: dimensions?.height,
                createdAt: system.clock.wallNow.millisecondPrecision)
            let recorded = try await UserActor.resolve(caller.id, using: system).recordUpload(media)
            // The same bytes, a day unattached under another upload, may have been swept while this
            // one was being recorded (finishing kept them again, so only within moments); this
            // upload is then left unattached for the sweeper, and the client uploads again.
            guard try await settings.blobs.size(of: blob.sha256) != nil else {
                throw APIError.unavailable("the upload's bytes were removed as it was recorded; upload it again")
            }
            return try Self.json(API.MediaBody(media: recorded), status: .created)
        } catch is StreamedRequestBody.Ended {
            await upload.abandon()
            throw APIError.invalid("the upload stopped before its end")
        } catch let error as BlobStoreError {
            await upload.abandon()
            logger.error("an upload could not be kept", metadata: ["error": "\(error)"])
            throw APIError.unavailable("the upload could not be kept; retry")
        } catch {
            await upload.abandon()
            throw error
        }
    }

    /// Copies a spooled upload to where it is kept, its location removed; `415` when its metadata
    /// cannot be walked.
    private func keepWithoutLocation(_ spool: UploadSpool, _ contentType: String, to upload: any BlobUpload) async throws {
        let edits: LocationEdits
        do {
            edits = try await spool.read { bytes in try LocationStripper.edits(contentType: contentType, in: bytes) }
        } catch let refusal as LocationRefusal {
            logger.info("an upload was refused: its location could not be removed", metadata: ["media.type": "\(contentType)", "reason": "\(refusal.reason)"])
            throw APIError(.unsupportedMediaType, "unsupported_media_type",
                           "this \(contentType) was not kept, since where it was taken could not be removed from it: \(refusal.reason)")
        }
        if !edits.isEmpty {
            logger.debug("location removed from an upload", metadata: ["media.type": "\(contentType)", "edits": "\(edits.edits.count)"])
        }
        try await spool.copy(to: upload, applying: edits)
    }

    /// The upload `{id}` names, if the caller may download it (``UserActor/downloadable(_:)``).
    private func downloadable(_ request: Request, _ context: AuthenticatedContext) async throws -> (Media, caller: UserID) {
        let caller = context.caller
        let text = try context.parameters.require("id")
        guard ClientInput.isPlausibleID(text) else { throw APIError.notFound("media not found") }
        return (try await UserActor.resolve(caller.id, using: system).downloadable(MediaID(rawValue: text)), caller.id)
    }

    /// What every answer of bytes under a media ID carries: they never change, they are this
    /// user's to see, and a browser opening them shows them as `contentType` or not at all, and
    /// runs nothing in them.
    private static func mediaHeaders(contentType: String, etag: String) -> HTTPFields {
        [
            .contentType: contentType,
            .eTag: etag,
            .cacheControl: "private, max-age=31536000, immutable",
            HTTPField.Name("X-Content-Type-Options")!: "nosniff",
            .contentSecurityPolicy: "default-src 'none'; sandbox",
        ]
    }

    /// Whether the request's `If-None-Match` names `etag` (or is `*`).
    static func matches(_ request: Request, etag: String) -> Bool {
        guard let matches = request.headers[.ifNoneMatch] else { return false }
        return matches.split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == etag || $0.trimmingCharacters(in: .whitespaces) == "*" }
    }

    /// An upload's bytes, whole or a range of them, to who may see them (``UserActor/downloadable(_:)``).
    private func download(_ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        let settings = try mediaSettings()
        let (media, caller) = try await downloadable(request, context)
        let etag = "\"\(media.sha256)\""
        var headers = Self.mediaHeaders(contentType: media.contentType, etag: etag)
        headers[.acceptRanges] = "bytes"
        if !media.contentType.hasPrefix("image/") { headers[.contentDisposition] = "attachment" }
        if Self.matches(request, etag: etag) {
            return Response(status: .notModified, headers: headers)
        }
        var status = HTTPResponse.Status.ok
        var range: Range<Int64> = 0..<media.size
        switch ByteRange.parse(request.headers[.range], size: media.size) {
        case .whole:
            break
        case .part(let part):
            status = .partialContent
            range = part
            headers[.contentRange] = "bytes \(part.lowerBound)-\(part.upperBound - 1)/\(media.size)"
        case .unsatisfiable:
            headers[.contentRange] = "bytes */\(media.size)"
            let error = APIError(.rangeNotSatisfiable, "range_not_satisfiable", "the range is past the end of the \(media.size) bytes")
            var response = try error.response(from: request, context: context)
            response.headers[.contentRange] = "bytes */\(media.size)"
            return response
        }
        guard downloadsUnderWay.reserve(1, for: caller, within: Int64(settings.downloadsPerUserMax)) else {
            throw APIError(.tooManyRequests, "too_many_downloads",
                           "at most \(settings.downloadsPerUserMax) downloads at once; finish one first", retryable: true, retryAfterSeconds: 1)
        }
        let slot = UserTally.Reservation(downloadsUnderWay, 1, for: caller)
        let blobs = settings.blobs
        let sha256 = media.sha256
        let bytes = range
        let body = ResponseBody(contentLength: bytes.count) { writer in
            defer { withExtendedLifetime(slot) {} }
            try await blobs.read(sha256, range: bytes, chunkSize: 64 * 1024) { piece in try await writer.write(piece) }
            try await writer.finish(nil)
        }
        return Response(status: status, headers: headers, body: body)
    }
}

extension Gateway {
    /// `GET /v1/media/{id}/thumbnail?size=S`: a JPEG of an image upload at most S pixels on its
    /// longer side (one of ``Thumbnails/sizes``; 320 when not given), for who may download the
    /// upload. Made on first request and kept (``ThumbnailMaker``); `404` for an upload with none
    /// (not an image, or one that does not decode).
    fileprivate func thumbnail(_ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        let settings = try mediaSettings()
        var size = Thumbnails.defaultSize
        if let text = request.uri.queryParameters.get("size") {
            guard let asked = Int(text), Thumbnails.sizes.contains(asked) else {
                throw APIError.invalid("size must be one of \(Thumbnails.sizes.map(String.init).joined(separator: ", "))")
            }
            size = asked
        }
        let (media, _) = try await downloadable(request, context)
        guard media.isImage else {
            throw APIError.notFound("no thumbnail: \(media.contentType) is not an image")
        }
        let etag = "\"\(media.sha256).\(size)\""
        let headers = Self.mediaHeaders(contentType: "image/jpeg", etag: etag)
        if Self.matches(request, etag: etag) {
            return Response(status: .notModified, headers: headers)
        }
        let thumbnail: ByteBuffer
        do {
            thumbnail = try await thumbnails.thumbnail(of: media, size: size, blobs: settings.blobs)
        } catch let error as BlobStoreError {
            logger.error("a thumbnail could not be made", metadata: ["media.id": "\(media.id)", "error": "\(error)"])
            throw APIError.unavailable("the thumbnail could not be made; retry")
        } catch is ThumbnailMaker.Busy {
            throw APIError.unavailable("thumbnails are being made for others; retry shortly")
        } catch let error as ThumbnailMaker.Unavailable {
            logger.error("thumbnails cannot be made on this machine", metadata: ["error": "\(error)"])
            throw APIError.unavailable("thumbnails are not available on this server")
        }
        guard thumbnail.readableBytes > 0 else { throw APIError.notFound("no thumbnail: the image does not decode") }
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: thumbnail))
    }
}

/// The one range of a `Range` header a download answers (RFC 9110 section 14): `bytes=a-b`,
/// `bytes=a-` or `bytes=-n`. Anything else — another unit, several ranges, nonsense — is
/// answered whole, as the RFC allows.
enum ByteRange: Equatable {
    case whole
    case part(Range<Int64>)
    case unsatisfiable

    static func parse(_ header: String?, size: Int64) -> ByteRange {
        guard let header, header.hasPrefix("bytes=") else { return .whole }
        let spec = header.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .whole }
        let first = spec[..<dash], last = spec[spec.index(after: dash)...]
        func number(_ text: Substring) -> Int64? {
            guard !text.isEmpty, text.count <= 18, text.allSatisfy(\.isASCII), text.allSatisfy(\.isNumber) else { return nil }
            return Int64(text)
        }
        if first.isEmpty {
            // The last n bytes.
            guard let count = number(last) else { return .whole }
            guard count > 0, size > 0 else { return .unsatisfiable }
            return .part(max(0, size - count)..<size)
        }
        guard let start = number(first) else { return .whole }
        let end: Int64
        if last.isEmpty {
            end = size - 1
        } else {
            guard let given = number(last), given >= start else { return .whole }
            end = min(given, size - 1)
        }
        guard start < size else { return .unsatisfiable }
        return .part(start..<(end + 1))
    }
}
