"""A WebSocket over HTTP/2 (RFC 8441) with the `h2` package: a client independent of Parley's own
code and of the browser's, to try the gateway's send socket (`CONNECT /v1/sends`) frame by frame,
broken frames included."""
import socket
import ssl
import struct

import h2.config
import h2.connection
import h2.events
import h2.settings

from e2e_lib import read_websocket_frame, websocket_frame as frame

TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA


class H2WebSocket:
    """One TLS connection (ALPN h2) with one WebSocket stream on it."""

    def __init__(self, port, path="/v1/sends", timeout=15):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
        self.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=timeout), server_hostname="localhost")
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.flush()
        self.connect_protocol = None
        self.status = None
        self.buffer = b""
        self.ended = False
        self.reset = None
        while self.connect_protocol is None and not self.ended:
            self.pump()
        self.stream = self.conn.get_next_available_stream_id()
        if self.connect_protocol:
            self.conn.send_headers(self.stream, [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"), (":path", path),
                                                 (":authority", f"localhost:{port}"), ("sec-websocket-version", "13")])
            self.flush()
            while self.status is None and not self.ended and self.reset is None:
                self.pump()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(self):
        try:
            data = self.sock.recv(65536)
        except (socket.timeout, ConnectionError, ssl.SSLError):
            data = b""
        if not data:
            self.ended = True
            return
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.RemoteSettingsChanged) and self.connect_protocol is None:
                changed = event.changed_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL)
                self.connect_protocol = bool(changed and changed.new_value == 1)
            elif isinstance(event, h2.events.ResponseReceived):
                self.status = int(dict(event.headers)[":status"])
            elif isinstance(event, h2.events.DataReceived):
                self.buffer += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.ended = True
            elif isinstance(event, h2.events.StreamReset):
                self.reset = event.error_code
                self.ended = True
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.ended = True
        self.flush()

    def send(self, data):
        while data:
            while self.conn.local_flow_control_window(self.stream) == 0 and not self.ended:
                self.pump()
            if self.ended:
                return
            size = min(len(data), self.conn.max_outbound_frame_size, self.conn.local_flow_control_window(self.stream))
            self.conn.send_data(self.stream, data[:size])
            data = data[size:]
            self.flush()

    def send_text(self, text):
        self.send(frame(TEXT, text.encode()))

    def receive(self):
        """The next frame from the server, (opcode, payload); None once the stream is over."""
        while True:
            read = read_websocket_frame(self.buffer)
            if read is not None:
                opcode, payload, self.buffer = read
                return opcode, payload
            if self.ended:
                return None
            self.pump()

    def close_code(self):
        """The code of the server's close frame, after any other frames it sent first; None without one."""
        while (received := self.receive()) is not None:
            if received[0] == CLOSE:
                return struct.unpack("!H", received[1][:2])[0] if len(received[1]) >= 2 else None
        return None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
