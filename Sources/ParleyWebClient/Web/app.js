// Parley's reference web client: plain browser JavaScript modules, no build step. Everything it
// shows comes from the API and the event stream (api.js); what is typed offline waits in
// IndexedDB (outbox.js). Text from the server is only ever set as text, never as HTML.
import { Api, ApiError, EventStream } from './api.js';
import { Outbox } from './outbox.js';

const api = new Api();
const $ = (id) => document.getElementById(id);
const state = {
  me: null,
  conversations: new Map(), // id → conversation, with `messages` (seq → message) and `pending` (outbox entries)
  users: new Map(), // id → user, or a promise of one
  presence: new Map(), // userId → presence
  typing: new Map(), // conversationId → Map(userId → timer)
  current: null,
  editing: null, // {conversationId, seq} of the message the composer edits
  replying: null, // {conversationId, seq} of the message the composer replies to
  blocked: new Set(), // IDs of the users this user blocked
  stream: null,
  outbox: null,
  wasLive: false, // whether the stream was live before: a reconnect reads the users shown again
};

// ---- signing in and out ----

async function boot() {
  // The gateways this page may fail over to.
  const settings = await fetch('/client.json', { cache: 'no-store' }).then((r) => r.json()).catch(() => null);
  api.useGateways(settings?.gateways ?? []);
  const token = localStorage.getItem('parley.token');
  if (token) {
    api.token = token;
    try {
      state.me = await api.get('/v1/users/me');
      return start();
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 401) {
        // Offline with a session: start anyway; the stream and the outbox wait for the network.
        const saved = localStorage.getItem('parley.me');
        if (saved) { state.me = JSON.parse(saved); return start(); }
      }
      localStorage.removeItem('parley.token');
    }
  }
  $('signin').hidden = false;
  $('signin-handle').focus();
}

$('signin-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const action = event.submitter?.value ?? 'login';
  const handle = $('signin-handle').value, password = $('signin-password').value;
  $('signin-error').textContent = '';
  try {
    const reply = action === 'register'
      ? await api.post('/v1/users', { handle, password, displayName: $('signin-name').value || handle })
      : await api.post('/v1/sessions', { handle, password });
    api.token = reply.token;
    state.me = reply.user;
    localStorage.setItem('parley.token', reply.token);
    $('signin').hidden = true;
    await start();
  } catch (error) {
    $('signin-error').textContent = error.message;
  }
});

$('logout').addEventListener('click', async () => {
  try { await api.delete('/v1/sessions/current'); } catch { /* the token is forgotten here either way */ }
  state.stream?.stop();
  state.outbox?.close();
  api.sends.close();
  localStorage.removeItem('parley.token');
  localStorage.removeItem('parley.me');
  location.reload();
});

// ---- settings: sessions and the password ----

const dateOf = (iso) => new Date(iso).toLocaleString([], { dateStyle: 'medium', timeStyle: 'short' });

$('open-settings').addEventListener('click', async () => {
  $('settings-result').textContent = '';
  $('settings-error').textContent = '';
  $('password-handle').value = state.me.handle;
  $('settings').showModal();
  await renderSessions();
});

// ---- the profile photo ----

function renderMe() {
  localStorage.setItem('parley.me', JSON.stringify(state.me));
  state.users.set(state.me.id, state.me);
  $('me-avatar').replaceWith(Object.assign(avatar(state.me.avatar, state.me.avatarURL, state.me.displayName), { id: 'me-avatar' }));
  $('me').textContent = state.me.displayName;
  $('avatar-preview').replaceWith(Object.assign(avatar(state.me.avatar, state.me.avatarURL, state.me.displayName, { size: 320, large: true }), { id: 'avatar-preview' }));
  $('avatar-remove').hidden = !state.me.avatar && !state.me.avatarURL;
}

// An image file uploaded, then made a photo by `use` (the upload's ID); what went wrong is shown
// in `errorId`.
async function setPhoto(input, errorId, use) {
  const [file] = input.files;
  input.value = '';
  if (!file) return;
  $(errorId).textContent = '';
  try {
    const { media } = await api.request('POST', '/v1/media', file);
    await use(media.id);
  } catch (error) {
    $(errorId).textContent = error.message;
  }
}

$('avatar-file').addEventListener('change', () => setPhoto($('avatar-file'), 'settings-error', async (mediaId) => {
  state.me = await api.put('/v1/users/me/avatar', { mediaId });
  renderMe();
  $('settings-result').textContent = 'Your profile photo was changed.';
}));
$('avatar-remove').addEventListener('click', async () => {
  try {
    state.me = await api.delete('/v1/users/me/avatar');
    renderMe();
  } catch (error) {
    $('settings-error').textContent = error.message;
  }
});
$('group-photo').addEventListener('change', () => setPhoto($('group-photo'), 'conversation-error', (mediaId) =>
  act(() => api.put(`/v1/conversations/${state.current}/photo`, { mediaId }))));
$('group-photo-remove').addEventListener('click', () => act(() => api.delete(`/v1/conversations/${state.current}/photo`)));

// Names and photos change while a stream is away, and are not replayed: the users shown are read
// again, 100 to a request.
async function refreshUsers() {
  const ids = [...state.users.keys()].filter((id) => !(state.users.get(id) instanceof Promise));
  for (let i = 0; i < ids.length; i += 100) {
    const reply = await api.get(`/v1/users?ids=${ids.slice(i, i + 100).join(',')}`).catch(() => null);
    for (const found of reply?.users ?? []) state.users.set(found.id, found);
  }
  const me = state.users.get(state.me.id);
  if (me) { state.me = me; renderMe(); }
  renderList();
  if (state.current) renderConversation();
}

async function renderSessions() {
  const list = $('sessions');
  try {
    const { sessions } = await api.get('/v1/sessions');
    list.replaceChildren(...sessions.map((session) => {
      const item = document.createElement('li');
      item.dataset.id = session.id;
      const device = document.createElement('span');
      device.className = 'device';
      device.textContent = session.userAgent ?? 'an unnamed app';
      const when = document.createElement('span');
      when.className = 'when';
      when.textContent = `signed in ${dateOf(session.createdAt)} · last used ${dateOf(session.lastUsedAt)}`;
      device.append(when);
      item.append(device);
      if (session.current) {
        const here = document.createElement('span');
        here.className = 'here';
        here.textContent = 'this browser';
        item.append(here);
      } else {
        const revoke = document.createElement('button');
        revoke.type = 'button';
        revoke.className = 'revoke';
        revoke.textContent = 'Sign out';
        revoke.setAttribute('aria-label', `Sign out ${device.firstChild.textContent}`);
        revoke.addEventListener('click', async () => {
          try {
            await api.delete(`/v1/sessions/${encodeURIComponent(session.id)}`);
            $('settings-result').textContent = 'Signed out.';
          } catch (error) {
            $('settings-error').textContent = error.message;
          }
          await renderSessions();
        });
        item.append(revoke);
      }
      return item;
    }));
  } catch (error) {
    $('settings-error').textContent = error.message;
  }
}

