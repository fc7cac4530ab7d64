// Conveyor console: live fragments over server-sent events, a pause-live toggle, and
// forms posted in the background so the page stays put. No framework, no build step.
(function () {
  "use strict";
  var body = document.body;
  var csrfMeta = document.querySelector('meta[name="csrf-token"]');
  var csrf = csrfMeta ? csrfMeta.content : "";
  var streamUrl = body.dataset.stream || "";
  var toggle = document.getElementById("live-toggle");
  var source = null;
  var retry = null;
  // A refused stream (503: the console's max_streams reached) is not retried by the
  // browser: ask again after the Retry-After the console sends.
  var RETRY_MS = 15000;
  var paused = window.localStorage.getItem("conveyor-live") === "paused";

  function setLive(text, state) {
    if (!toggle) return;
    toggle.textContent = text;
    toggle.dataset.state = state;
    toggle.setAttribute("aria-pressed", state === "paused" ? "false" : "true");
  }

  function applyFragments(event) {
    var fragments = JSON.parse(event.data);
    Object.keys(fragments).forEach(function (id) {
      var element = document.getElementById(id);
      if (element) element.innerHTML = fragments[id];
    });
    body.dataset.updated = String(Date.now());
  }

  function applyLog(event) {
    var data = JSON.parse(event.data);
    var log = document.getElementById("log");
    if (!log) return;
    var atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 8;
    if (data.reset) log.innerHTML = data.html;
    else log.insertAdjacentHTML("beforeend", data.html);
    if (atEnd) log.scrollTop = log.scrollHeight;
  }

  function start() {
    if (!streamUrl || source) return;
    var opened = source = new EventSource(streamUrl);
    source.addEventListener("fragments", applyFragments);
    source.addEventListener("log", applyLog);
    source.addEventListener("problem", function (event) {
      flash(false, JSON.parse(event.data).message);
    });
    source.onopen = function () { setLive("● live", "live"); };
    source.onerror = function () {
      if (source === opened && opened.readyState === EventSource.CLOSED) {
        source = null;
        retry = window.setTimeout(function () { retry = null; if (!paused) start(); }, RETRY_MS);
      }
      setLive("○ reconnecting", "error");
    };
  }

  function stop() {
    if (retry) { window.clearTimeout(retry); retry = null; }
    if (source) { source.close(); source = null; }
    setLive("❚❚ paused", "paused");
  }

  if (toggle) {
    toggle.addEventListener("click", function () {
      paused = !paused;
      window.localStorage.setItem("conveyor-live", paused ? "paused" : "live");
      if (paused) stop(); else start();
    });
  }

  function flash(ok, text, url) {
    var box = document.getElementById("flash");
    if (!box) return;
    box.className = ok ? "ok" : "error";
    box.textContent = text || (ok ? "done" : "failed");
    if (url) {
      var link = document.createElement("a");
      link.href = url;
      link.textContent = " open";
      box.appendChild(link);
    }
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.matches || !form.matches("form[data-async]")) return;
    event.preventDefault();
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
    var buttons = form.querySelectorAll("button");
    buttons.forEach(function (b) { b.disabled = true; });
    // getAttribute: a field named "action" would shadow the form's action property.
    fetch(form.getAttribute("action"), {
      method: "POST",
      body: new FormData(form),
      credentials: "same-origin",
      headers: { "X-CSRF-Token": csrf, "Accept": "application/json" }
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (doc) {
        var text = doc.message || (doc.error && doc.error.message) || response.statusText;
        flash(response.ok, text, doc.url);
        if (response.ok && form.dataset.reset !== undefined) form.reset();
        if (response.ok && doc.redirect) window.location.href = doc.redirect;
      });
    }).catch(function (error) {
      flash(false, String(error));
    }).finally(function () {
      buttons.forEach(function (b) { b.disabled = false; });
    });
  });

  if (paused) stop(); else start();
})();
