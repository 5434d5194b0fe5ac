// Parley's HTTP API and its event stream, as an app uses them. The token travels in the
// Authorization header only — never in a URL or a cookie — which is why the event stream is read
// with fetch and a streaming parser rather than EventSource (which cannot send headers).

export class ApiError extends Error {
  constructor(status, code, message, retryable) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryable = retryable;
  }
}

// Requests go to one gateway of the cluster's at a time: the page's own first, the next one in
// the list once it cannot be reached (each gateway answers pages the others served: CORS).
export class Api {
  constructor() {
    this.bases = [location.origin];
    this.index = 0;
    this.token = null;
    this.sends = new SendSocket(this);
  }

  get base() { return this.bases[this.index]; }

  // The cluster's gateways (`/client.json`), the page's own first.
  useGateways(urls) {
    const origins = urls.map((url) => { try { return new URL(url).origin; } catch { return null; } }).filter(Boolean);
    this.bases = [location.origin, ...origins.filter((origin) => origin !== location.origin)];
    this.index = 0;
  }

  // The gateway in use cannot be reached: the next one from now on.
  failover() { this.index = (this.index + 1) % this.bases.length; }

  // One request: JSON in and out, a Blob sent as it is (an upload). Answers the parsed JSON, null
  // for 204, or the Response itself with `raw` (bytes to read). Throws ApiError: code `offline`
  // when the server could not be reached (retryable), else the server's error.
  async request(method, path, body, { raw = false } = {}) {
    const headers = {};
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    let payload;
    if (body instanceof Blob) {
      payload = body;
      headers['Content-Type'] = body.type || 'application/octet-stream';
    } else if (body !== undefined) {
      payload = JSON.stringify(body);
      headers['Content-Type'] = 'application/json';
    }
    let response;
    try {
      response = await fetch(this.base + path, { method, headers, body: payload, cache: 'no-store' });
    } catch {
      this.failover();
      throw new ApiError(0, 'offline', 'the server cannot be reached', true);
    }
    if (raw && response.ok) return response;
    if (response.status === 204 || response.status === 304) return null;
    const text = await response.text().catch(() => '');
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch { json = null; }
    if (!response.ok) {
      const error = json?.error ?? {};
      throw new ApiError(response.status, error.code ?? 'error', error.message ?? `HTTP ${response.status}`,
        error.retryable ?? (response.status >= 500 || response.status === 429));
    }
    return json;
  }

  // A message, receipts or typing in a conversation: on the send socket when the gateway offers
  // one, else by request. Answers and throws as `request` does.
  async command(type, conversationId, body) {
    // Offline, a socket opened before may still look open (and DevTools' offline mode leaves it
    // so): nothing is sent until the browser is back online.
    if (!navigator.onLine) {
      this.sends.close();
      throw new ApiError(0, 'offline', 'the browser is offline', true);
    }
    const answer = await this.sends.send({ ...body, type, conversationId });
    if (answer !== undefined) return answer;
    return this.post(`/v1/conversations/${conversationId}/${type === 'message' ? 'messages' : type}`, body);
  }

  get(path) { return this.request('GET', path); }
  post(path, body) { return this.request('POST', path, body ?? {}); }
  patch(path, body) { return this.request('PATCH', path, body); }
  put(path, body) { return this.request('PUT', path, body); }
  delete(path) { return this.request('DELETE', path); }
}

// The send stream as a WebSocket: `CONNECT /v1/sends` on the page's own HTTP/2 connection to the
// gateway (RFC 8441), so a message, receipts or typing cost one frame each on a stream already
// open rather than a request. The token is its first message (a WebSocket cannot carry an
// Authorization header). Answers come in order, one per command. Where the browser cannot open
// one over HTTP/2 (it then tries HTTP/1.1, which the gateway refuses), commands go by request,
// and the socket is not tried again for a minute.
export class SendSocket {
  constructor(api) {
    this.api = api;
    this.current = null; // the socket opened or opening, with its `base`, `token` and `waiting`
    this.opening = null; // its promise: the socket once its token is accepted, or null
    this.counter = 0;
    this.refusedAt = -Infinity;
  }