$('export').addEventListener('click', async () => {
  $('settings-error').textContent = '';
  try {
    const response = await api.request('GET', '/v1/users/me/export', undefined, { raw: true });
    const link = document.createElement('a');
    link.href = URL.createObjectURL(await response.blob());
    link.download = 'parley-export.json';
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 60000);
    $('settings-result').textContent = 'Your data was downloaded.';
  } catch (error) {
    $('settings-error').textContent = error.message;
  }
});

$('password-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  $('settings-result').textContent = '';
  $('settings-error').textContent = '';
  try {
    await api.put('/v1/users/me/password', { current: $('password-current').value, new: $('password-new').value });
    $('password-current').value = '';
    $('password-new').value = '';
    $('settings-result').textContent = 'Password changed. Every other session is signed out.';
    await renderSessions();
  } catch (error) {
    $('settings-error').textContent = error.message;
  }
});

$('delete-account-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  $('settings-result').textContent = '';
  $('settings-error').textContent = '';
  const erase = $('delete-erase').checked;
  // The deletion ends this page's stream, whose reconnection would be refused (401) and reload
  // the page before the answer: it stops first, and starts again if the deletion is refused.
  state.stream?.stop();
  try {
    await api.request('DELETE', `/v1/users/me?erase=${erase}`, { password: $('delete-password').value });
  } catch (error) {
    $('settings-error').textContent = error.message;
    state.stream?.start();
    return;
  }
  state.outbox?.close();
  api.sends.close();
  localStorage.removeItem('parley.token');
  localStorage.removeItem('parley.me');
  localStorage.removeItem(`parley.cursor.${state.me.id}`);
  $('settings').close();
  $('app').hidden = true;
  $('signin').hidden = false;
  $('signin-error').textContent = erase ? 'Your account was deleted, and your messages erased.' : 'Your account was deleted.';
});

async function start() {
  renderMe();
  $('app').hidden = false;
  state.outbox = await Outbox.open(state.me.id);
  for (const entry of await state.outbox.all()) pendingIn(entry.conversationId).push(entry);
  await loadConversations().catch(() => {});
  await loadBlocks().catch(() => {});
  state.stream = new EventStream(api, { cursorKey: `parley.cursor.${state.me.id}`, onEvent, onState });
  state.stream.start();
  flush();
}

// ---- conversations ----

function pendingIn(conversationId) {
  const conversation = state.conversations.get(conversationId);
  if (conversation) return conversation.pending;
  state.orphanPending ??= new Map();
  if (!state.orphanPending.has(conversationId)) state.orphanPending.set(conversationId, []);
  return state.orphanPending.get(conversationId);
}

function remember(conversation) {
  const known = state.conversations.get(conversation.id);
  const merged = Object.assign(known ?? { messages: new Map(), pending: state.orphanPending?.get(conversation.id) ?? [], loadedAll: false, historyLoaded: false }, conversation);
  if (known && known.lastSeq > merged.lastSeq) {
    merged.lastSeq = known.lastSeq;
    merged.lastMessage = known.lastMessage;
  }
  state.conversations.set(conversation.id, merged);
  for (const member of merged.members) user(member.userId);
  return merged;
}

