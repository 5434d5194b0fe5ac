#!/usr/bin/env python3
"""A webhook receiver for the end-to-end test: HTTPS, checks each delivery's Standard Webhooks
signature with the standardwebhooks library (as a receiver would) and appends what it got, one
JSON line per delivery, to a file that outlives it (the test kills it and starts it again).

    webhook_receiver.py --port P --cert CERT --key KEY --secret whsec_... --out FILE
"""
import argparse
import http.server
import json
import ssl
import time

from standardwebhooks import Webhook


def main():
    parser = argparse.ArgumentParser()
    for flag in ["--port", "--cert", "--key", "--secret", "--out"]:
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    verifier = Webhook(args.secret)
    out = open(args.out, "a", buffering=1)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            delivery_id = self.headers.get("webhook-id", "")
            timestamp = self.headers.get("webhook-timestamp", "")
            try:
                verifier.verify(body, {name.lower(): value for name, value in self.headers.items()})
                valid = True
            except Exception:  # the library's WebhookVerificationError, or a header it could not read
                valid = False
            fresh = timestamp.isdigit() and abs(time.time() - int(timestamp)) < 300
            try:
                event = json.loads(body)
            except ValueError:
                event = {}
            data = event.get("data", {})
            conversation = data.get("conversationId") or data.get("conversation", {}).get("id") or data.get("change", {}).get("conversationId")
            record = {"id": delivery_id, "valid": valid, "fresh": fresh, "type": event.get("type"), "timestamp": event.get("timestamp"),
                      "conversationId": conversation, "seq": data.get("message", {}).get("seq"), "text": data.get("message", {}).get("text"),
                      "userIds": data.get("userIds"), "name": data.get("conversation", {}).get("name"), "readSeq": data.get("readSeq"),
                      "userId": data.get("userId") or data.get("report", {}).get("userId"), "report": data.get("report"), "erased": data.get("erased"), "change": data.get("change"), "path": self.path, "contentType": self.headers.get("content-type"), "at": time.time()}
            out.write(json.dumps(record) + "\n")
            self.send_response(204 if valid else 401)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(args.port)), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
