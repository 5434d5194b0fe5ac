#!/usr/bin/env python3
"""A local stand-in for Apple's and Google's push services, over HTTP/2 and TLS, for the push tests.

It checks what the real services check: APNs' provider token (a JWT whose ES256 signature must
verify against the team's key, with its key ID and team ID), path, apns-topic, apns-push-type,
apns-collapse-id, apns-expiration and payload; FCM's OAuth 2 flow (a JWT assertion whose RS256
signature must verify against the service account's key, exchanged for an access token) and the
messages:send request. It records every notification it accepts, and answers a device token as a
test tells it to (410 Unregistered, 429 with Retry-After, 500, FCM's UNREGISTERED).

    push_server.py --port P --cert C --key K --apns-key KEY.p8 --apns-key-id ID --apns-team-id TEAM
                   --fcm-key KEY.pem --fcm-email EMAIL --fcm-token-url URL

Routes (HTTP/2): POST /3/device/TOKEN (and /sandbox/3/device/TOKEN, the sandbox), POST /token,
POST /v1/projects/PROJECT/messages:send; for the test (HTTP/1.1): GET /control/received, GET /control/count,
POST /control/script {TOKEN: [[status, reason, retry-after or null], ...]}.
Built on the h2 and cryptography packages, independent of the HTTP/2 and crypto stacks Parley uses.
"""
import argparse
import asyncio
import base64
import json
import secrets
import ssl
import time
import urllib.parse

import h2.config
import h2.connection
import h2.events
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, utils

RECEIVED = []
SCRIPT = {}
ACCESS_TOKENS = set()
# Provider tokens whose signature verified (one per key for 50 minutes).
VERIFIED = {}
ARGS = None
APNS_KEY = None
FCM_KEY = None


def b64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verify_jwt(token, key, alg):
    """The header and claims of a compact JWT whose signature verifies; raises otherwise."""
    header_part, claims_part, signature_part = token.split(".")
    header, claims, signature = json.loads(b64url(header_part)), json.loads(b64url(claims_part)), b64url(signature_part)
    if header.get("alg") != alg:
        raise ValueError(f"alg {header.get('alg')}, expected {alg}")
    signed = f"{header_part}.{claims_part}".encode()
    if alg == "ES256":
        if len(signature) != 64:
            raise ValueError("an ES256 signature is r || s, 64 bytes")
        r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
        key.verify(utils.encode_dss_signature(r, s), signed, ec.ECDSA(hashes.SHA256()))
    else:
        key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    return header, claims


def scripted_failure(token, respond):
    """The failure a test told the server to answer for `token` next, through `respond`; None."""
    answers = SCRIPT.get(token)
    answer = answers.pop(0) if answers else None
    if not answer or answer[0] == 200:
        return None
    status, why, retry_after = answer
    return respond(status, why, {"retry-after": str(retry_after)} if retry_after is not None else None)


def apns(path, headers, body):
    environment = "sandbox" if path.startswith("/sandbox/") else "production"
    token = path.rsplit("/", 1)[-1]

    def reason(status, why, extra=None):
        return status, {"content-type": "application/json", **(extra or {})}, json.dumps({"reason": why}).encode()

    authorization = headers.get("authorization", "")
    if not authorization.startswith("bearer "):
        return reason(403, "MissingProviderToken")
    try:
        jwt = authorization[len("bearer "):]
        header, claims = VERIFIED.get(jwt) or verify_jwt(jwt, APNS_KEY, "ES256")
        VERIFIED[jwt] = (header, claims)
    except Exception as error:
        print(f"apns: provider token refused: {error}", flush=True)
        return reason(403, "InvalidProviderToken")
    if header.get("kid") != ARGS.apns_key_id or claims.get("iss") != ARGS.apns_team_id:
        return reason(403, "InvalidProviderToken")
    if abs(time.time() - claims.get("iat", 0)) > 3600:
        return reason(403, "ExpiredProviderToken")
    if len(token) < 16 or len(token) % 2 or any(c not in "0123456789abcdefABCDEF" for c in token):
        return reason(400, "BadDeviceToken")
    if not headers.get("apns-topic"):
        return reason(400, "MissingTopic")
    if headers.get("apns-push-type") != "alert":
        return reason(400, "InvalidPushType")
    if len(headers.get("apns-collapse-id", "").encode()) > 64:
        return reason(400, "BadCollapseId")
    try:
        if int(headers.get("apns-expiration", "")) <= time.time():
            return reason(400, "BadExpirationDate")
    except ValueError:
        return reason(400, "BadExpirationDate")
    if len(body) > 4096:
        return reason(413, "PayloadTooLarge")
    try:
        payload = json.loads(body)
        if not payload["aps"]["alert"]["body"]:
            raise ValueError("an empty body")
    except Exception:
        return reason(400, "PayloadEmpty")
    failure = scripted_failure(token, reason)
    if failure:
        return failure
    RECEIVED.append({"provider": "apns", "environment": environment, "token": token, "topic": headers["apns-topic"],
                     "collapseId": headers.get("apns-collapse-id"), "payload": payload, "at": time.time()})
    return 200, {"apns-id": secrets.token_hex(16)}, b""