async function loadConversations() {
  let cursor = null;
  do {
    const page = await api.get(`/v1/conversations?limit=50${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    for (const conversation of page.conversations) remember(conversation);
    cursor = page.next;
  } while (cursor);
  await refreshPresence();
  renderList();
}

function user(id) {
  const known = state.users.get(id);
  if (known && !(known instanceof Promise)) return known;
  if (!known) {
    const loading = api.get(`/v1/users/${id}`).then((found) => {
      state.users.set(id, found);
      renderList();
      if (state.current) renderConversation();
      return found;
    }).catch(() => state.users.delete(id));
    state.users.set(id, loading);
  }
  return null;
}

const nameOf = (id) => { const found = user(id); return found?.deleted ? 'Deleted account' : found?.displayName ?? '…'; };

// A round picture: the photo's small thumbnail, else a picture kept elsewhere, else an initial.
function avatar(photo, url, label, { size = 160, large = false } = {}) {
  const holder = document.createElement('span');
  holder.className = large ? 'avatar large' : 'avatar';
  holder.setAttribute('aria-hidden', 'true');
  holder.textContent = (label ?? '').trim().charAt(0).toUpperCase();
  const img = document.createElement('img');
  img.alt = '';
  if (photo) {
    thumbnail(photo.id, size).then((src) => { if (src) { img.src = src; holder.replaceChildren(img); } });
  } else if (url) {
    img.src = url;
    img.referrerPolicy = 'no-referrer';
    img.addEventListener('load', () => holder.replaceChildren(img));
  }
  holder.dataset.photo = photo?.id ?? '';
  return holder;
}

function avatarOf(conversation) {
  if (conversation.kind === 'group') return avatar(conversation.photo, null, titleOf(conversation));
  const other = user(others(conversation)[0]?.userId);
  return avatar(other?.deleted ? null : other?.avatar, other?.deleted ? null : other?.avatarURL, titleOf(conversation));
}
const others = (conversation) => conversation.members.filter((member) => member.userId !== state.me.id);

function titleOf(conversation) {
  if (conversation.kind === 'group') return conversation.name ?? 'Group';
  const other = others(conversation)[0];
  return other ? nameOf(other.userId) : 'Just you';
}

async function refreshPresence() {
  const ids = [...new Set([...state.conversations.values()].filter((c) => c.kind === 'direct').flatMap((c) => others(c).map((m) => m.userId)))];
  for (let i = 0; i < ids.length; i += 100) {
    const reply = await api.get(`/v1/presence?userIds=${ids.slice(i, i + 100).join(',')}`).catch(() => null);
    for (const presence of reply?.presence ?? []) state.presence.set(presence.userId, presence);
  }
}

function summaryOf(message) {
  if (!message) return '';
  if (message.erased) return 'Message erased';
  if (message.deleted) return 'Message deleted';
  if (message.text) return message.text;
  const files = message.attachments ?? [];
  return files.length === 0 ? '' : files[0].media.contentType.startsWith('image/') ? 'Photo' : 'File';
}

function renderList() {
  const list = $('conversations');
  const sorted = [...state.conversations.values()].sort((a, b) =>
    (b.lastMessage?.sentAt ?? b.createdAt).localeCompare(a.lastMessage?.sentAt ?? a.createdAt));
  list.replaceChildren(...sorted.map((conversation) => {
    const item = document.createElement('li');
    item.tabIndex = 0;
    item.dataset.id = conversation.id;
    item.setAttribute('aria-current', String(conversation.id === state.current));
    const dot = document.createElement('span');
    dot.className = 'dot';
    if (conversation.kind === 'direct') {
      const status = state.presence.get(others(conversation)[0]?.userId)?.status ?? 'offline';
      dot.classList.add(status);
      dot.title = status;
    } else {
      dot.style.visibility = 'hidden';
    }
    const summary = document.createElement('div');
    summary.className = 'summary';
    const name = document.createElement('div');
    name.className = 'name';
    name.textContent = titleOf(conversation);
    const last = document.createElement('div');
    last.className = 'last';
    last.textContent = summaryOf(conversation.lastMessage);
    summary.append(name, last);
    item.append(avatarOf(conversation), dot, summary);
    if (conversation.unreadCount > 0) {
      const unread = document.createElement('span');
      unread.className = 'unread';
      unread.textContent = String(conversation.unreadCount);
      unread.setAttribute('aria-label', `${conversation.unreadCount} unread`);
      item.append(unread);
    }
    const open = () => openConversation(conversation.id);
    item.addEventListener('click', open);
    item.addEventListener('keydown', (event) => { if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); open(); } });
    return item;
  }));
}

async function findUser(handle) {
  const reply = await api.get(`/v1/users?prefix=${encodeURIComponent(handle)}&limit=20`);
  const found = reply.users.find((candidate) => candidate.handle === handle);
  if (!found) throw new Error(`nobody is called ${handle}`);
  state.users.set(found.id, found);
  return found;
}

let suggest = null;
$('new-chat-handle').addEventListener('input', () => {
  clearTimeout(suggest);
  const prefix = $('new-chat-handle').value;
  if (prefix.length < 1) return;
  suggest = setTimeout(async () => {
    const reply = await api.get(`/v1/users?prefix=${encodeURIComponent(prefix)}&limit=8`).catch(() => null);
    $('handles').replaceChildren(...(reply?.users ?? []).map((found) => {
      const option = document.createElement('option');
      option.value = found.handle;
      option.label = found.displayName;
      return option;
    }));
  }, 200);
});

$('new-chat').addEventListener('submit', async (event) => {
  event.preventDefault();
  $('sidebar-error').textContent = '';
  try {
    const other = await findUser($('new-chat-handle').value.trim());
    const { conversation } = await api.post('/v1/conversations', { memberIds: [other.id] });
    remember(conversation);
    $('new-chat-handle').value = '';
    await refreshPresence();
    openConversation(conversation.id);
  } catch (error) {
    $('sidebar-error').textContent = error.message;
  }
});

$('new-group').addEventListener('submit', async (event) => {
  event.preventDefault();
  $('sidebar-error').textContent = '';
  try {
    const handles = $('new-group-handles').value.split(',').map((h) => h.trim()).filter(Boolean);
    const members = await Promise.all(handles.map(findUser));
    const { conversation } = await api.post('/v1/conversations', { memberIds: members.map((m) => m.id), name: $('new-group-name').value });
    remember(conversation);
    $('new-group-name').value = $('new-group-handles').value = '';
    openConversation(conversation.id);
  } catch (error) {
    $('sidebar-error').textContent = error.message;
  }
});

// ---- one conversation ----

async function openConversation(id) {
  state.current = id;
  $('app').classList.add('open');
  $('conversation').hidden = false;
  $('group-panel').hidden = true;
  $('info').setAttribute('aria-expanded', 'false');
  $('conversation-error').textContent = '';
  const conversation = state.conversations.get(id);
  renderList();
  renderConversation({ toBottom: true });
  if (!conversation.historyLoaded) {
    await loadOlder(conversation, conversation.lastSeq + 1);
    conversation.historyLoaded = true;
    renderConversation({ toBottom: true });
  }
  $('text').focus();
  markRead();
}

$('back').addEventListener('click', () => {
  state.current = null;
  $('app').classList.remove('open');
  $('conversation').hidden = true;
  renderList();
});

async function loadOlder(conversation, before) {
  if (conversation.loadedAll || before <= 1) { conversation.loadedAll = true; return; }
  const reply = await api.get(`/v1/conversations/${conversation.id}/messages?before=${before}&limit=50`).catch(() => null);
  if (!reply) return;
  for (const message of reply.messages) conversation.messages.set(message.seq, message);
  if (reply.messages.length < 50 || reply.messages[0]?.seq === 1) conversation.loadedAll = true;
}

$('messages').addEventListener('scroll', async () => {
  const list = $('messages');
  const conversation = state.conversations.get(state.current);
  if (!conversation) return;
  if (list.scrollTop < 40 && !conversation.loadedAll && !conversation.loadingOlder) {
    conversation.loadingOlder = true;
    const oldest = Math.min(...conversation.messages.keys());
    const fromBottom = list.scrollHeight - list.scrollTop;
    await loadOlder(conversation, Number.isFinite(oldest) ? oldest : conversation.lastSeq + 1);
    conversation.loadingOlder = false;
    renderConversation();
    list.scrollTop = list.scrollHeight - fromBottom;
  }
  markRead();
});

function atBottom() {
  const list = $('messages');
  return list.scrollHeight - list.scrollTop - list.clientHeight < 40;
}

// Reads are reported when the newest message is on screen, the page visible.
function markRead() {
  const conversation = state.conversations.get(state.current);
  if (!conversation || document.visibilityState !== 'visible' || !atBottom()) return;
  const mine = conversation.members.find((member) => member.userId === state.me.id);
  if (!mine || conversation.lastSeq <= mine.readSeq) return;
  mine.readSeq = mine.deliveredSeq = conversation.lastSeq;
  conversation.unreadCount = 0;
  api.command('receipts', conversation.id, { readSeq: conversation.lastSeq }).catch(() => {});
  renderList();
}
document.addEventListener('visibilitychange', markRead);

// Deliveries are reported once a message from someone else arrives, a few at once.
const deliveries = new Map();
function delivered(conversationId, seq) {
  const waiting = deliveries.get(conversationId);
  if (waiting) { waiting.seq = Math.max(waiting.seq, seq); return; }
  deliveries.set(conversationId, { seq });
  setTimeout(() => {
    const { seq: deliveredSeq } = deliveries.get(conversationId);
    deliveries.delete(conversationId);
    api.command('receipts', conversationId, { deliveredSeq }).catch(() => {});
  }, 300);
}

function tickOf(conversation, seq) {
  const rest = others(conversation);
  if (rest.length > 0 && rest.every((member) => member.readSeq >= seq)) return ['✓✓', 'read'];
  if (rest.length > 0 && rest.every((member) => member.deliveredSeq >= seq)) return ['✓✓', 'delivered'];
  return ['✓', 'sent'];
}

const timeOf = (iso) => new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });

function statusText(conversation) {
  const typingNow = [...(state.typing.get(conversation.id)?.keys() ?? [])].map(nameOf);
  $('typing').textContent = typingNow.length ? `${typingNow.join(', ')} ${typingNow.length > 1 ? 'are' : 'is'} typing…` : '';
  if (conversation.kind === 'group') return `${conversation.members.length} members`;
  const presence = state.presence.get(others(conversation)[0]?.userId);
  if (!presence) return '';
  if (presence.status !== 'offline') return presence.status;
  return presence.lastSeenAt ? `last seen ${new Date(presence.lastSeenAt).toLocaleString()}` : 'offline';
}

function renderConversation({ toBottom = false } = {}) {
  const conversation = state.conversations.get(state.current);
  if (!conversation) return;
  const stick = toBottom || atBottom();
  $('conversation-name').textContent = titleOf(conversation);
  $('conversation-avatar').replaceWith(Object.assign(avatarOf(conversation), { id: 'conversation-avatar' }));
  $('conversation-status').textContent = statusText(conversation);
  $('info').hidden = conversation.kind !== 'group';
  const other = conversation.kind === 'direct' ? others(conversation)[0]?.userId : null;
  $('block').hidden = !other;
  if (other) $('block').textContent = state.blocked.has(other) ? 'Unblock' : 'Block';
  $('report').hidden = !other;
  renderPinned(conversation);
  const items = [...conversation.messages.values()].sort((a, b) => a.seq - b.seq).map((message) => bubble(conversation, message));
  const sentIds = new Set([...conversation.messages.values()].map((m) => m.clientMessageId));
  for (const entry of conversation.pending) {
    if (!sentIds.has(entry.clientMessageId)) items.push(bubble(conversation, null, entry));
  }
  $('messages').replaceChildren(...items);
  if (stick) $('messages').scrollTop = $('messages').scrollHeight;
  renderMembers(conversation);
}

function bubble(conversation, message, pending = null) {
  const item = document.createElement('li');
  const mine = pending !== null || message.senderId === state.me.id;
  item.classList.toggle('mine', mine);
  if (message) item.dataset.seq = String(message.seq);
  if (pending) item.dataset.pending = pending.clientMessageId;
  if (!mine && conversation.kind === 'group') {
    const sender = document.createElement('span');
    sender.className = 'sender';
    sender.textContent = nameOf(message.senderId);
    item.append(sender);
  }
  const replyTo = message?.replyTo ?? (pending?.replyTo ? quoteOf(conversation.messages.get(pending.replyTo)) : null);
  if (replyTo) item.append(quoteBlock(replyTo));
  if (message?.mentions?.includes(state.me.id)) item.classList.add('mentioned');
  for (const attachment of message?.attachments ?? []) {
    if (!attachment.media.contentType.startsWith('image/')) continue;
    item.append(image(attachment.media.id, attachment.caption ?? 'Photo'));
  }
  if (pending?.photo) {
    const preview = document.createElement('img');
    preview.alt = 'Photo, not yet sent';
    // One object URL per waiting photo, however often it is drawn; let go when it is sent.
    pending.previewUrl ??= URL.createObjectURL(pending.photo);
    preview.src = pending.previewUrl;
    item.append(preview);
  }
  const text = document.createElement('span');
  text.className = 'text';
  text.textContent = message ? message.text : pending.text;
  if (message?.erased) {
    item.classList.add('erased');
    text.textContent = 'This message was erased';
  } else if (message?.deleted) {
    item.classList.add('erased');
    text.textContent = message.deletedBy === state.me.id ? 'You deleted this message' : 'This message was deleted';
  }
  item.append(text);
  if (message && !message.deleted && !message.erased) {
    item.append(reactionsOf(conversation, message), actionsOf(conversation, message, mine));
  }
  const meta = document.createElement('span');
  meta.className = 'meta';
  if (pending) {
    if (pending.failed) {
      item.classList.add('failed');
      meta.textContent = `not sent: ${pending.failed}`;
    } else {
      meta.textContent = 'sending…';
    }
  } else {
    meta.append(timeOf(message.sentAt));
    if (message.editedAt && !message.deleted) meta.append(' · edited');
    if (mine) {
      const tick = document.createElement('span');
      showTick(tick, conversation, message.seq);
      meta.append(tick);
    }
  }
  item.append(meta);
  return item;
}

// What a reply shows of the message it answers, kept as it is now (the server's `quote`).
function quoteOf(message) {
  if (!message) return null;
  const deleted = Boolean(message.deleted || message.erased);
  return { seq: message.seq, senderId: message.senderId, text: deleted ? '' : [...message.text].slice(0, 100).join(''),
    attachments: !deleted && Boolean(message.attachments?.length), ...(deleted ? { deleted: true } : {}) };
}

function quoteBlock(quote) {
  const block = document.createElement('span');
  block.className = 'quote';
  block.classList.toggle('deleted', Boolean(quote.deleted));
  block.textContent = quote.deleted ? 'Deleted message' : `${nameOf(quote.senderId)}: ${quote.text || (quote.attachments ? 'Photo' : '')}`;
  block.setAttribute('aria-label', `Reply to message ${quote.seq}`);
  block.addEventListener('click', () => $('messages').querySelector(`li[data-seq="${quote.seq}"]`)?.scrollIntoView({ block: 'center' }));
  return block;
}

// The conversation's pinned messages, the most recently pinned first, above its messages.
function renderPinned(conversation) {
  const pinned = conversation.pinned ?? [];
  $('pinned').hidden = pinned.length === 0;
  $('pinned').replaceChildren(...pinned.map((seq) => {
    const item = document.createElement('li');
    const message = conversation.messages.get(seq);
    item.textContent = `📌 ${message ? `${nameOf(message.senderId)}: ${message.text || 'Photo'}` : `message ${seq}`}`;
    item.addEventListener('click', () => $('messages').querySelector(`li[data-seq="${seq}"]`)?.scrollIntoView({ block: 'center' }));
    return item;
  }));
}

// What reacting to a message offers; any emoji can be added from another client.
const quickReactions = ['👍', '❤️', '😂'];

// Each emoji a message holds, with how many hold it: pressed where the reader is one of them,
// and a press takes the reader's back or adds it.
function reactionsOf(conversation, message) {
  const row = document.createElement('span');
  row.className = 'reactions';
  for (const reaction of message.reactions ?? []) {
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'reaction';
    button.textContent = `${reaction.emoji} ${reaction.count}`;
    button.setAttribute('aria-pressed', String(reaction.me));
    button.setAttribute('aria-label', `${reaction.emoji} ${reaction.count}${reaction.me ? ', yours' : ''}`);
    button.addEventListener('click', () => react(conversation, message, reaction.emoji, !reaction.me));
    row.append(button);
  }
  return row;
}

function actionsOf(conversation, message, mine) {
  const row = document.createElement('span');
  row.className = 'actions';
  for (const emoji of quickReactions) {
    if (message.reactions?.some((r) => r.emoji === emoji && r.me)) continue;
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = emoji;
    button.setAttribute('aria-label', `React ${emoji}`);
    button.addEventListener('click', () => react(conversation, message, emoji, true));
    row.append(button);
  }
  const reply = document.createElement('button');
  reply.type = 'button';
  reply.textContent = 'Reply';
  reply.addEventListener('click', () => startReplying(conversation, message));
  row.append(reply);
  if (conversation.kind === 'direct' || conversation.members.find((member) => member.userId === state.me.id)?.role === 'owner') {
    const pinned = (conversation.pinned ?? []).includes(message.seq);
    const pin = document.createElement('button');
    pin.type = 'button';
    pin.textContent = pinned ? 'Unpin' : 'Pin';
    pin.addEventListener('click', () => act(async () => {
      const path = `/v1/conversations/${conversation.id}/messages/${message.seq}/pin`;
      const answer = pinned ? await api.delete(path) : await api.put(path);
      conversation.pinned = answer.pinned;
      if (state.current === conversation.id) renderConversation();
    }));
    row.append(pin);
  }
  if (mine) {
    const edit = document.createElement('button');
    edit.type = 'button';
    edit.textContent = 'Edit';
    edit.addEventListener('click', () => startEditing(conversation, message));
    row.append(edit);
  }
  const owner = conversation.members.find((member) => member.userId === state.me.id)?.role === 'owner';
  if (mine || (conversation.kind === 'group' && owner)) {
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.textContent = 'Delete';
    remove.addEventListener('click', () => {
      if (!confirm('Delete this message for everyone?')) return;
      act(async () => {
        const { message: tombstone } = await api.delete(`/v1/conversations/${conversation.id}/messages/${message.seq}`);
        replaceMessage(conversation, tombstone);
      });
    });
    row.append(remove);
  }
  return row;
}

function react(conversation, message, emoji, adding) {
  act(async () => {
    const path = `/v1/conversations/${conversation.id}/messages/${message.seq}/reactions/${encodeURIComponent(emoji)}`;
    const { reactions } = adding ? await api.put(path) : await api.delete(path);
    const current = conversation.messages.get(message.seq);
    if (current) replaceMessage(conversation, { ...current, reactions: reactions.length ? reactions : undefined });
  });
}

// Editing: the composer holds the message's text until it is saved (Enter) or Cancel is pressed.
function startEditing(conversation, message) {
  state.editing = { conversationId: conversation.id, seq: message.seq };
  $('text').value = message.text;
  $('editing').hidden = false;
  $('editing-what').textContent = `Editing message ${message.seq}`;
  $('text').focus();
}

function stopEditing() {
  state.editing = null;
  $('editing').hidden = true;
  $('text').value = '';
}
$('cancel-edit').addEventListener('click', stopEditing);

// Replying: the next message sent from this conversation answers `seq`.
function startReplying(conversation, message) {
  stopEditing();
  state.replying = { conversationId: conversation.id, seq: message.seq };
  $('replying').hidden = false;
  $('replying-what').textContent = `Replying to ${nameOf(message.senderId)}: ${[...message.text].slice(0, 60).join('') || 'Photo'}`;
  $('text').focus();
}

function stopReplying() {
  state.replying = null;
  $('replying').hidden = true;
}
$('cancel-reply').addEventListener('click', stopReplying);

// The members a text mentions: `@handle` of each other member it names.
function mentionsIn(conversation, text) {
  return others(conversation).map((member) => member.userId).filter((id) => {
    const handle = user(id)?.handle;
    // A handle is a-z, 0-9 and `_ . -`: only its dots mean something in a pattern.
    return handle && new RegExp(`(^|\\s)@${handle.replaceAll('.', '\\.')}(?![a-z0-9_.-])`).test(text);
  });
}

// A message as it is now (a change applied, an edit or deletion answered), drawn where it is.
function replaceMessage(conversation, message) {
  if (!conversation.messages.has(message.seq)) return;
  conversation.messages.set(message.seq, message);
  if (conversation.lastMessage?.seq === message.seq) conversation.lastMessage = message;
  if (state.current === conversation.id) {
    const drawn = $('messages').querySelector(`li[data-seq="${message.seq}"]`);
    // A reader at the bottom stays there, however the bubble's height changed.
    const stick = atBottom();
    if (drawn) drawn.replaceWith(bubble(conversation, message));
    if (stick) $('messages').scrollTop = $('messages').scrollHeight;
  }
  renderList();
}

// A change to a message, from the event stream: applied once, in the conversation's order of
// changes (a resume may bring one again).
function applyChange(change) {
  const conversation = state.conversations.get(change.conversationId);
  if (!conversation) return;
  conversation.appliedChanges ??= new Set();
  if (conversation.appliedChanges.has(change.changeSeq)) return;
  conversation.appliedChanges.add(change.changeSeq);
  // Pins, and the quotes of the replies to the message changed.
  if (['pinned', 'unpinned', 'deleted'].includes(change.kind)) {
    const pinned = (conversation.pinned ?? []).filter((seq) => seq !== change.seq);
    conversation.pinned = change.kind === 'pinned' ? (conversation.pinned?.includes(change.seq) ? conversation.pinned : [change.seq, ...pinned]) : pinned;
    // The bar, and (for a pin) each message's Pin or Unpin.
    if (state.current === conversation.id) {
      if (change.kind === 'deleted') renderPinned(conversation); else renderConversation();
    }
  }
  for (const reply of conversation.messages.values()) {
    if (reply.replyTo?.seq !== change.seq || reply.replyTo.deleted) continue;
    if (change.kind === 'edited') replaceMessage(conversation, { ...reply, replyTo: { ...reply.replyTo, text: [...change.text].slice(0, 100).join('') } });
    if (change.kind === 'deleted') replaceMessage(conversation, { ...reply, replyTo: { ...reply.replyTo, text: '', attachments: false, deleted: true } });
  }
  const message = conversation.messages.get(change.seq);
  if (!message || message.deleted || message.erased || change.kind === 'pinned' || change.kind === 'unpinned') return;
  let next = { ...message };
  if (change.kind === 'edited') {
    next.text = change.text;
    next.editedAt = change.at;
  } else if (change.kind === 'deleted') {
    next = { id: message.id, conversationId: message.conversationId, seq: message.seq, senderId: message.senderId,
      clientMessageId: message.clientMessageId, sentAt: message.sentAt, text: '', deleted: true, deletedBy: change.userId };
  } else {
    const reactions = (message.reactions ?? []).filter((r) => r.emoji !== change.emoji);
    const before = message.reactions?.find((r) => r.emoji === change.emoji);
    const me = change.userId === state.me.id ? change.kind === 'reaction_added' : before?.me ?? false;
    if (change.count > 0) reactions.push({ emoji: change.emoji, count: change.count, me });
    reactions.sort((a, b) => b.count - a.count || (a.emoji < b.emoji ? -1 : 1));
    next.reactions = reactions.length ? reactions : undefined;
  }
  replaceMessage(conversation, next);
}

function showTick(tick, conversation, seq) {
  const [mark, what] = tickOf(conversation, seq);
  tick.className = `tick ${what}`;
  tick.textContent = ` ${mark}`;
  tick.title = what;
  tick.setAttribute('aria-label', what);
}

// A receipt changes ticks only: each drawn one is updated where it is.
function renderTicks(conversation) {
  for (const item of $('messages').querySelectorAll('li[data-seq]')) {
    const tick = item.querySelector('.tick');
    if (tick) showTick(tick, conversation, Number(item.dataset.seq));
  }
}

// The newest message is added to the list drawn (in place of its bubble while it was being
// sent) rather than the list drawn again; anything else draws it again.
function renderAdded(conversation, message) {
  const list = $('messages');
  const drawn = list.querySelectorAll('li[data-seq]');
  const last = drawn.length ? Number(drawn[drawn.length - 1].dataset.seq) : 0;
  if (message.seq <= last) return renderConversation();
  const stick = atBottom();
  for (const item of list.querySelectorAll('li[data-pending]')) {
    if (item.dataset.pending === message.clientMessageId) item.remove();
  }
  list.insertBefore(bubble(conversation, message), list.querySelector('li[data-pending]'));
  if (stick) list.scrollTop = list.scrollHeight;
}

// Photos need the token, which an <img src> cannot send: each is fetched and shown from a blob.
const thumbnails = new Map();
function thumbnail(mediaId, size) {
  const key = `${mediaId}.${size}`;
  if (!thumbnails.has(key)) {
    thumbnails.set(key, api.request('GET', `/v1/media/${mediaId}/thumbnail?size=${size}`, undefined, { raw: true })
      .then((response) => response.blob()).then((blob) => URL.createObjectURL(blob))
      .catch(() => { thumbnails.delete(key); return null; }));
  }
  return thumbnails.get(key);
}

function image(mediaId, label) {
  const img = document.createElement('img');
  img.alt = label;
  img.tabIndex = 0;
  thumbnail(mediaId, 320).then((url) => { if (url) img.src = url; });
  // A photo that loads at the bottom of the list keeps the list at its bottom.
  img.addEventListener('load', () => {
    const list = $('messages');
    if (list.scrollHeight - list.scrollTop - list.clientHeight <= img.height + 40) list.scrollTop = list.scrollHeight;
  });
  const view = async () => {
    const response = await api.request('GET', `/v1/media/${mediaId}`, undefined, { raw: true }).catch(() => null);
    if (!response) return;
    const shown = $('viewer-image');
    if (shown.src.startsWith('blob:')) URL.revokeObjectURL(shown.src);
    shown.src = URL.createObjectURL(await response.blob());
    $('viewer-image').alt = label;
    $('viewer').showModal();
  };
  img.addEventListener('click', view);
  img.addEventListener('keydown', (event) => { if (event.key === 'Enter') view(); });
  return img;
}

// ---- search ----

// The snippet's text with its highlights (ranges in Unicode code points) as <mark>s.
function markedSnippet(snippet) {
  const points = [...snippet.text];
  const holder = document.createElement('span');
  let at = 0;
  for (const [start, end] of snippet.highlights) {
    if (start < at || end > points.length) continue;
    holder.append(points.slice(at, start).join(''));
    const mark = document.createElement('mark');
    mark.textContent = points.slice(start, end).join('');
    holder.append(mark);
    at = end;
  }
  holder.append(points.slice(at).join(''));
  return holder;
}

async function search(q, cursor) {
  const reply = await api.get(`/v1/search?q=${encodeURIComponent(q)}&limit=20${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
  const list = $('search-results');
  if (!cursor) list.replaceChildren();
  for (const { message, snippet } of reply.results) {
    const item = document.createElement('li');
    item.tabIndex = 0;
    item.dataset.conversation = message.conversationId;
    item.dataset.seq = String(message.seq);
    const where = document.createElement('span');
    where.className = 'where';
    const conversation = state.conversations.get(message.conversationId);
    where.textContent = `${conversation ? titleOf(conversation) : 'A conversation'} · ${nameOf(message.senderId)}`;
    item.append(where, markedSnippet(snippet));
    const open = () => { if (state.conversations.has(message.conversationId)) openConversation(message.conversationId); };
    item.addEventListener('click', open);
    item.addEventListener('keydown', (event) => { if (event.key === 'Enter') open(); });
    list.append(item);
  }
  const count = list.children.length;
  $('search-status').textContent = count === 0 ? 'Nothing found.' : `${count} found${reply.next ? ', more below' : ''}.`;
  if (reply.next) {
    const more = document.createElement('li');
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = 'More';
    button.addEventListener('click', () => { more.remove(); search(q, reply.next).catch(showSearchError); });
    more.append(button);
    list.append(more);
  }
}

const showSearchError = (error) => { $('search-status').textContent = error.message; };

$('search').addEventListener('submit', (event) => {
  event.preventDefault();
  $('search-panel').hidden = false;
  $('search-status').textContent = 'Searching…';
  search($('search-q').value).catch(showSearchError);
});
$('search-close').addEventListener('click', () => {
  $('search-panel').hidden = true;
  $('search-q').value = '';
});

// ---- blocking, from a direct conversation ----

async function loadBlocks() {
  const { blocks } = await api.get('/v1/users/me/blocks');
  state.blocked = new Set(blocks.map((block) => block.userId));
}

$('block').addEventListener('click', () => act(async () => {
  const conversation = state.conversations.get(state.current);
  const other = others(conversation)[0]?.userId;
  if (!other) return null;
  if (state.blocked.has(other)) {
    await api.delete(`/v1/users/me/blocks/${encodeURIComponent(other)}`);
    state.blocked.delete(other);
  } else {
    await api.put(`/v1/users/me/blocks/${encodeURIComponent(other)}`);
    state.blocked.add(other);
  }
  return null;
}));

// ---- reporting a member to the operator ----

let reporting = null; // {userId, conversationId}

function openReport(userId, conversationId) {
  reporting = { userId, conversationId };
  $('report-whom').textContent = nameOf(userId);
  $('report-note').value = '';
  $('report-error').textContent = '';
  $('report-dialog').showModal();
}

$('report').addEventListener('click', () => {
  const conversation = state.conversations.get(state.current);
  const other = others(conversation)[0]?.userId;
  if (other) openReport(other, conversation.id);
});
$('report-cancel').addEventListener('click', () => $('report-dialog').close());
$('report-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  try {
    const note = $('report-note').value.trim();
    await api.post('/v1/reports', { ...reporting, reason: $('report-reason').value, ...(note ? { note } : {}) });
    $('report-dialog').close();
    $('conversation-error').textContent = '';
    $('conversation-status').textContent = 'Reported. Thank you.';
  } catch (error) {
    $('report-error').textContent = error.message;
  }
});

// ---- group members ----

$('info').addEventListener('click', () => {
  const panel = $('group-panel');
  panel.hidden = !panel.hidden;
  $('info').setAttribute('aria-expanded', String(!panel.hidden));
});

function renderMembers(conversation) {
  if (conversation.kind !== 'group') return;
  const owner = conversation.members.some((m) => m.userId === state.me.id && m.role === 'owner');
  $('group-photo-row').hidden = !owner;
  $('group-photo-remove').hidden = !conversation.photo;
  if (document.activeElement !== $('rename-name')) $('rename-name').value = conversation.name ?? '';
  $('members').replaceChildren(...conversation.members.map((member) => {
    const item = document.createElement('li');
    const known = user(member.userId);
    item.append(avatar(known?.avatar, known?.avatarURL, nameOf(member.userId)), ` ${nameOf(member.userId)}${member.role === 'owner' ? ' (owner)' : ''} `);
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.textContent = member.userId === state.me.id ? 'Leave' : 'Remove';
    remove.setAttribute('aria-label', `${remove.textContent} ${nameOf(member.userId)}`);
    remove.addEventListener('click', () => act(() => api.delete(`/v1/conversations/${conversation.id}/members/${member.userId}`)));
    item.append(remove);
    if (member.userId !== state.me.id) {
      const report = document.createElement('button');
      report.type = 'button';
      report.textContent = 'Report';
      report.setAttribute('aria-label', `Report ${nameOf(member.userId)}`);
      report.addEventListener('click', () => openReport(member.userId, conversation.id));
      item.append(report);
    }
    return item;
  }));
}

async function act(body) {
  $('conversation-error').textContent = '';
  try {
    const reply = await body();
    if (reply?.conversation) remember(reply.conversation);
    else if (reply?.id && reply?.members) remember(reply);
    renderConversation();
    renderList();
  } catch (error) {
    $('conversation-error').textContent = error.message;
  }
}

$('rename').addEventListener('submit', (event) => {
  event.preventDefault();
  act(() => api.patch(`/v1/conversations/${state.current}`, { name: $('rename-name').value }));
});

$('add-member').addEventListener('submit', (event) => {
  event.preventDefault();
  act(async () => {
    const found = await findUser($('add-member-handle').value.trim());
    $('add-member-handle').value = '';
    return api.post(`/v1/conversations/${state.current}/members`, { userIds: [found.id] });
  });
});

// ---- sending, through the outbox ----

let typingSent = 0, typingStop = null;
$('text').addEventListener('input', () => {
  const conversation = state.current;
  if (!conversation) return;
  if (Date.now() - typingSent > 3000) {
    typingSent = Date.now();
    api.command('typing', conversation, { typing: true }).catch(() => {});
  }
  clearTimeout(typingStop);
  typingStop = setTimeout(() => stopTyping(conversation), 4000);
});

function stopTyping(conversation) {
  clearTimeout(typingStop);
  if (typingSent === 0) return;
  typingSent = 0;
  api.command('typing', conversation, { typing: false }).catch(() => {});
}

$('text').addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey) {
    event.preventDefault();
    $('composer').requestSubmit();
  }
});

