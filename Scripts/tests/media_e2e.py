#!/usr/bin/env python3
"""Uploads and downloads end to end, through real parley-node processes (2 workers, 2 gateways
sharing one SQLite file and one media directory, TLS) and curl as the independent client.

An image uploaded over HTTP/2 and over HTTP/1.1 is kept once, under its SHA-256, with its size
in pixels; its uploader downloads it whole, by range (curl -r: a range inside, the last bytes,
past the end), revalidates it by ETag, over either gateway; anyone else gets 404 until it is
attached to a message of a group, whose members then download it (but not a member removed
before it was sent); only one's own uploads can be attached. An image's thumbnails are made once
asked for, at the sizes offered, kept, and served by either gateway; one that does not decode
and a PDF have none. A body that is
not what its Content-Type says is 415, one without Content-Length 411, one over the limit 413
before it is all sent, an empty one 400. An upload cut off by its client, and one whose gateway
is SIGKILLed midway, leave no media; the retry on the other gateway works, and so does one while
the uploader's worker is SIGKILLed. `parley send --attach` uploads a file and sends it. A gateway
restarted to keep unattached uploads for 2 s removes those (and their bytes, unless an attached
upload shares them); attached ones stay, and the quota counts only what stays.

A profile photo (an image upload of the user's) is anyone's to download, its thumbnails too; a
group's photo its members'; neither a PDF nor another's upload may be one; only a group's owner
sets its photo. A photo replaced is its uploader's again, and the sweeper removes it.

With a PostgreSQL URL as the second argument, the nodes use it as their store, and the
gateways keep uploads' bytes in it (what is kept is then read with psql).

    Scripts/tests/media_e2e.py PATH-TO-parley-node [POSTGRES-URL]

Every process it starts is recorded and stopped by its PID.
"""
import hashlib
import json
import os
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import uuid

from e2e_lib import Checks, Nodes, call, conclude, png, wait_until

NODE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/debug/parley-node")
POSTGRES = sys.argv[2] if len(sys.argv) > 2 else None
WORK = tempfile.mkdtemp(prefix="parley-media.")
TLS = os.path.join(WORK, "tls")
CA = os.path.join(TLS, "ca.pem")
MEDIA = os.path.join(WORK, "data", "media")
# Where the gateways spool uploads that may carry a location (their TMPDIR).
SPOOL = os.path.join(WORK, "spool")
os.makedirs(SPOOL)
LIMIT = 12_000_000
QUOTA = 20_000_000
check = Checks()
NAMES = ["worker-1", "worker-2", "gateway-1", "gateway-2"]
nodes = Nodes(NODE, WORK, TLS, NAMES, seeds=["worker-1", "worker-2"])
ENV = {
    "PARLEY_TOKEN_SECRET": "media-e2e-token-secret-0123456789abcdef", "PARLEY_INSECURE_NO_ADMIN_TOKEN": "1",
    "PARLEY_REGISTRATION_RATE": "100", "PARLEY_MEDIA_MAX_BYTES": str(LIMIT), "PARLEY_EVENT_LOOPS": "1",
    "PARLEY_MEDIA_QUOTA_BYTES": str(QUOTA), "PARLEY_UPLOAD_RATE": "10", "TMPDIR": SPOOL,
}
if POSTGRES:
    ENV["PARLEY_STORE"] = POSTGRES


def exif_jpeg():
    """A JPEG whose EXIF holds an orientation and a GPS latitude (48° 51' 30.07\" N): the GPS
    directory at TIFF offset 38 (42 bytes) and its rationals at 80 (24 bytes)."""
    def entry(tag, kind, count, value):
        return struct.pack(">HHI", tag, kind, count) + value.ljust(4, b"\0")
    tiff = b"MM" + struct.pack(">HI", 42, 8)
    tiff += struct.pack(">H", 2) + entry(0x0112, 3, 1, struct.pack(">H", 6)) + entry(0x8825, 4, 1, struct.pack(">I", 38)) + struct.pack(">I", 0)
    tiff += struct.pack(">H", 3) + entry(0, 1, 4, bytes([2, 3, 0, 0])) + entry(1, 2, 2, b"N\0") + entry(2, 5, 3, struct.pack(">I", 80)) + struct.pack(">I", 0)
    tiff += struct.pack(">IIIIII", 48, 1, 51, 1, 3007, 100)
    exif = b"Exif\0\0" + tiff
    app1 = b"\xff\xe1" + struct.pack(">H", len(exif) + 2) + exif
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, 120, 160, 1) + bytes([1, 0x11, 0])
    return b"\xff\xd8" + app1 + b"\xff\xdb\x00\x43\x00" + bytes([1] * 64) + sof + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + b"\x12\x34" * 500 + b"\xff\xd9"


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Tests", "ParleyMetadataTests", "Fixtures")
GPS_IMAGE = ["-GPSLatitude=48.8582", "-GPSLatitudeRef=N", "-GPSLongitude=2.2945", "-GPSLongitudeRef=E", "-GPSAltitude=35",
             "-XMP-exif:GPSLatitude=48.8582", "-XMP-exif:GPSLongitude=2.2945", "-Artist=Parley-Test", "-XMP-dc:Creator=Parley-Test"]
