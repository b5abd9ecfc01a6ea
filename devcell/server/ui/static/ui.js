// DevCell's dashboard: the live parts of its pages. Each element with data-watch listens to
// that URL (the API's watch as server-sent events, through /ui/watch/) and shows what arrives.
// Everything from the server is put in the page as text (textContent), never as HTML.
'use strict';

(function () {
  const MAX_ROWS = 500;

  function cell(text) {
    const td = document.createElement('td');
    td.textContent = text === null || text === undefined || text === '' ? '-' : String(text);
    return td;
  }

  function status(el, text) {
    const shown = el.querySelector('.live-state') || document.querySelector('.live');
    if (shown) {
      shown.textContent = text;
      shown.dataset.state = text;
    }
  }

  function addEvent(el, ev) {
    const body = el.querySelector('table tbody');
    if (!body) return;
    const tr = document.createElement('tr');
    tr.className = 'arrived';
    tr.dataset.id = String(ev.id);
    const kind = String(ev.object_kind || '').toLowerCase();
    [ev.created_at, ev.type, ev.reason, kind + '/' + ev.object_name, ev.message, ev.actor]
      .forEach(function (v) { tr.appendChild(cell(v)); });
    body.appendChild(tr);
    while (body.rows.length > MAX_ROWS) body.deleteRow(0);
  }

  function phaseOf(doc) {
    if (doc.metadata && doc.metadata.deletionTimestamp) return 'Deleting';
    return (doc.status && doc.status.phase) || 'Pending';
  }

  function changeCell(el, type, doc) {
    const meta = doc.metadata || {};
    const body = el.querySelector('table tbody');
    if (!body || !meta.id) return;
    let tr = body.querySelector('tr[data-id="' + CSS.escape(meta.id) + '"]');
    if (type === 'DELETED') {
      if (tr) tr.classList.add('gone');
      return;
    }
    if (!tr) {
      tr = document.createElement('tr');
      tr.dataset.id = meta.id;
      tr.className = 'arrived';
      const name = document.createElement('td');
      const a = document.createElement('a');
      a.href = '/ui/cells/' + encodeURIComponent(meta.name);
      a.textContent = meta.name;
      name.appendChild(a);
      tr.appendChild(name);
      const phase = document.createElement('td');
      phase.appendChild(document.createElement('span'));
      tr.appendChild(phase);
      const spec = doc.spec || {};
      [spec.backend, (doc.status || {}).node || 'local', meta.owner, null, null, null, '0s']
        .forEach(function (v) { tr.appendChild(cell(v)); });
      body.appendChild(tr);
    }
    const span = tr.cells[1].querySelector('span') || tr.cells[1];
    const phase = phaseOf(doc);
    span.textContent = phase;
    span.className = 'phase phase-' + phase.toLowerCase();
  }

  function listen(el) {
    const kind = el.dataset.kind;
    const source = new EventSource(el.dataset.watch);
    source.addEventListener('open', function () { status(el, 'live'); });
    source.addEventListener('error', function () {
      status(el, source.readyState === EventSource.CLOSED
        ? 'disconnected (reload the page)' : 'reconnecting');
    });
    ['ADDED', 'MODIFIED', 'DELETED'].forEach(function (type) {
      source.addEventListener(type, function (message) {
        let change;
        try { change = JSON.parse(message.data); } catch (e) { return; }
        if (kind === 'events') addEvent(el, change.object || {});
        else if (kind === 'cells') changeCell(el, type, change.object || {});
      });
    });
  }

  document.querySelectorAll('[data-watch]').forEach(listen);
})();