$('composer').addEventListener('submit', async (event) => {
  event.preventDefault();
  const conversation = state.conversations.get(state.current);
  const text = $('text').value;
  if (state.editing && conversation?.id === state.editing.conversationId) {
    const { seq } = state.editing;
    const body = { clientChangeId: crypto.randomUUID(), text };
    stopEditing();
    act(async () => {
      const { message } = await api.patch(`/v1/conversations/${conversation.id}/messages/${seq}`, body);
      replaceMessage(conversation, { ...message, reactions: conversation.messages.get(seq)?.reactions });
    });
    return;
  }
  const photo = $('photo').files[0] ?? null;
  if (!conversation || (text.trim() === '' && !photo)) return;
  $('text').value = '';
  $('photo').value = '';
  stopTyping(conversation.id);
  const replyTo = state.replying?.conversationId === conversation.id ? state.replying.seq : null;
  stopReplying();
  const mentions = mentionsIn(conversation, text);
  const entry = await state.outbox.add({
    clientMessageId: crypto.randomUUID(), conversationId: conversation.id, text, photo,
    ...(replyTo ? { replyTo } : {}), ...(mentions.length ? { mentions } : {}) });
  conversation.pending.push(entry);
  renderConversation({ toBottom: true });
  flush();
});

// Sends what waits, in order; stops at the first that cannot go yet (offline, the server busy)
// and tries again later, so that nothing overtakes it. One the server refuses is shown as not sent.
let flushing = false, flushAgain = false, retry = null;
async function flush() {
  if (flushing) { flushAgain = true; return; }
  flushing = true;
  try {
    do {
      flushAgain = false;
      for (const entry of await state.outbox.all()) {
        try {
          if (entry.photo && !entry.mediaId) {
            const { media } = await api.request('POST', '/v1/media', entry.photo);
            entry.mediaId = media.id;
            await state.outbox.update(entry);
          }
          const body = { clientMessageId: entry.clientMessageId, text: entry.text };
          if (entry.mediaId) body.attachments = [{ mediaId: entry.mediaId }];
          if (entry.replyTo) body.replyTo = entry.replyTo;
          if (entry.mentions) body.mentions = entry.mentions;
          const { message } = await api.command('message', entry.conversationId, body);
          await state.outbox.remove(entry.clientMessageId);
          settle(entry, message);
        } catch (error) {
          if (!(error instanceof ApiError) || error.retryable) {
            clearTimeout(retry);
            retry = setTimeout(flush, 2000);
            return;
          }
          await state.outbox.remove(entry.clientMessageId);
          const conversation = state.conversations.get(entry.conversationId);
          const shown = conversation?.pending.find((p) => p.clientMessageId === entry.clientMessageId);
          if (shown) shown.failed = error.message;
          if (state.current === entry.conversationId) renderConversation();
        }
      }
    } while (flushAgain);
  } finally {
    flushing = false;
  }
}
window.addEventListener('online', flush);