  // The command's answer as `Api.request` gives it; undefined when there is no socket to send it on.
  async send(command) {
    const socket = await this.open();
    if (!socket) return undefined;
    // Closed since it opened, its waiters already failed: this one would wait for good.
    if (socket.readyState !== WebSocket.OPEN) throw new ApiError(0, 'offline', 'the send stream closed', true);
    const id = `s${++this.counter}`;
    const answer = await new Promise((resolve, reject) => {
      socket.waiting.set(id, { resolve, reject });
      socket.send(JSON.stringify({ ...command, id }));
    });
    if (answer.status === 204) return null;
    if (answer.status < 300) return { message: answer.message };
    const error = answer.error ?? {};
    throw new ApiError(answer.status, error.code ?? 'error', error.message ?? `HTTP ${answer.status}`,
      error.retryable ?? (answer.status >= 500 || answer.status === 429));
  }

  // The open socket for the gateway and token in use (one for another closes); null when none opens.
  open() {
    const { base, token } = this.api;
    if (this.current && (this.current.base !== base || this.current.token !== token)) this.close();
    if (!this.opening) {
      if (performance.now() - this.refusedAt < 60000) return Promise.resolve(null);
      this.opening = this.connect(base, token);
    }
    return this.opening;
  }

  connect(base, token) {
    return new Promise((resolve) => {
      let socket;
      try {
        socket = new WebSocket(base.replace(/^http/, 'ws') + '/v1/sends');
      } catch {
        this.refusedAt = performance.now();
        resolve(null);
        return;
      }
      Object.assign(socket, { base, token, waiting: new Map() });
      this.current = socket;
      let named = false;
      // A socket that neither opens nor fails (a proxy holding it) does not hold the sends up.
      const patience = setTimeout(() => { if (!named) socket.close(); }, 10000);
      socket.onopen = () => socket.send(JSON.stringify({ token }));
      socket.onmessage = (event) => {
        let answer = null;
        try { answer = JSON.parse(event.data); } catch { return; }
        if (!named) {
          clearTimeout(patience);
          named = answer.status === 200;
          if (named) resolve(socket);
          else socket.close();
          return;
        }
        const waiter = socket.waiting.get(answer.id);
        socket.waiting.delete(answer.id);
        waiter?.resolve(answer);
      };
      socket.onclose = () => {
        clearTimeout(patience);
        if (!named) {
          this.refusedAt = performance.now();
          resolve(null);
        }
        if (this.current === socket) {
          this.current = null;
          this.opening = null;
        }
        // A command still waiting may have been carried out: the outbox sends it again with its
        // clientMessageId, which the server keeps once.
        for (const waiter of socket.waiting.values()) waiter.reject(new ApiError(0, 'offline', 'the send stream closed', true));
        socket.waiting.clear();
      };
    });
  }

  close() {
    this.current?.close(1000);
    this.current = null;
    this.opening = null;
  }
}

