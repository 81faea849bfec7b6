// Streams a translation over the WebSocket protocol in clinical/consumers.py.
// Text from the server is only ever written with textContent.
(function () {
  "use strict";
  const form = document.getElementById("translate-form");
  if (!form) return;
  const input = document.getElementById("diagnosis");
  const output = document.getElementById("output");
  const statusEl = document.getElementById("status");
  const translateBtn = document.getElementById("translate-btn");
  const cancelBtn = document.getElementById("cancel-btn");
  const figures = document.getElementById("figures");
  const fig = (id) => document.getElementById("fig-" + id);

  let socket = null;
  let running = false;
  let pending = null; // a frame to send once the socket opens

  function setStatus(text) { statusEl.textContent = text; }
  function setRunning(value) {
    running = value;
    translateBtn.disabled = value;
    cancelBtn.disabled = !value;
    output.setAttribute("aria-busy", value ? "true" : "false");
  }
  function ms(value) { return value == null ? "–" : Math.round(value).toLocaleString() + " ms"; }

  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + window.location.host + form.dataset.wsPath);
    socket.addEventListener("open", () => {
      if (pending) { socket.send(JSON.stringify(pending)); pending = null; }
    });
    socket.addEventListener("message", (event) => handle(JSON.parse(event.data)));
    socket.addEventListener("close", (event) => {
      socket = null;
      if (running) { setRunning(false); setStatus("Connection lost. Please try again."); }
      if (event.code === 4401) { window.location.reload(); }
    });
  }

  function send(frame) {
    if (socket && socket.readyState === WebSocket.OPEN) { socket.send(JSON.stringify(frame)); }
    else { pending = frame; if (!socket) connect(); }
  }

  function handle(frame) {
    switch (frame.type) {
      case "started":
        output.textContent = "";
        fig("engine").textContent = frame.engine + " · " + frame.model + " · " + frame.precision;
        setStatus("Translating…");
        break;
      case "token":
        output.textContent += frame.text;
        break;
      case "done":
        setRunning(false);
        fig("ttft").textContent = ms(frame.ttft_ms);
        fig("total").textContent = ms(frame.total_ms);
        fig("tokens").textContent = frame.tokens_out + (frame.tokens_per_s ? " (" + frame.tokens_per_s.toFixed(1) + " tokens/s)" : "");
        fig("confidence").textContent = frame.confidence == null ? "–" : frame.confidence.toFixed(2);
        figures.hidden = false;
        setStatus("Done.");
        break;
      case "cancelled":
        setRunning(false);
        setStatus("Cancelled.");
        break;
      case "error":
        setRunning(false);
        setStatus(frame.message);
        break;
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (running) return;
    figures.hidden = true;
    setRunning(true);
    setStatus("Connecting…");
    send({ type: "translate", text: input.value });
  });
  cancelBtn.addEventListener("click", () => { if (running) send({ type: "cancel" }); });
  connect();
})();
