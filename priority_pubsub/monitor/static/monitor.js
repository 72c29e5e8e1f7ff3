// The monitor page's live updates and actions (vanilla JS, no build step).
// Every refresh swaps in the #live fragment the server rendered (and escaped); actions POST
// to /api/v1/ with the admin token from this tab's session storage (never a cookie).
(function () {
  "use strict";
  var body = document.body;
  var refreshMs = parseInt(body.getAttribute("data-refresh-ms"), 10) || 2000;
  var TOKEN_KEY = "priority-pubsub-admin-token";
  var live = document.getElementById("live");
  var message = document.getElementById("message");
  var busy = false;
  var shown = null;

  function say(text) { message.textContent = text || ""; }

  function refresh() {
    if (busy || document.hidden) { return; }
    busy = true;
    fetch("/monitor/live" + location.search, {cache: "no-store"})
      .then(function (r) {
        if (!r.ok) { throw new Error("refresh: HTTP " + r.status); }
        return r.text();
      })
      .then(function (html) {
        if (html !== shown) { live.innerHTML = html; shown = html; }  // no work when unchanged
      })
      .catch(function (e) { say(String(e.message || e)); })
      .finally(function () { busy = false; });
  }

  function filterNow() {
    var query = new URLSearchParams(location.search);
    return {reason: query.get("reason") || "", queue: query.get("queue") || "",
            id: query.get("id") || ""};
  }

  var routes = {
    "pause": function (b) { return ["/api/v1/queues/" + encodeURIComponent(b.dataset.queue) + "/pause", null]; },
    "resume": function (b) { return ["/api/v1/queues/" + encodeURIComponent(b.dataset.queue) + "/resume", null]; },
    "drain": function () { return ["/api/v1/drain", null]; },
    "drain-end": function () { return ["/api/v1/drain/end", null]; },
    "requeue": function (b) { return ["/api/v1/dead-letters/requeue", {ids: [b.dataset.id]}]; },
    "delete": function (b) { return ["/api/v1/dead-letters/delete", {ids: [b.dataset.id]}]; },
    "requeue-filtered": function () { return ["/api/v1/dead-letters/requeue", {filter: filterNow()}]; },
    "delete-filtered": function () { return ["/api/v1/dead-letters/delete", {filter: filterNow()}]; },
    "promote": function (b) {
      return ["/api/v1/waiting/" + encodeURIComponent(b.dataset.id) + "/promote",
              {queue: b.dataset.queue, to: b.dataset.to}];
    },
    "cancel": function (b) {
      return ["/api/v1/in-flight/" + encodeURIComponent(b.dataset.id) + "/cancel",
              {queue: b.dataset.queue, settle: b.dataset.settle}];
    }
  };
  var confirmFirst = {"delete": true, "delete-filtered": true, "requeue-filtered": true, "drain": true,
                      "cancel": true};

  function act(button) {
    var action = button.dataset.action;
    var token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) { say("enter the admin token first"); return; }
    var asked = action === "cancel" ? "cancel " + button.dataset.id + " and " + button.textContent
                                    : button.textContent;
    if (confirmFirst[action] && !window.confirm(asked + "?")) { return; }
    var route = routes[action](button);
    button.disabled = true;
    fetch(route[0], {
      method: "POST",
      headers: {"Authorization": "Bearer " + token, "Content-Type": "application/json"},
      body: route[1] === null ? "{}" : JSON.stringify(route[1])
    }).then(function (r) {
      return r.json().then(function (answer) {
        if (r.status === 401) { sessionStorage.removeItem(TOKEN_KEY); }
        say(r.ok ? "" : action + ": " + (answer.error || ("HTTP " + r.status)));
      });
    }).catch(function (e) { say(String(e)); })
      .finally(function () { button.disabled = false; refresh(); });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button.act");
    if (button) { event.preventDefault(); act(button); }
  });

  var tokenForm = document.getElementById("token-form");
  if (tokenForm) {
    var state = document.getElementById("token-state");
    var showState = function () {
      state.textContent = sessionStorage.getItem(TOKEN_KEY) ? " token set for this tab" : "";
    };
    tokenForm.addEventListener("submit", function (event) {
      event.preventDefault();
      var input = document.getElementById("admin-token");
      if (input.value) { sessionStorage.setItem(TOKEN_KEY, input.value); }
      input.value = "";
      showState();
    });
    showState();
  }

  setInterval(refresh, refreshMs);
})();
