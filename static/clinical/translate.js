// Streams a translation over the WebSocket protocol in clinical/web/consumers.py
// and follows its full-precision verification. Used by the translate page
// and the translation detail page. Text from the server is only ever
// written with textContent.
(function () {
  "use strict";
  const root = document.getElementById("translation");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const form = $("translate-form");
  const input = $("diagnosis");
  const output = $("output");
  const statusEl = $("status");
  const translateBtn = $("translate-btn");
  const cancelBtn = $("cancel-btn");
  const figures = $("figures");
  const verifyBox = $("verification");
  const verifyText = $("verification-text");
  const verifyProgress = $("verification-progress");
  const fastBox = $("fast-draft");
  const fastText = $("fast-text");
  const fig = (id) => $("fig-" + id);
  const nextSteps = $("next-steps");
  const handoutLink = $("handout-link");
  const quality = window.clinicalQuality;
  const sentences = window.clinicalSentences;
  const sentenceSlot = $("sentences-slot");
  let readingLevel = root.dataset.readingLevel || "";

  // A language whose explanations need a reader of it (settings
  // LANGUAGE_REVIEW_REQUIRED): say so next to the choice.
  const languageSelect = $("language");
  const languageNote = $("language-note");
  const languageNotes = $("language-notes") ? JSON.parse($("language-notes").textContent) : {};
  function showLanguageNote() {
    if (!languageSelect || !languageNote) return;
    const note = languageNotes[languageSelect.value] || "";
    languageNote.textContent = note;
    languageNote.hidden = !note;
  }
  if (languageSelect) languageSelect.addEventListener("change", showLanguageNote);
  showLanguageNote();

  let socket = null;
  let running = false;
  let pending = [];      // frames to send once the socket opens
  let currentId = root.dataset.watchId || null;

  function setStatus(text) { statusEl.textContent = text; }
  function setRunning(value) {
    running = value;
    // A disabled button loses keyboard focus: hand it to the other button.
    const focused = document.activeElement;
    if (translateBtn) translateBtn.disabled = value;
    if (cancelBtn) cancelBtn.disabled = !value;
    if (value && focused === translateBtn && cancelBtn) cancelBtn.focus();
    if (!value && focused === cancelBtn && translateBtn) translateBtn.focus();
    output.setAttribute("aria-busy", value ? "true" : "false");
  }
  function ms(value) { return value == null ? "–" : Math.round(value).toLocaleString() + " ms"; }

  // Reconnects for frames queued on a socket that closed before it opened
  // (a handshake dropped by a busy server, a network blip): the frames never
  // left, so they go on the next socket instead of being lost.
  const MAX_RETRIES = 3;
  let retries = 0;

  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + window.location.host + root.dataset.wsPath);
    let opened = false;
    socket = ws;
    ws.addEventListener("open", () => {
      opened = true;
      retries = 0;
      pending.forEach((frame) => ws.send(JSON.stringify(frame)));
      pending = [];
    });
    ws.addEventListener("message", (event) => handle(JSON.parse(event.data)));
    ws.addEventListener("close", (event) => {
      if (socket === ws) socket = null;
      if (!opened && pending.length && retries < MAX_RETRIES) {
        retries += 1;
        window.setTimeout(() => { if (!socket) connect(); }, 500 * retries);
        return;
      }
      pending = [];
      if (running) { setRunning(false); setStatus("Connection lost. Please try again."); }
      // 4401: signed out; 4403: not a clinician (the reload shows why).
      // 4429 (too many sockets) keeps the error frame's message on screen.
      if (event.code === 4401 || event.code === 4403) { window.location.reload(); }
      // 1012: that server is restarting. Reconnect (to another one, through
      // the load balancer) to keep following a verification in progress.
      if (event.code === 1012 && currentId && verifyBox && ["queued", "running"].includes(verifyBox.dataset.state)) {
        send({ type: "watch", id: currentId });
      }
    });
  }

  function send(frame) {
    if (socket && socket.readyState === WebSocket.OPEN) { socket.send(JSON.stringify(frame)); }
    else { pending.push(frame); if (!socket) connect(); }
  }

  // Marks the text where the checks found something and shows it sentence
  // by sentence (sentences.js), once the server has the completed text.
  async function showSentences(id) {
    if (!sentences || !root.dataset.sentencesUrl) return;
    const view = await sentences.load(root.dataset.sentencesUrl.replace("00000000-0000-0000-0000-000000000000", id));
    if (view && id === currentId && !running) sentences.render(view, output, sentenceSlot, output.lang);
  }

  function hideSentences() {
    if (sentences) sentences.clear(output, sentenceSlot);
  }

  function showVerifying(frame) {
    verifyBox.hidden = false;
    verifyBox.dataset.state = frame.state;
    verifyProgress.hidden = false;
    verifyText.textContent = frame.message;
  }

  function showVerified(frame) {
    if (frame.id !== currentId) return;
    // Keep the fast text for comparison, then swap in the verified text.
    if (fastBox && fastText && !fastBox.dataset.filled) {
      fastText.textContent = output.textContent;
      fastBox.dataset.filled = "1";
    }
    if (fastBox) fastBox.hidden = false;
    output.textContent = frame.text;
    if (quality) quality.render(frame, readingLevel, true);
    hideSentences();
    showSentences(frame.id);
    verifyBox.hidden = false;
    verifyBox.dataset.state = "verified";
    verifyProgress.hidden = true;
    verifyText.textContent = frame.message;
    const doubted = frame.self_check && frame.self_check.passed === false;
    const asWritten = frame.sentences_as_written || [];  // a note re-run sentence by sentence
    if (frame.candidate === "as_written") {  // clinical.rerun.candidates.AS_WRITTEN
      setStatus("The diagnosis as written is shown: the model's own check doubted the plain-words version; "
        + "explain it to the patient yourself.");
    } else if (asWritten.length) {
      setStatus("Re-run text shown; " + (asWritten.length === 1 ? "sentence " : "sentences ")
        + asWritten.join(", ") + (asWritten.length === 1 ? " is" : " are") + " as written: the model's own check "
        + "doubted the plain-words version; explain " + (asWritten.length === 1 ? "it" : "them")
        + " to the patient yourself.");
    } else {
      setStatus(doubted ? "Re-run text shown; the model's own check still doubts it: read it before giving it to the patient."
        : "Verified text shown.");
    }
  }

  function handle(frame) {
    switch (frame.type) {
      case "started":
        currentId = frame.id;
        output.textContent = "";
        hideSentences();
        verifyBox.hidden = true;
        verifyBox.dataset.state = "";
        if (fastBox) { fastBox.hidden = true; delete fastBox.dataset.filled; }
        if (nextSteps) nextSteps.hidden = true;
        if (quality) quality.hide();
        fig("engine").textContent = frame.engine + " · " + frame.model + " · " + frame.precision;
        setStatus("Translating…");
        break;
      case "token":
        output.textContent += frame.text;
        break;
      case "checking":
        if (frame.id !== currentId) break;
        setStatus(frame.sentences > 1
          ? "Written. The model is checking each of its " + frame.sentences + " sentences against the diagnosis…"
          : "Written. The model is checking it against the diagnosis…");
        break;
      case "done":
        setRunning(false);
        fig("ttft").textContent = ms(frame.ttft_ms);
        fig("total").textContent = ms(frame.total_ms);
        fig("tokens").textContent = frame.tokens_out + (frame.tokens_per_s ? " (" + frame.tokens_per_s.toFixed(1) + " tokens/s)" : "");
        fig("confidence").textContent = frame.confidence == null ? "–" : frame.confidence.toFixed(2);
        figures.hidden = false;
        if (nextSteps && root.dataset.handoutUrl) {
          handoutLink.href = root.dataset.handoutUrl.replace("00000000-0000-0000-0000-000000000000", frame.id);
          nextSteps.hidden = false;
        }
        if (quality) quality.render(frame, readingLevel, false);
        showSentences(frame.id);
        setStatus((frame.verification === "pending"
          ? "Done. The explanation is complete; it is being verified in full precision."
          : "Done. The explanation is complete.") + (quality ? quality.summary(frame) : ""));
        break;
      case "verifying":
        // States only move forward: a late "verifying" never hides a result.
        if (frame.id === currentId && !["verified", "failed"].includes(verifyBox.dataset.state)) showVerifying(frame);
        break;
      case "verified":
        showVerified(frame);
        break;
      case "verification_failed":
        if (frame.id !== currentId) break;
        verifyBox.hidden = false;
        verifyBox.dataset.state = "failed";
        verifyProgress.hidden = true;
        verifyText.textContent = frame.message;
        setStatus("Verification failed: the fast text is shown. Check it carefully.");
        break;
      case "cancelled":
        setRunning(false);
        setStatus("Cancelled. The text so far is shown.");
        break;
      case "error":
        setRunning(false);
        setStatus(frame.message);
        break;
    }
  }

  if (form) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (running) return;
      figures.hidden = true;
      setRunning(true);
      setStatus("Connecting…");
      output.lang = $("language").value;
      readingLevel = $("reading-level").value;
      send({ type: "translate", text: input.value,
             reading_level: Number($("reading-level").value), language: $("language").value });
    });
    cancelBtn.addEventListener("click", () => { if (running) send({ type: "cancel" }); });
  }
  if (root.dataset.watchId && ["pending", "running"].includes(root.dataset.verification)) {
    send({ type: "watch", id: root.dataset.watchId });
  }
  if (!socket) connect();
})();