function settle(entry, message) {
  const conversation = state.conversations.get(entry.conversationId);
  if (!conversation) return;
  conversation.pending = conversation.pending.filter((p) => p.clientMessageId !== entry.clientMessageId);
  if (entry.previewUrl) URL.revokeObjectURL(entry.previewUrl);
  addMessage(conversation, message);
}

function addMessage(conversation, message) {
  if (conversation.messages.has(message.seq)) return false;
  conversation.messages.set(message.seq, message);
  conversation.pending = conversation.pending.filter((p) => p.clientMessageId !== message.clientMessageId);
  if (message.seq > conversation.lastSeq) {
    conversation.lastSeq = message.seq;
    conversation.lastMessage = message;
  }
  const mine = conversation.members.find((member) => member.userId === state.me.id);
  if (message.senderId === state.me.id) {
    if (mine) mine.readSeq = mine.deliveredSeq = Math.max(mine.readSeq, message.seq);
  } else if (mine && message.seq > mine.readSeq) {
    conversation.unreadCount = conversation.lastSeq - mine.readSeq;
  }
  if (state.current === conversation.id) {
    renderAdded(conversation, message);
    markRead();
  }
  renderList();
  return true;
}

// ---- the event stream ----

function onState(status) {
  const text = { connecting: 'connecting…', reconnecting: 'reconnecting…', offline: 'offline', live: '', unauthorized: 'signed out' }[status];
  $('connection').textContent = text ?? '';
  if (status === 'live') { flush(); if (state.wasLive) refreshUsers(); state.wasLive = true; }
  if (status === 'unauthorized') {
    localStorage.removeItem('parley.token');
    location.reload();
  }
}

