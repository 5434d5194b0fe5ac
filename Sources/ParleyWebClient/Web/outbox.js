// Messages typed while offline, kept in IndexedDB (one database per user) with their
// clientMessageId until the server has them: sent in the order they were typed when the
// connection returns, each at most once (the server drops a repeated clientMessageId), across
// reloads too. A photo waits with its message, as a Blob, until it is uploaded.

export class Outbox {
  static open(userId) {
    return new Promise((resolve, reject) => {
      const request = indexedDB.open(`parley-outbox-${userId}`, 1);
      request.onupgradeneeded = () => request.result.createObjectStore('messages', { keyPath: 'clientMessageId' });
      request.onsuccess = () => resolve(new Outbox(request.result));
      request.onerror = () => reject(request.error);
    });
  }

  constructor(db) {
    this.db = db;
    this.counter = 0;
  }

  transaction(mode, body) {
    return new Promise((resolve, reject) => {
      const tx = this.db.transaction('messages', mode);
      const result = body(tx.objectStore('messages'));
      tx.oncomplete = () => resolve(result.result ?? result);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  }

  // Keeps an entry {clientMessageId, conversationId, text, photo?, mediaId?}; answers it with its
  // place in line.
  async add(entry) {
    const kept = { ...entry, order: Date.now() * 1000 + (this.counter++ % 1000) };
    await this.transaction('readwrite', (store) => store.put(kept));
    return kept;
  }

  update(entry) { return this.transaction('readwrite', (store) => store.put(entry)); }

  remove(clientMessageId) { return this.transaction('readwrite', (store) => store.delete(clientMessageId)); }

  // Every entry, in the order they were typed.
  async all() {
    const entries = await this.transaction('readonly', (store) => store.getAll());
    return entries.sort((a, b) => a.order - b.order);
  }

  close() { this.db.close(); }
}