def fcm_token(headers, body):
    form = urllib.parse.parse_qs(body.decode())
    if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"] or not form.get("assertion"):
        return 400, {"content-type": "application/json"}, b'{"error": "invalid_request"}'
    try:
        _, claims = verify_jwt(form["assertion"][0], FCM_KEY, "RS256")
    except Exception as error:
        print(f"fcm: assertion refused: {error}", flush=True)
        return 400, {"content-type": "application/json"}, b'{"error": "invalid_grant"}'
    if (claims.get("iss") != ARGS.fcm_email or claims.get("aud") != ARGS.fcm_token_url
            or "https://www.googleapis.com/auth/firebase.messaging" not in claims.get("scope", "").split()
            or claims.get("exp", 0) <= time.time()):
        return 400, {"content-type": "application/json"}, b'{"error": "invalid_grant"}'
    token = "ya29." + secrets.token_urlsafe(24)
    ACCESS_TOKENS.add(token)
    return 200, {"content-type": "application/json"}, json.dumps({"access_token": token, "expires_in": 3599, "token_type": "Bearer"}).encode()


def fcm_send(path, headers, body):
    def error(status, code, extra=None):
        detail = {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}
        return status, {"content-type": "application/json", **(extra or {})}, json.dumps(
            {"error": {"code": status, "message": code, "status": code, "details": [detail]}}).encode()

    authorization = headers.get("authorization", "")
    if not authorization.startswith("Bearer ") or authorization[len("Bearer "):] not in ACCESS_TOKENS:
        return 401, {"content-type": "application/json"}, b'{"error": {"code": 401, "status": "UNAUTHENTICATED"}}'
    try:
        message = json.loads(body)["message"]
        token = message["token"]
        if not message["notification"]["body"]:
            raise ValueError("an empty body")
    except Exception:
        return error(400, "INVALID_ARGUMENT")
    failure = scripted_failure(token, error)
    if failure:
        return failure
    project = path.split("/")[3]
    RECEIVED.append({"provider": "fcm", "project": project, "token": token, "payload": message, "at": time.time()})
    return 200, {"content-type": "application/json"}, json.dumps({"name": f"projects/{project}/messages/{secrets.token_hex(8)}"}).encode()


def route(method, path, headers, body):
    if method == "POST" and (path.startswith("/3/device/") or path.startswith("/sandbox/3/device/")):
        return apns(path, headers, body)
    if method == "POST" and path == "/token":
        return fcm_token(headers, body)
    if method == "POST" and path.startswith("/v1/projects/") and path.endswith("/messages:send"):
        return fcm_send(path, headers, body)
    if method == "GET" and path == "/control/count":
        return 200, {"content-type": "application/json"}, str(len(RECEIVED)).encode()
    if method == "GET" and path == "/control/received":
        return 200, {"content-type": "application/json"}, json.dumps(RECEIVED).encode()
    if method == "POST" and path == "/control/script":
        for token, answers in json.loads(body).items():
            SCRIPT.setdefault(token, []).extend(answers)
        return 204, {}, b""
    return 404, {"content-type": "application/json"}, b'{"reason": "BadPath"}'


async def serve_http1(reader, writer):
    """The test's control requests, over HTTP/1.1 (a client that asked for no h2): one per connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    status, response_headers, response_body = route(method, path, headers, body) if path.startswith("/control/") else (404, {}, b"")
    extra = "".join(f"{k}: {v}\r\n" for k, v in response_headers.items())
    writer.write(f"HTTP/1.1 {status} X\r\n{extra}content-length: {len(response_body)}\r\nconnection: close\r\n\r\n".encode() + response_body)
    await writer.drain()
    writer.close()


async def serve(reader, writer):
    if writer.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
        return await serve_http1(reader, writer)
    connection = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    connection.initiate_connection()
    writer.write(connection.data_to_send())
    requests = {}
    while True:
        data = await reader.read(65536)
        if not data:
            break
        for event in connection.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                requests[event.stream_id] = (dict(event.headers), bytearray())
            elif isinstance(event, h2.events.DataReceived):
                requests[event.stream_id][1].extend(event.data)
                connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                headers, body = requests.pop(event.stream_id)
                status, response_headers, response_body = route(headers[":method"], headers[":path"], headers, bytes(body))
                connection.send_headers(event.stream_id, [(":status", str(status))] + [(k, v) for k, v in response_headers.items()]
                                        + [("content-length", str(len(response_body)))], end_stream=not response_body)
                if response_body:
                    connection.send_data(event.stream_id, response_body, end_stream=True)
            elif isinstance(event, h2.events.ConnectionTerminated):
                writer.write(connection.data_to_send())
                writer.close()
                return
        writer.write(connection.data_to_send())
        await writer.drain()
    writer.close()


async def main():
    global ARGS, APNS_KEY, FCM_KEY
    parser = argparse.ArgumentParser(description="A local APNs and FCM stand-in for Parley's push tests.")
    for flag in ["--port", "--cert", "--key", "--apns-key", "--apns-key-id", "--apns-team-id", "--fcm-key", "--fcm-email", "--fcm-token-url"]:
        parser.add_argument(flag, required=True)
    ARGS = parser.parse_args()
    with open(ARGS.apns_key, "rb") as f:
        APNS_KEY = serialization.load_pem_private_key(f.read(), password=None).public_key()
    with open(ARGS.fcm_key, "rb") as f:
        FCM_KEY = serialization.load_pem_private_key(f.read(), password=None).public_key()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(ARGS.cert, ARGS.key)
    context.set_alpn_protocols(["h2"])
    server = await asyncio.start_server(serve, "127.0.0.1", int(ARGS.port), ssl=context)
    print(f"push server listening on 127.0.0.1:{ARGS.port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
