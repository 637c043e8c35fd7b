/* app.js — the playground page: chat with streaming, constraints checked
 * before sending and outputs validated after, per-response figures and a
 * token view, and a live engine panel. Talks only to the server that
 * served it (the page's Content-Security-Policy allows nothing else).
 * Logic without the DOM is in logic.js. */
"use strict";

(function () {
  var L = TrellisLogic;
  var $ = function (id) { return document.getElementById(id); };
  var history = [];      /* {role, content} */
  var controller = null; /* the running request's AbortController */
  var KEY = "trellis-api-key";

  var EXAMPLES = {
    json_schema: {
      "person": JSON.stringify({ type: "object", properties: {
        name: { type: "string", maxLength: 20 }, age: { type: "integer", minimum: 0, maximum: 120 },
        languages: { type: "array", items: { type: "string" }, maxItems: 3 } },
        required: ["name", "age"], additionalProperties: false }, null, 2),
      "yes/no with reason": JSON.stringify({ type: "object", properties: {
        answer: { enum: ["yes", "no"] }, reason: { type: "string", maxLength: 80 } },
        required: ["answer", "reason"], additionalProperties: false }, null, 2)
    },
    regex: { "date": "[0-9]{4}-[0-9]{2}-[0-9]{2}", "phone": "\\(\\d{3}\\) \\d{3}-\\d{4}",
             "one word": "[A-Za-z]+" },
    choices: { "sentiment": JSON.stringify(["positive", "negative", "neutral"]),
               "colour": JSON.stringify(["red", "green", "blue"]) },
    ebnf: { "arithmetic": 'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= [0-9]+',
            "greeting": 'root ::= "Hello, " name "!"\nname ::= [A-Z] [a-z]+' }
  };

  function apiKey() { return sessionStorage.getItem(KEY) || ""; }

  function headers() {
    var h = { "Content-Type": "application/json" };
    if (apiKey()) h.Authorization = "Bearer " + apiKey();
    return h;
  }

  function showError(msg) {
    var e = $("error");
    e.textContent = msg;
    e.hidden = !msg;
  }

  function askKey() { $("key-dialog").hidden = false; $("key-input").focus(); }

  /* fetch with the key; a 401 opens the key dialog */
  function api(path, opts) {
    opts = opts || {};
    opts.headers = headers();
    return fetch(path, opts).then(function (r) {
      if (r.status === 401) askKey();
      return r;
    });
  }

  function errorText(r, body) {
    try {
      var j = JSON.parse(body);
      if (j.error && j.error.message) return "HTTP " + r.status + ": " + j.error.message;
    } catch (e) { /* not JSON */ }
    return "HTTP " + r.status + ": " + body.slice(0, 500);
  }

  function settings() {
    return {
      temperature: $("temperature").value, top_p: $("top_p").value, top_k: $("top_k").value,
      min_p: $("min_p").value, max_tokens: $("max_tokens").value, seed: $("seed").value,
      stop: $("stop-strings").value, kind: $("kind").value, constraint: $("constraint").value
    };
  }

  function messageBox(role) {
    var div = document.createElement("div");
    div.className = "msg " + role;
    var r = document.createElement("span");
    r.className = "role";
    r.textContent = role;
    var body = document.createElement("div");
    body.className = "body";
    div.appendChild(r);
    div.appendChild(body);
    $("messages").appendChild(div);
    $("messages").scrollTop = $("messages").scrollHeight;
    return div;
  }

  function renderHistory() {
    $("messages").textContent = "";
    history.forEach(function (m, i) {
      var box = messageBox(m.role);
      box.querySelector(".body").textContent = m.content;
      if (m.role !== "user") return;
      /* edit: the message back in the input, the conversation cut there */
      var b = document.createElement("button");
      b.type = "button";
      b.className = "edit";
      b.textContent = "edit";
      b.addEventListener("click", function () {
        if (controller) return;
        $("input").value = m.content;
        history = history.slice(0, i);
        renderHistory();
        setBusy(false);
        $("input").focus();
      });
      box.appendChild(b);
    });
  }

  function addToken(body, entry, text) {
    if (!$("show-tokens").checked || !entry) {
      body.appendChild(document.createTextNode(text));
      return;
    }
    var span = document.createElement("span");
    span.className = "tok";
    span.textContent = text;
    span.style.background = L.logprobColor(entry.logprob);
    var alts = (entry.top_logprobs || []).map(function (t) {
      return JSON.stringify(t.token) + " " + (100 * Math.exp(t.logprob)).toFixed(1) + "%";
    });
    span.title = "p = " + (100 * Math.exp(entry.logprob)).toFixed(1) + "%" +
                 (alts.length ? "\nalternatives: " + alts.join(", ") : "");
    body.appendChild(span);
  }

  function setBusy(busy) {
    $("send").disabled = busy;
    $("stop").disabled = !busy;
    $("regenerate").disabled = busy || !history.some(function (m) { return m.role === "assistant"; });
  }

  /* Sends the history; streams the answer into a new assistant box. */
  function generate() {
    var s = settings();
    var msgs = [];
    if ($("system").value.trim()) msgs.push({ role: "system", content: $("system").value });
    msgs = msgs.concat(history);
    var body;
    try {
      body = L.buildRequest(s, msgs);
    } catch (e) {
      showError("Constraint: " + e.message);
      return;
    }
    showError("");
    var box = messageBox("assistant");
    var out = box.querySelector(".body");
    var text = "", finish = null, usage = null, t0 = performance.now(), tFirst = null;
    var nTok = 0, nSure = 0;
    controller = new AbortController();
    setBusy(true);
    api("/v1/chat/completions", { method: "POST", body: JSON.stringify(body),
                                  signal: controller.signal })
      .then(function (r) {
        if (!r.ok) return r.text().then(function (t) { throw new Error(errorText(r, t)); });
        var reader = r.body.getReader(), dec = new TextDecoder(), sse = L.sseReader();
        function pump() {
          return reader.read().then(function (res) {
            if (res.done) return;
            sse.feed(dec.decode(res.value, { stream: true })).forEach(function (d) {
              if (d === "[DONE]") return;
              var j = JSON.parse(d);
              if (j.error) throw new Error(j.error.message);
              if (j.usage) usage = j.usage;
              (j.choices || []).forEach(function (c) {
                var delta = c.delta || {};
                var entries = (c.logprobs && c.logprobs.content) || [];
                if (delta.content) {
                  if (tFirst === null) tFirst = performance.now();
                  text += delta.content;
                  if (entries.length) {
                    entries.forEach(function (e) {
                      nTok++;
                      if (e.logprob === 0) nSure++;
                      addToken(out, e, e.token);
                    });
                  } else {
                    out.appendChild(document.createTextNode(delta.content));
                  }
                }
                if (c.finish_reason) finish = c.finish_reason;
              });
            });
            $("messages").scrollTop = $("messages").scrollHeight;
            return pump();
          });
        }
        return pump();
      })
      .then(function () {
        history.push({ role: "assistant", content: text });
        var st = document.createElement("div");
        st.className = "stats";
        var secs = (performance.now() - t0) / 1000;
        var ttft = tFirst === null ? null : (tFirst - t0) / 1000;
        var parts = ["finish: " + finish];
        if (usage) {
          var cached = (usage.prompt_tokens_details || {}).cached_tokens || 0;
          parts.push("prompt " + usage.prompt_tokens + " tokens (" + cached + " from the cache)");
          parts.push(usage.completion_tokens + " tokens");
          if (ttft !== null && secs > ttft && usage.completion_tokens > 1)
            parts.push(((usage.completion_tokens - 1) / (secs - ttft)).toFixed(1) + " tok/s");
        }
        if (ttft !== null) parts.push("TTFT " + (1000 * ttft).toFixed(0) + " ms");
        if (nTok) parts.push(nSure + " of " + nTok + " tokens at probability 1 (forced or certain)");
        st.textContent = parts.join(" · ");
        box.appendChild(st);
        var v = L.validate(s.kind, s.constraint, text, finish);
        if (v.valid !== null) {
          var vd = document.createElement("div");
          vd.className = "verdict " + (v.valid ? "valid" : "invalid");
          vd.textContent = (v.valid ? "✓ " : "✗ ") + v.why;
          vd.setAttribute("data-valid", String(v.valid));
          box.appendChild(vd);
        }
      })
      .catch(function (e) {
        if (e.name === "AbortError") {
          history.push({ role: "assistant", content: text });
          out.appendChild(document.createTextNode(" [stopped]"));
        } else {
          box.remove();
          showError(e.message);
        }
      })
      .then(function () { controller = null; setBusy(false); });
  }

  /* A constraint is compiled first, so its error shows at its position
   * before anything is sent to the model. */
  function send(ev) {
    if (ev) ev.preventDefault();
    var t = $("input").value;
    if (!t.trim() || controller) return;
    checkConstraint().then(function (ok) {
      if (!ok) return;
      history.push({ role: "user", content: t });
      $("input").value = "";
      renderHistory();
      generate();
    });
  }

  function regenerate() {
    while (history.length && history[history.length - 1].role === "assistant") history.pop();
    renderHistory();
    if (history.length) generate();
  }

  /* Compiles the constraint on the server (a prefill-only completion)
   * and shows where an error points. */
  function checkConstraint() {
    var kind = $("kind").value, text = $("constraint").value, st = $("constraint-status");
    st.className = "muted";
    if (kind === "none") { st.textContent = ""; return Promise.resolve(true); }
    var fields;
    try {
      fields = L.constraintFields(kind, text);
    } catch (e) {
      st.className = "invalid";
      st.textContent = e.message;
      return Promise.resolve(false);
    }
    var body = { prompt: " ", max_tokens: 0 };
    Object.keys(fields).forEach(function (k) { body[k] = fields[k]; });
    st.textContent = "checking…";
    return api("/v1/completions", { method: "POST", body: JSON.stringify(body) })
      .then(function (r) {
        return r.text().then(function (t) {
          if (r.ok) {
            st.className = "valid";
            st.textContent = "✓ compiles";
            return true;
          }
          var msg = errorText(r, t), at = L.errorOffset(msg, text);
          st.className = "invalid";
          st.textContent = msg;
          st.setAttribute("data-offset", String(at));
          if (at >= 0) {
            var line = text.lastIndexOf("\n", at - 1) + 1;
            var end = text.indexOf("\n", at);
            var pre = document.createElement("pre");
            pre.className = "pointer";
            pre.textContent = text.slice(line, end < 0 ? undefined : end) + "\n" +
                              " ".repeat(at - line) + "^";
            st.appendChild(pre);
            $("constraint").focus();
            $("constraint").setSelectionRange(at, Math.min(at + 1, text.length));
          }
          return false;
        });
      });
  }

  function fillExamples() {
    var kind = $("kind").value, ex = $("example");
    ex.textContent = "";
    $("constraint").disabled = kind === "none";
    var names = Object.keys(EXAMPLES[kind] || {});
    var o = document.createElement("option");
    o.value = "";
    o.textContent = names.length ? "examples…" : "(no constraint)";
    ex.appendChild(o);
    names.forEach(function (n) {
      var opt = document.createElement("option");
      opt.value = n;
      opt.textContent = n;
      ex.appendChild(opt);
    });
    if (names.length && !$("constraint").value) $("constraint").value = EXAMPLES[kind][names[0]];
    $("constraint-status").textContent = "";
  }

  /* The engine panel: /get_server_info every 2 s, tok/s over a minute. */
  var rates = [];
  function pollEngine() {
    api("/get_server_info").then(function (r) {
      if (!r.ok) return;
      return r.json().then(function (j) {
        var e = j.engine || {};
        $("engine-stats").textContent = "running " + e.running + ", waiting " + e.waiting +
          " · KV pages used " + e.pages_used + " / " + e.pages_total + " (cached " + e.pages_cached +
          ") · cache hit rate " + (100 * (e.cache_hit_rate || 0)).toFixed(0) + "% · " +
          (e.tokens_per_s || 0).toFixed(1) + " tok/s";
        rates.push(e.tokens_per_s || 0);
        if (rates.length > 30) rates.shift();
        drawChart();
      });
    }).catch(function () { /* the server is gone: the next poll says so */ });
  }

  function drawChart() {
    var c = $("chart"), g = c.getContext("2d"), w = c.width, h = c.height;
    g.clearRect(0, 0, w, h);
    var max = Math.max(1, Math.max.apply(null, rates));
    g.strokeStyle = "#2e5a43";
    g.lineWidth = 2;
    g.beginPath();
    rates.forEach(function (v, i) {
      var x = i * (w - 1) / 29, y = h - 4 - v / max * (h - 16);
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke();
    g.fillStyle = "#555";
    g.font = "10px sans-serif";
    g.fillText("tok/s, last minute (max " + max.toFixed(0) + ")", 4, 10);
  }

  function loadModel() {
    api("/v1/models").then(function (r) {
      if (!r.ok) { $("model").textContent = "HTTP " + r.status; return; }
      return r.json().then(function (j) { $("model").textContent = j.data[0].id; });
    }).catch(function (e) { $("model").textContent = String(e); });
  }

  $("input-form").addEventListener("submit", send);
  $("input").addEventListener("keydown", function (e) {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send(e);
  });
  $("stop").addEventListener("click", function () { if (controller) controller.abort(); });
  $("regenerate").addEventListener("click", regenerate);
  $("clear").addEventListener("click", function () { history = []; renderHistory(); showError(""); setBusy(false); });
  $("kind").addEventListener("change", function () { $("constraint").value = ""; fillExamples(); });
  $("example").addEventListener("change", function () {
    var k = $("kind").value, n = $("example").value;
    if (n) $("constraint").value = EXAMPLES[k][n];
    $("constraint-status").textContent = "";
  });
  $("check").addEventListener("click", checkConstraint);
  $("key-button").addEventListener("click", askKey);
  $("key-cancel").addEventListener("click", function () { $("key-dialog").hidden = true; });
  $("key-form").addEventListener("submit", function (e) {
    e.preventDefault();
    sessionStorage.setItem(KEY, $("key-input").value);
    $("key-input").value = "";
    $("key-dialog").hidden = true;
    loadModel();
  });
  fillExamples();
  loadModel();
  pollEngine();
  setInterval(pollEngine, 2000);
})();