GPS_MOVIE = ["-Keys:GPSCoordinates=48.8582, 2.2945, 35", "-UserData:GPSCoordinates=48.8582, 2.2945, 35", "-XMP-exif:GPSLatitude=48.8582",
             "-XMP-exif:GPSLongitude=2.2945", "-Keys:Artist=Parley-Test", "-UserData:Artist=Parley-Test"]


def exiftool(path):
    """What exiftool reads of a file's location and metadata: (tag lines, warnings)."""
    result = subprocess.run(["exiftool", "-a", "-G1", "-s", "-gps:all", "-xmp:all", "-Keys:all", "-UserData:all", "-Artist", "-Warning", "-Error", path],
                            capture_output=True, text=True, check=False)
    lines = result.stdout.splitlines()
    return [line for line in lines if "Warning" not in line and "Error" not in line], [line for line in lines if "Warning" in line or "Error" in line]


def located_files(token):
    """Files as phones write them, their location put there by exiftool (an independent writer):
    after an upload and a download, exiftool finds no location, the rest of the metadata stays,
    images still decode (their thumbnail is made) and a video's structure still reads. Returns
    the SHA-256 of each kept."""
    digests = []
    kinds = [("jpg", "image/jpeg", GPS_IMAGE), ("png", "image/png", GPS_IMAGE), ("webp", "image/webp", GPS_IMAGE),
             ("heic", "image/heic", GPS_IMAGE), ("mp4", "video/mp4", GPS_MOVIE), ("mov", "video/quicktime", GPS_MOVIE),
             ("m4a", "audio/mp4", GPS_MOVIE)]
    for extension, content_type, tags in kinds:
        path = write(f"phone.{extension}", open(os.path.join(FIXTURES, f"plain.{extension}"), "rb").read())
        subprocess.run(["exiftool", "-q", "-overwrite_original", *tags, path], check=True, capture_output=True)
        before, warned = exiftool(path)
        status, reply = upload("gateway-1", path, content_type, token)
        if not check(status == 201, f"{extension} with its location written by exiftool is taken", f"{status} {reply}"):
            continue
        media_id = reply["media"]["id"]
        digests.append(reply["media"]["sha256"])
        status, _, body = curl("gateway-2", f"/v1/media/{media_id}", token=token)
        kept = write(f"kept.{extension}", body)
        after, warnings = exiftool(kept)
        still_located = [line for line in after if "GPS" in line]
        check(status == 200 and any("GPS" in line for line in before) and not still_located
              and len(body) == os.path.getsize(path) and reply["media"]["sha256"] == hashlib.sha256(body).hexdigest(),
              f"{extension}: exiftool finds no location in what is downloaded (it found {sum('GPS' in line for line in before)} tags before)",
              still_located or status)
        check([line for line in before if "GPS" not in line] == after and warnings == warned,
              f"{extension}: the rest of its metadata stays, and exiftool reads it with no new warning", f"{after} {warnings}")
        if content_type.startswith("image/"):
            status, headers, thumbnail = curl("gateway-1", f"/v1/media/{media_id}/thumbnail?size=160", token=token)
            check(status == 200 and jpeg_size(thumbnail) is not None, f"{extension}: the picture still decodes (its thumbnail is made)", status)
    # A video cut short: its boxes cannot be walked to their end, so it is refused, naming why.
    movie = open(os.path.join(FIXTURES, "located.mov"), "rb").read()
    media_before = blobs()
    status, reply = upload("gateway-1", write("cut.mov", movie[:-10]), "video/quicktime", token)
    check(status == 415 and reply["error"]["code"] == "unsupported_media_type" and "runs past" in reply["error"]["message"]
          and blobs() == media_before,
          "a file whose metadata cannot be walked is refused with 415, naming why, and nothing is kept", f"{status} {reply}")
    return digests