async function conversationFor(id) {
  let conversation = state.conversations.get(id);
  if (!conversation) conversation = remember(await api.get(`/v1/conversations/${id}`));
  return conversation;
}

async function onEvent({ type, data }) {
  switch (type) {
    case 'message': {
      const message = data.message;
      const conversation = await conversationFor(message.conversationId).catch(() => null);
      if (!conversation) return;
      if (addMessage(conversation, message) && message.senderId !== state.me.id) delivered(conversation.id, message.seq);
      break;
    }
    case 'message_erased': {
      // The tombstone replaces the message, wherever it is drawn.
      const tombstone = data.message;
      const conversation = state.conversations.get(tombstone.conversationId);
      if (!conversation) return;
      if (conversation.messages.has(tombstone.seq)) conversation.messages.set(tombstone.seq, tombstone);
      if (conversation.lastMessage?.seq === tombstone.seq) conversation.lastMessage = tombstone;
      // Replies quote it as erased, and it is no longer pinned.
      for (const [seq, reply] of conversation.messages) {
        if (reply.replyTo?.seq === tombstone.seq) conversation.messages.set(seq, { ...reply, replyTo: quoteOf(tombstone) });
      }
      conversation.pinned = (conversation.pinned ?? []).filter((seq) => seq !== tombstone.seq);
      if (state.current === conversation.id) renderConversation();
      renderList();
      break;
    }
    case 'message_edited':
    case 'message_deleted':
    case 'reaction_added':
    case 'reaction_removed':
    case 'message_pinned':
    case 'message_unpinned':
      applyChange(data.change);
      break;
    case 'receipt': {
      const conversation = state.conversations.get(data.conversationId);
      const member = conversation?.members.find((m) => m.userId === data.userId);
      if (!member) return;
      member.deliveredSeq = Math.max(member.deliveredSeq, data.deliveredSeq);
      member.readSeq = Math.max(member.readSeq, data.readSeq);
      if (data.userId === state.me.id) conversation.unreadCount = Math.max(0, conversation.lastSeq - member.readSeq);
      if (state.current === conversation.id) renderTicks(conversation);
      renderList();
      break;
    }
    case 'conversation': {
      const { conversation, change } = data;
      if (change === 'member_removed' && !conversation.members.some((m) => m.userId === state.me.id)) {
        state.conversations.delete(conversation.id);
        if (state.current === conversation.id) $('back').click();
      } else {
        remember(conversation);
        if (conversation.kind === 'direct') await refreshPresence();
        if (state.current === conversation.id) renderConversation();
      }
      renderList();
      break;
    }
    case 'typing': {
      if (data.userId === state.me.id) return;
      const typing = state.typing.get(data.conversationId) ?? new Map();
      state.typing.set(data.conversationId, typing);
      clearTimeout(typing.get(data.userId));
      if (data.typing) typing.set(data.userId, setTimeout(() => { typing.delete(data.userId); renderStatus(); }, 6000));
      else typing.delete(data.userId);
      renderStatus();
      break;
    }
    case 'user':
      // Someone's name or photo changed: live only, so a reconnect reads the users again.
      state.users.set(data.user.id, data.user);
      if (data.user.id === state.me.id) { state.me = data.user; renderMe(); }
      renderList();
      if (state.current) renderConversation();
      break;
    case 'presence':
      state.presence.set(data.presence.userId, data.presence);
      renderStatus();
      renderList();
      break;
    case 'cursor_expired':
      // What happened while away is too much to replay: reload the list, and page each open
      // conversation's messages after the last one held.
      await loadConversations().catch(() => {});
  await loadBlocks().catch(() => {});
      for (const conversation of state.conversations.values()) {
        if (!conversation.historyLoaded) continue;
        const last = Math.max(0, ...conversation.messages.keys());
        const reply = await api.get(`/v1/conversations/${conversation.id}/messages?after=${last}&limit=100`).catch(() => null);
        for (const message of reply?.messages ?? []) addMessage(conversation, message);
      }
      break;
    default:
      break;
  }
}

function renderStatus() {
  const conversation = state.conversations.get(state.current);
  if (conversation) $('conversation-status').textContent = statusText(conversation);
}

boot();