// Server-sent events from a byte stream: `event`, `data` and `id` fields, a blank line ends an
// event, lines starting with `:` (the server's pings) are comments.
export class SSEParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = '';
    this.reset();
  }

  reset() { this.event = { type: 'message', data: [], id: null }; }

  push(text) {
    this.buffer += text;
    let newline;
    while ((newline = this.buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = this.buffer.slice(0, newline);
      const length = this.buffer.startsWith('\r\n', newline) ? 2 : 1;
      // A lone \r at the very end may be the first half of \r\n: wait for the next chunk.
      if (length === 1 && this.buffer[newline] === '\r' && newline === this.buffer.length - 1) break;
      this.buffer = this.buffer.slice(newline + length);
      this.line(line);
    }
  }

  line(line) {
    if (line === '') {
      if (this.event.data.length > 0 || this.event.id !== null) {
        this.onEvent({ type: this.event.type, data: this.event.data.join('\n'), id: this.event.id });
      }
      this.reset();
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') this.event.type = value;
    else if (field === 'data') this.event.data.push(value);
    else if (field === 'id') this.event.id = value;
  }
}

// The user's event stream, kept open: resumed from the last cursor on every reconnect (at once,
// then with backoff; on the next gateway when this one cannot be reached), the cursor kept across
// reloads; `410 cursor_expired` reported (the app
// reloads) and the stream started afresh. A stream silent for longer than three of the server's
// pings is taken for broken.
export class EventStream {
  constructor(api, { cursorKey, onEvent, onState }) {
    this.api = api;
    this.cursorKey = cursorKey;
    this.onEvent = onEvent;
    this.onState = onState;
    this.cursor = localStorage.getItem(cursorKey);
    this.running = false;
    this.controller = null;
    this.attempt = 0;
    this.wake = null;
    this.reconnectNow = () => { this.attempt = 0; this.controller?.abort(); this.wake?.(); };
  }

  start() {
    if (this.running) return;
    this.running = true;
    window.addEventListener('online', this.reconnectNow);
    this.loop();
  }

  stop() {
    this.running = false;
    window.removeEventListener('online', this.reconnectNow);
    this.controller?.abort();
    this.wake?.();
  }

  async loop() {
    while (this.running) {
      this.onState(this.attempt === 0 ? 'connecting' : 'reconnecting');
      try {
        await this.connect();
      } catch (error) {
        if (error instanceof ApiError && error.status === 401) {
          this.onState('unauthorized');
          this.running = false;
          return;
        }
      }
      if (!this.running) return;
      this.onState('offline');
      // At once the first time, then 0.5 s, 1 s, 2 s … up to 10 s, with jitter.
      const delay = this.attempt === 0 ? 0 : Math.min(10000, 500 * 2 ** (this.attempt - 1)) * (0.5 + Math.random() / 2);
      this.attempt += 1;
      await new Promise((resolve) => { this.wake = resolve; setTimeout(resolve, delay); });
      this.wake = null;
    }
  }

  async connect() {
    const controller = new AbortController();
    this.controller = controller;
    const path = '/v1/events' + (this.cursor ? `?cursor=${encodeURIComponent(this.cursor)}` : '');
    let response;
    try {
      response = await fetch(this.api.base + path, {
        headers: { Authorization: `Bearer ${this.api.token}`, Accept: 'text/event-stream' },
        signal: controller.signal, cache: 'no-store',
      });
    } catch {
      if (!controller.signal.aborted) this.api.failover();
      return;
    }
    if (response.status === 410) {
      this.cursor = null;
      localStorage.removeItem(this.cursorKey);
      this.onEvent({ type: 'cursor_expired' });
      this.attempt = 0;
      return;
    }
    if (response.status === 401) throw new ApiError(401, 'unauthorized', 'the session ended', false);
    if (response.status >= 500) this.api.failover();
    if (!response.ok || !response.body) return;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let silence = null;
    const watch = () => {
      clearTimeout(silence);
      silence = setTimeout(() => controller.abort(), 50000);
    };
    const parser = new SSEParser((event) => {
      if (event.id) {
        this.cursor = event.id;
        localStorage.setItem(this.cursorKey, event.id);
      }
      if (event.type === 'ready') {
        this.attempt = 0;
        this.onState('live');
      }
      let data = null;
      try { data = event.data ? JSON.parse(event.data) : null; } catch { return; }
      this.onEvent({ type: event.type, data });
    });
    watch();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        watch();
        parser.push(decoder.decode(value, { stream: true }));
      }
    } catch {
      // A broken connection: reconnect.
    } finally {
      clearTimeout(silence);
    }
  }
}