def write(name, data):
    path = os.path.join(WORK, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def curl(gateway, *args, token=None, http="--http2"):
    """curl against a gateway: (status, headers as a dict of lists, body bytes)."""
    headers_file = os.path.join(WORK, "headers.txt")
    command = ["curl", "-s", http, "--cacert", CA, "-D", headers_file, "-o", os.path.join(WORK, "body.bin"), "--max-time", "60"]
    if token:
        command += ["-H", f"Authorization: Bearer {token}"]
    command += list(args)
    command[-1] = f"https://localhost:{nodes.client[gateway]}{command[-1]}"
    subprocess.run(command, check=False)
    status, headers = 0, {}
    if os.path.exists(headers_file):
        with open(headers_file, "rb") as f:
            for raw in f.read().decode("latin-1").splitlines():
                if raw.startswith("HTTP/"):
                    status, headers = int(raw.split()[1]), {}
                elif ":" in raw:
                    name, value = raw.split(":", 1)
                    headers.setdefault(name.strip().lower(), []).append(value.strip())
        os.remove(headers_file)
    body = b""
    if os.path.exists(os.path.join(WORK, "body.bin")):
        with open(os.path.join(WORK, "body.bin"), "rb") as f:
            body = f.read()
        os.remove(os.path.join(WORK, "body.bin"))
    return status, headers, body


def upload(gateway, path, content_type, token, http="--http2", extra=()):
    status, headers, body = curl(gateway, "-H", f"Content-Type: {content_type}", *extra, "--data-binary", f"@{path}", "/v1/media",
                                 token=token, http=http)
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def psql(sql):
    result = subprocess.run(["psql", POSTGRES, "-At", "-c", sql], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


def blobs():
    """The blobs kept since the run began (a shared database may hold others)."""
    if POSTGRES:
        return sorted(psql("SELECT sha256 FROM media_blobs") - BEFORE["blobs"])
    found = []
    for root, _, files in os.walk(os.path.join(MEDIA, "blobs")):
        found += files
    return sorted(found)


def thumbnails_of(sha256):
    """The sizes of the thumbnails kept of blob `sha256`."""
    if POSTGRES:
        return sorted(int(size) for size in psql(f"SELECT size FROM media_thumbnails WHERE sha256 = '{sha256}'"))
    folder = os.path.join(MEDIA, "thumbnails", sha256[:2])
    return sorted(int(name.split(".")[1]) for name in (os.listdir(folder) if os.path.isdir(folder) else []) if name.startswith(sha256 + "."))


def jpeg_size(data):
    """(width, height) from a JPEG's start-of-frame marker; None when it is not a JPEG."""
    if data[:3] != b"\xff\xd8\xff":
        return None
    at = 2
    while at + 4 <= len(data) and data[at] == 0xFF:
        marker, length = data[at + 1], struct.unpack(">H", data[at + 2:at + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            height, width = struct.unpack(">HH", data[at + 5:at + 9])
            return width, height
        at += 2 + length
    return None


def leftovers():
    """Uploads under way: files in uploads/, or chunks not yet named by a SHA-256."""
    if POSTGRES:
        return sorted(psql("SELECT DISTINCT blob FROM media_chunks WHERE blob LIKE 'upload:%'") - BEFORE["uploads"])
    uploads = os.path.join(MEDIA, "uploads")
    return os.listdir(uploads) if os.path.isdir(uploads) else []


def spooled(name):
    """The spool files gateway `name` holds open (unlinked, so seen only through its fds): an
    upload that may carry a location waits whole there before anything of it is kept."""
    proc = nodes.procs.get(name)
    if proc is None or proc.poll() is not None:
        return []
    fds = f"/proc/{proc.pid}/fd"
    found = []
    for fd in os.listdir(fds):
        try:
            target = os.readlink(os.path.join(fds, fd))
        except OSError:
            continue
        if target.startswith(SPOOL + "/"):
            found.append(target)
    return found


def under_way(name):
    """An upload's traces while it is received by gateway `name`: its spool file and what the
    store holds of it."""
    return spooled(name) + leftovers()


BEFORE = {"blobs": set(), "uploads": set()}


def main():
    if not nodes.start_all(ENV, check, "2 workers and 2 gateways are ready"):
        return
    if POSTGRES:
        BEFORE["blobs"], BEFORE["uploads"] = set(blobs()), set(leftovers())
        print("uploads kept in PostgreSQL")
    context = ssl.create_default_context(cafile=CA)
    g1, g2 = nodes.client["gateway-1"], nodes.client["gateway-2"]
    status, alice = call("POST", g1, "/v1/users", {"handle": "alice", "password": "correct horse", "displayName": "Alice"}, context=context)
    _, bob = call("POST", g1, "/v1/users", {"handle": "bob", "password": "correct horse", "displayName": "Bob"}, context=context)
    token, stranger = alice["token"], bob["token"]

    print("upload")
    photo = png(640, 480)
    photo_path = write("photo.png", photo)
    digest = hashlib.sha256(photo).hexdigest()
    status, first = upload("gateway-1", photo_path, "image/png", token)
    media = first.get("media", {}) if isinstance(first, dict) else {}
    check(status == 201 and media.get("sha256") == digest and media.get("size") == len(photo)
          and media.get("contentType") == "image/png" and (media.get("width"), media.get("height")) == (640, 480)
          and media.get("id", "").startswith("m_"), "an upload over HTTP/2 is 201 {media} with its SHA-256, size and pixels", f"{status} {first}")
    status, second = upload("gateway-2", photo_path, "image/png; charset=binary", token, http="--http1.1")
    check(status == 201 and second["media"]["sha256"] == digest and second["media"]["id"] != media.get("id"),
          "the same bytes over HTTP/1.1 on the other gateway: a new ID, the same SHA-256", f"{status} {second}")
    check(blobs() == [digest], "kept once, named by their SHA-256", blobs())
    if POSTGRES:
        chunks = psql(f"SELECT part FROM media_chunks WHERE blob = '{digest}'")
        check(len(chunks) == (len(photo) + 262143) // 262144, "as 256 KiB chunks", chunks)
    photo_id = media.get("id", "m_none")

    print("download")
    status, headers, body = curl("gateway-2", f"/v1/media/{photo_id}", token=token)
    check(status == 200 and body == photo, "the uploader downloads it whole from the other gateway", f"{status} {len(body)}")
    check(headers.get("etag") == [f'"{digest}"'] and headers.get("content-type") == ["image/png"]
          and headers.get("x-content-type-options") == ["nosniff"] and "immutable" in headers.get("cache-control", [""])[0]
          and "private" in headers.get("cache-control", [""])[0] and headers.get("accept-ranges") == ["bytes"]
          and "content-disposition" not in headers, "ETag, type, nosniff, private immutable caching, ranges; an image is not an attachment", headers)
    status, headers, body = curl("gateway-1", "-I", f"/v1/media/{photo_id}", token=token)
    # (curl -I writes the headers where the body would go.)
    check(status == 200 and b"\x89PNG" not in body and headers.get("content-length") == [str(len(photo))], "HEAD: the headers, no body", f"{status} {headers}")
    status, headers, body = curl("gateway-1", "-r", "1000-1999", f"/v1/media/{photo_id}", token=token)
    check(status == 206 and body == photo[1000:2000] and headers.get("content-range") == [f"bytes 1000-1999/{len(photo)}"],
          "curl -r 1000-1999: 206 with those bytes and Content-Range", f"{status} {len(body)} {headers.get('content-range')}")
    status, headers, body = curl("gateway-2", "-r", "-100", f"/v1/media/{photo_id}", token=token, http="--http1.1")
    check(status == 206 and body == photo[-100:], "curl -r -100 over HTTP/1.1: the last 100 bytes", f"{status} {len(body)}")
    status, headers, body = curl("gateway-1", "-r", f"{len(photo)}-", f"/v1/media/{photo_id}", token=token)
    check(status == 416 and headers.get("content-range") == [f"bytes */{len(photo)}"], "a range past the end is 416 with the size", f"{status} {headers}")
    status, _, body = curl("gateway-1", "-H", f'If-None-Match: "{digest}"', f"/v1/media/{photo_id}", token=token)
    check(status == 304 and body == b"", "If-None-Match with the ETag: 304", status)
    status, _, _ = curl("gateway-1", f"/v1/media/{photo_id}", token=stranger)
    check(status == 404, "another user, sharing no conversation where it was sent: 404", status)
    status, _, _ = curl("gateway-1", "/v1/media/m_00000000000000000000000000000000", token=token)
    check(status == 404, "an unknown ID: 404", status)
    status, _, _ = curl("gateway-1", f"/v1/media/{photo_id}")
    check(status == 401, "no token: 401", status)

    print("thumbnails")
    status, headers, body = curl("gateway-1", f"/v1/media/{photo_id}/thumbnail?size=160", token=token)
    check(status == 200 and headers.get("content-type") == ["image/jpeg"] and jpeg_size(body) == (160, 120)
          and headers.get("etag") == [f'"{digest}.160"'] and "immutable" in headers.get("cache-control", [""])[0]
          and headers.get("x-content-type-options") == ["nosniff"],
          "a 640 × 480 PNG's thumbnail at size=160: a 160 × 120 JPEG, cached for good", f"{status} {headers} {jpeg_size(body)}")
    check(thumbnails_of(digest) == [160], "made once asked, and kept beside the image", thumbnails_of(digest))
    status, _, again = curl("gateway-2", f"/v1/media/{photo_id}/thumbnail?size=160", token=token, http="--http1.1")
    check(status == 200 and again == body, "the other gateway serves the one kept", status)
    status, _, body = curl("gateway-2", f"/v1/media/{photo_id}/thumbnail", token=token)
    check(status == 200 and jpeg_size(body) == (320, 240), "no size: 320", f"{status} {jpeg_size(body)}")
    status, _, body = curl("gateway-1", "-H", f'If-None-Match: "{digest}.160"', f"/v1/media/{photo_id}/thumbnail?size=160", token=token)
    check(status == 304, "If-None-Match with its ETag: 304", status)
    status, _, body = curl("gateway-1", f"/v1/media/{photo_id}/thumbnail?size=100", token=token)
    check(status == 400, "a size not offered: 400", status)
    status, _, _ = curl("gateway-1", f"/v1/media/{photo_id}/thumbnail?size=160", token=stranger)
    check(status == 404, "a stranger: 404, as for the image", status)
    # Segments that walk (a JFIF header, a scan) around bytes that decode as no picture.
    broken = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(9) + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + bytes(range(256)) * 8 + b"\xff\xd9"
    status, reply = upload("gateway-1", write("broken.jpg", broken), "image/jpeg", token)
    status, _, _ = curl("gateway-1", f"/v1/media/{reply['media']['id']}/thumbnail?size=160", token=token)
    check(status == 404, "an image that does not decode uploads, and has no thumbnail: 404", status)
    broken_digest = reply["media"]["sha256"]

    pdf = b"%PDF-1.4\n" + b"0" * 5000 + b"\n%%EOF\n"
    status, doc = upload("gateway-1", write("doc.pdf", pdf), "application/pdf", token)
    status, headers, body = curl("gateway-1", f"/v1/media/{doc['media']['id']}", token=token)
    check(status == 200 and body == pdf and headers.get("content-disposition") == ["attachment"]
          and "sandbox" in headers.get("content-security-policy", [""])[0], "a PDF downloads as an attachment, sandboxed", headers)
    status, _, _ = curl("gateway-1", f"/v1/media/{doc['media']['id']}/thumbnail", token=token)
    check(status == 404, "and has no thumbnail", status)

    print("attached")
    _, carol = call("POST", g1, "/v1/users", {"handle": "carol", "password": "correct horse", "displayName": "Carol"}, context=context)
    bob_id, carol_id = bob["user"]["id"], carol["user"]["id"]
    _, group = call("POST", g1, "/v1/conversations", {"memberIds": [bob_id, carol_id], "name": "trip"}, token=token, context=context)
    group_id = group["conversation"]["id"]
    status, sent = call("POST", g2, f"/v1/conversations/{group_id}/messages",
                        {"clientMessageId": str(uuid.uuid4()), "attachments": [{"mediaId": photo_id, "caption": "the view 🏔"}]}, token=token, context=context)
    attached = (sent or {}).get("message", {}).get("attachments") or [{}]
    check(status == 201 and sent["message"]["text"] == "" and attached[0].get("media", {}).get("id") == photo_id
          and attached[0]["media"].get("sha256") == digest and attached[0].get("caption") == "the view 🏔",
          "a message of a photo alone: 201, carrying the photo's description and caption", f"{status} {sent}")
    status, history = call("GET", g1, f"/v1/conversations/{group_id}/messages", token=stranger, context=context)
    check(status == 200 and history["messages"][-1].get("attachments") == attached, "history shows it to a member", f"{status} {history}")
    status, _, body = curl("gateway-1", f"/v1/media/{photo_id}", token=stranger)
    check(status == 200 and body == photo, "a member downloads the photo", status)
    status, _, _ = curl("gateway-2", f"/v1/media/{photo_id}", token=carol["token"])
    check(status == 200, "so does the other member", status)
    status, reply = call("POST", g1, f"/v1/conversations/{group_id}/messages",
                         {"clientMessageId": str(uuid.uuid4()), "text": "mine?", "attachments": [{"mediaId": photo_id}]}, token=stranger, context=context)
    check(status == 400 and photo_id in reply["error"]["message"], "someone else's upload cannot be attached: 400 naming it", f"{status} {reply}")
    status, reply = call("POST", g1, f"/v1/conversations/{group_id}/messages",
                         {"clientMessageId": str(uuid.uuid4()), "attachments": [{"mediaId": "m_00000000000000000000000000000000"}]}, token=token, context=context)
    check(status == 400, "an unknown upload: 400", status)
    status, reply = call("POST", g1, f"/v1/conversations/{group_id}/messages", {"clientMessageId": str(uuid.uuid4())}, token=token, context=context)
    check(status == 400, "no text and no attachments: 400", status)
    status, _ = call("DELETE", g1, f"/v1/conversations/{group_id}/members/{carol_id}", token=token, context=context)
    check(status == 204, "carol is removed from the group")
    later = png(200, 100, seed=5)
    status, after = upload("gateway-1", write("later.png", later), "image/png", token)
    later_id = after["media"]["id"]
    status, sent = call("POST", g1, f"/v1/conversations/{group_id}/messages",
                        {"clientMessageId": str(uuid.uuid4()), "text": "after carol left", "attachments": [{"mediaId": later_id}]}, token=token, context=context)
    check(status == 201, "a photo sent after", status)
    status, _, _ = curl("gateway-1", f"/v1/media/{later_id}", token=carol["token"])
    check(status == 404, "a removed member does not get media sent after she left", status)
    status, _, body = curl("gateway-1", f"/v1/media/{later_id}", token=stranger)
    check(status == 200 and body == later, "a member does", status)

    print("photos")
    _, dan = call("POST", g1, "/v1/users", {"handle": "dan", "password": "correct horse", "displayName": "Dan"}, context=context)
    avatar_bytes, second_bytes, group_bytes = png(300, 300, seed=21), png(300, 300, seed=22), png(400, 300, seed=23)
    _, avatar = upload("gateway-1", write("avatar.png", avatar_bytes), "image/png", token)
    _, second_avatar = upload("gateway-2", write("avatar2.png", second_bytes), "image/png", token)
    _, group_photo = upload("gateway-1", write("group.png", group_bytes), "image/png", token)
    _, dans_image = upload("gateway-1", write("dans.png", png(50, 50, seed=24)), "image/png", dan["token"])
    avatar_id, second_id, group_photo_id = avatar["media"]["id"], second_avatar["media"]["id"], group_photo["media"]["id"]
    status, _, _ = curl("gateway-2", f"/v1/media/{avatar_id}", token=dan["token"])
    check(status == 404, "an upload is its uploader's alone before it is a photo", status)
    status, reply = call("PUT", g1, "/v1/users/me/avatar", {"mediaId": doc["media"]["id"]}, token=token, context=context)
    check(status == 400 and doc["media"]["id"] in reply["error"]["message"], "a PDF cannot be a profile photo: 400 naming it", f"{status} {reply}")
    status, reply = call("PUT", g1, "/v1/users/me/avatar", {"mediaId": dans_image["media"]["id"]}, token=token, context=context)
    check(status == 400, "nor someone else's image: 400", f"{status} {reply}")
    call("PATCH", g1, "/v1/users/me", {"avatarURL": "https://example.com/alice.png"}, token=token, context=context)
    status, me = call("PUT", g2, "/v1/users/me/avatar", {"mediaId": avatar_id}, token=token, context=context)
    check(status == 200 and me.get("avatar", {}).get("id") == avatar_id and "avatarURL" not in me,
          "PUT /v1/users/me/avatar: the user with the upload as avatar, and no avatarURL", f"{status} {me}")
    status, found = call("GET", g2, f"/v1/users?ids={alice['user']['id']}", token=dan["token"], context=context)
    check(status == 200 and found["users"][0].get("avatar", {}).get("id") == avatar_id, "a lookup shows it", f"{status} {found}")
    status, _, body = curl("gateway-2", f"/v1/media/{avatar_id}", token=dan["token"])
    check(status == 200 and body == avatar_bytes, "a stranger downloads a profile photo", status)
    status, _, body = curl("gateway-1", f"/v1/media/{avatar_id}/thumbnail?size=160", token=dan["token"], http="--http1.1")
    check(status == 200 and jpeg_size(body) == (160, 160), "and its small thumbnail, over HTTP/1.1 too", f"{status} {jpeg_size(body)}")
    status, reply = call("PUT", g1, f"/v1/conversations/{group_id}/photo", {"mediaId": group_photo_id}, token=stranger, context=context)
    check(status == 403, "a member who does not own the group cannot set its photo: 403", f"{status} {reply}")
    status, reply = call("PUT", g1, f"/v1/conversations/{group_id}/photo", {"mediaId": group_photo_id}, token=dan["token"], context=context)
    check(status == 404, "a stranger to the group: 404", f"{status} {reply}")
    status, changed = call("PUT", g2, f"/v1/conversations/{group_id}/photo", {"mediaId": group_photo_id}, token=token, context=context)
    check(status == 200 and changed.get("photo", {}).get("id") == group_photo_id, "the owner sets the group's photo", f"{status} {changed}")
    status, seen = call("GET", g1, f"/v1/conversations/{group_id}", token=stranger, context=context)
    check(status == 200 and seen.get("photo", {}).get("id") == group_photo_id, "a member sees it on the conversation", f"{status} {seen}")
    status, _, body = curl("gateway-1", f"/v1/media/{group_photo_id}/thumbnail?size=320", token=stranger)
    check(status == 200 and jpeg_size(body) == (320, 240), "and downloads its thumbnail", f"{status} {jpeg_size(body)}")
    for path in [f"/v1/media/{group_photo_id}", f"/v1/media/{group_photo_id}/thumbnail?size=160"]:
        status, _, _ = curl("gateway-2", path, token=dan["token"])
        check(status == 404, f"a non-member gets 404 for {path.split('?')[0].replace(group_photo_id, 'ID')}", status)
    status, _, _ = curl("gateway-1", f"/v1/media/{group_photo_id}", token=carol["token"])
    check(status == 404, "so does a member removed before", status)
    status, me = call("PUT", g1, "/v1/users/me/avatar", {"mediaId": second_id}, token=token, context=context)
    check(status == 200 and me.get("avatar", {}).get("id") == second_id, "another photo replaces the avatar", f"{status} {me}")
    status, _, _ = curl("gateway-2", f"/v1/media/{avatar_id}", token=dan["token"])
    check(status == 404, "the photo replaced is no longer the stranger's to download", status)
    status, _, body = curl("gateway-2", f"/v1/media/{second_id}", token=dan["token"])
    check(status == 200 and body == second_bytes, "the new one is", status)

    print("location")
    located = exif_jpeg()
    status, reply_located = upload("gateway-1", write("located.jpg", located), "image/jpeg", token)
    reply = reply_located
    status, _, body = curl("gateway-2", f"/v1/media/{reply['media']['id']}", token=token)
    tiff = 2 + 4 + 6
    check(status == 200 and len(body) == len(located) and body[tiff + 38:tiff + 104] == bytes(66)
          and body[:tiff + 38] == located[:tiff + 38] and body[tiff + 104:] == located[tiff + 104:]
          and reply["media"]["sha256"] == hashlib.sha256(body).hexdigest(),
          "a JPEG's GPS fields are zeroed before it is kept, the rest as sent, and its SHA-256 is of what was kept", f"{status} {len(body)}")
    located_kept = located_files(token)

    print("refused")
    status, reply = upload("gateway-1", photo_path, "image/jpeg", token)
    check(status == 415 and reply["error"]["code"] == "unsupported_media_type" and "image/png" in reply["error"]["message"],
          "PNG bytes declared as JPEG: 415 naming what they are", f"{status} {reply}")
    status, reply = upload("gateway-1", write("page.html", b"<html><script>alert(1)</script></html>" * 10), "text/html", token)
    check(status == 415, "a type that is not accepted: 415", status)
    status, reply = upload("gateway-1", write("fake.png", b"\x89PNG\r\n\x1a\n" + b"x" * 10), "image/gif", token)
    check(status == 415, "short bytes of another type: 415", status)
    status, reply = upload("gateway-2", photo_path, "image/png", token, http="--http1.1", extra=("-H", "Transfer-Encoding: chunked"))
    check(status == 411 and reply["error"]["code"] == "length_required", "no Content-Length: 411", f"{status} {reply}")
    status, reply = upload("gateway-1", write("empty.png", b""), "image/png", token)
    check(status == 400, "an empty body: 400", status)
    huge = png(2400, 1800)
    check(len(huge) > LIMIT, "a PNG over the limit", len(huge))
    huge_path = write("huge.png", huge)
    started = time.time()
    result = subprocess.run(["curl", "-s", "--http2", "--cacert", CA, "-H", f"Authorization: Bearer {token}", "-H", "Content-Type: image/png",
                             "--data-binary", f"@{huge_path}", "-w", "%{http_code} %{size_upload}", "-o", "/dev/null",
                             f"https://localhost:{g1}/v1/media"], capture_output=True, text=True)
    code, sent = (result.stdout.split() + ["0", "0"])[:2]
    check(code == "413" and int(float(sent)) < len(huge) // 2, f"over the limit ({LIMIT} bytes): 413 before the body is sent", result.stdout)
    photos = [hashlib.sha256(data).hexdigest() for data in [avatar_bytes, second_bytes, group_bytes]] + [dans_image["media"]["sha256"]]
    kept = sorted([digest, broken_digest, hashlib.sha256(pdf).hexdigest(), reply_located["media"]["sha256"], after["media"]["sha256"], *located_kept, *photos])
    check(leftovers() == [] and blobs() == kept, "nothing refused was kept", (leftovers(), blobs()))

    print("cut off")
    big = png(1500, 1000, seed=1)
    big_path = write("big.png", big)
    big_digest = hashlib.sha256(big).hexdigest()
    client = subprocess.Popen(["curl", "-s", "--http2", "--cacert", CA, "-H", f"Authorization: Bearer {token}", "-H", "Content-Type: image/png",
                               "--limit-rate", "1M", "--data-binary", f"@{big_path}", "-o", "/dev/null", f"https://localhost:{g1}/v1/media"])
    check(wait_until(10, lambda: len(spooled("gateway-1")) == 1), "an upload under way is written aside", under_way("gateway-1"))
    check(client.poll() is None, "and is still being sent when its client is killed")
    os.kill(client.pid, 9)
    client.wait()
    check(wait_until(10, lambda: under_way("gateway-1") == []), "cut off by its client: nothing of it stays", under_way("gateway-1"))
    check(big_digest not in blobs(), "and no blob of it")

    client = subprocess.Popen(["curl", "-s", "--http2", "--cacert", CA, "-H", f"Authorization: Bearer {token}", "-H", "Content-Type: image/png",
                               "--limit-rate", "1M", "--data-binary", f"@{big_path}", "-o", "/dev/null", f"https://localhost:{g1}/v1/media"])
    check(wait_until(10, lambda: len(spooled("gateway-1")) == 1) and client.poll() is None, "another upload under way")
    nodes.kill("gateway-1")
    client.wait()
    check(big_digest not in blobs(), "its gateway SIGKILLed midway: no media of it")
    status, retried = upload("gateway-2", big_path, "image/png", token)
    check(status == 201 and retried["media"]["sha256"] == big_digest, "the retry on the other gateway is kept", f"{status} {retried}")
    status, _, body = curl("gateway-2", f"/v1/media/{retried['media']['id']}", token=token)
    check(status == 200 and body == big, "and downloads whole", f"{status} {len(body)}")

    print("a worker killed")
    nodes.kill("worker-1")
    third = png(300, 200, seed=2)
    third_path = write("third.png", third)
    kept = {}

    def retry_upload():
        status, reply = upload("gateway-2", third_path, "image/png", token)
        if status == 201:
            kept["media"] = reply["media"]
            return True
        return False

    check(wait_until(30, retry_upload), "with a worker SIGKILLed, uploads retried until 201 are kept")
    if "media" in kept:
        status, _, body = curl("gateway-2", f"/v1/media/{kept['media']['id']}", token=token)
        check(status == 200 and body == third, "and download", status)
        status, _, body = curl("gateway-2", f"/v1/media/{photo_id}", token=token)
        check(status == 200 and body == photo, "the first upload too, after the ring moved", status)

    print("the command-line client")
    parley = os.path.join(os.path.dirname(NODE), "parley")
    home = os.path.join(WORK, "home")
    os.makedirs(home, exist_ok=True)
    cli = dict(os.environ, HOME=home, PARLEY_URL=f"https://localhost:{g2}", PARLEY_CA=CA)
    login = subprocess.run([parley, "login", "alice", "--password", "correct horse"], env=cli, capture_output=True, text=True)
    sent = subprocess.run([parley, "send", group_id, "from", "the", "terminal", "--attach", third_path, "--json"], env=cli, capture_output=True, text=True)
    try:
        message = json.loads(sent.stdout.strip().splitlines()[-1])["message"]
    except (ValueError, IndexError, KeyError):
        message = {}
    files = message.get("attachments") or [{}]
    check(login.returncode == 0 and sent.returncode == 0 and message.get("text") == "from the terminal"
          and files[0].get("media", {}).get("sha256") == hashlib.sha256(third).hexdigest(),
          "parley send --attach uploads the file and sends it with the text", f"{login.stderr} {sent.stdout} {sent.stderr}")
    status, _, body = curl("gateway-2", f"/v1/media/{files[0].get('media', {}).get('id', 'm_none')}", token=stranger)
    check(status == 200 and body == third, "a member downloads it", status)

    print("quota")
    statuses = []
    for _ in range(6):
        status, reply = upload("gateway-2", big_path, "image/png", token)
        statuses.append(status)
        if status != 201:
            break
    check(statuses[:-1] and all(s == 201 for s in statuses[:-1]) and statuses[-1] == 413 and reply["error"]["code"] == "quota_exceeded",
          f"uploads past the user's quota ({QUOTA} bytes, counted per upload though the bytes are kept once) are 413 quota_exceeded", f"{statuses} {reply}")
    status, _ = upload("gateway-2", third_path, "image/png", stranger)
    check(status == 201, "another user's quota is their own", status)

    print("under way")
    # Uploads under way count against the quota too: as many slow uploads as fit, then one more
    # while they are still coming is 413 — they could not pass the quota together.
    fitting = (QUOTA - len(third)) // len(big)
    slow = [subprocess.Popen(["curl", "-s", "--http2", "--cacert", CA, "-H", f"Authorization: Bearer {stranger}", "-H", "Content-Type: image/png",
                              "--limit-rate", "1M", "--data-binary", f"@{big_path}", "-o", "/dev/null", "-w", "%{http_code}",
                              f"https://localhost:{nodes.client['gateway-2']}/v1/media"], stdout=subprocess.PIPE, text=True) for _ in range(fitting)]
    wait_until(10, lambda: len(spooled("gateway-2")) >= fitting)
    status, reply = upload("gateway-2", big_path, "image/png", stranger)
    codes = [process.communicate(timeout=120)[0] for process in slow]
    check(status == 413 and reply["error"]["code"] == "quota_exceeded" and codes == ["201"] * fitting,
          f"{fitting} uploads under way fill the quota: one more is 413 quota_exceeded, and they are kept", f"{status} {reply} {codes}")
    # A body trickled a little now and then is dropped once it averages under the minimum rate
    # (16 KiB/s after 10 s), not held for ever; nothing of it is kept.
    aside = leftovers()  # a gateway SIGKILLed above left its upload's file for a later start to remove
    started = time.time()
    trickle = subprocess.run(["curl", "-s", "--http2", "--cacert", CA, "-H", f"Authorization: Bearer {carol['token']}", "-H", "Content-Type: image/png",
                              "--limit-rate", "2K", "--data-binary", f"@{big_path}", "-o", os.path.join(WORK, "trickle.json"), "-w", "%{http_code}",
                              "--max-time", "60", f"https://localhost:{nodes.client['gateway-2']}/v1/media"], capture_output=True, text=True)
    took = time.time() - started
    check(trickle.stdout == "408" and 10 <= took <= 30 and wait_until(5, lambda: leftovers() == aside and spooled("gateway-2") == []),
          "an upload trickled at 2 KB/s is 408 once it averages under 16 KiB/s after 10 s, and leaves nothing", f"{trickle.stdout} after {took:.1f} s")

    print("the sweeper")
    check(thumbnails_of(broken_digest) == [160], "an image that did not decode is kept as having no thumbnail", thumbnails_of(broken_digest))
    # gateway-2 again, keeping uploads no message has attached for 2 s instead of a day.
    nodes.kill("gateway-2")
    nodes.start("gateway-2", dict(ENV, PARLEY_MEDIA_KEEP_UNATTACHED="2s"))
    if not check(wait_until(60, lambda: nodes.ready("gateway-2")), "gateway-2 restarted, sweeping uploads unattached for 2 s"):
        return
    pdf_digest, located_digest = hashlib.sha256(pdf).hexdigest(), reply_located["media"]["sha256"]
    check(wait_until(30, lambda: curl("gateway-2", f"/v1/media/{doc['media']['id']}", token=token)[0] == 404),
          "an upload never attached is removed: 404 for its uploader too")
    status, _, _ = curl("gateway-2", f"/v1/media/{reply_located['media']['id']}", token=token)
    check(status == 404, "so is the other one never attached", status)
    check(wait_until(10, lambda: pdf_digest not in blobs() and located_digest not in blobs() and broken_digest not in blobs()), "and their bytes", blobs())
    check(thumbnails_of(broken_digest) == [], "and their thumbnails", thumbnails_of(broken_digest))
    check(thumbnails_of(digest) == [160, 320], "an attached image's thumbnails stay", thumbnails_of(digest))
    check(all(kept in blobs() for kept in [digest, after["media"]["sha256"], hashlib.sha256(third).hexdigest()]),
          "the bytes of attached uploads stay, also those a removed upload shared with an attached one", blobs())
    for token_, media_id, data, what in [(stranger, photo_id, photo, "the photo"), (stranger, later_id, later, "the later photo"),
                                         (stranger, files[0].get("media", {}).get("id", "m_none"), third, "the file sent from the terminal")]:
        status, _, body = curl("gateway-2", f"/v1/media/{media_id}", token=token_)
        check(status == 200 and body == data, f"{what}, attached, still downloads", status)
    status, reply = call("POST", g2, f"/v1/conversations/{group_id}/messages",
                         {"clientMessageId": str(uuid.uuid4()), "attachments": [{"mediaId": doc["media"]["id"]}]}, token=token, context=context)
    check(status == 400, "a removed upload cannot be attached: 400", f"{status} {reply}")
    status, reply = upload("gateway-2", big_path, "image/png", token)
    check(status == 201, "the removed uploads no longer count against the quota", f"{status} {reply}")
    check(nodes.logged("gateway-2", b"removed uploads never attached to a message"), "the sweep is logged")
    check(wait_until(30, lambda: curl("gateway-2", f"/v1/media/{avatar_id}", token=token)[0] == 404)
          and wait_until(10, lambda: hashlib.sha256(avatar_bytes).hexdigest() not in blobs()),
          "a replaced profile photo is swept with its bytes, however young", blobs())
    status, _, body = curl("gateway-2", f"/v1/media/{second_id}", token=dan["token"])
    check(status == 200 and body == second_bytes, "the profile photo now stays", status)
    status, _, body = curl("gateway-2", f"/v1/media/{group_photo_id}", token=stranger)
    check(status == 200 and body == group_bytes, "and so does the group's", status)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        # conclude() exits with the tally: an exception must count, or a run cut short would pass.
        traceback.print_exc()
        check(False, "the test ran to its end")
    finally:
        conclude(check, nodes, WORK, "media end to end")
