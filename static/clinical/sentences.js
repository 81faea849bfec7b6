// Marks a translation's text where the checks found something, and shows
// each sentence of the diagnosis beside its plain sentence: renders the
// view of clinical/web/sentence_view.py ({"text", "sentences",
// "text_whys", "table_whys"}). The view comes with the page (a
// json_script named by data-sentence-view) or, on the live page, from
// GET /translations/<id>/sentences/ after the done and verified frames.
// Text from the server is only ever written with textContent: every node
// is built here.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    if (text != null) node.textContent = text;
    return node;
  }

  // A span of text cut into segments; a marked one says why on hover and
  // focus (data-why, shown by app.css) and to a screen reader
  // (aria-describedby, one of the whys rendered apart).
  function appendSegments(parent, segments) {
    for (const seg of segments) {
      if (!seg.mark) { parent.appendChild(document.createTextNode(seg.text)); continue; }
      parent.appendChild(el("mark", {
        class: "mark-" + seg.mark.kind, tabindex: "0", "data-why": seg.mark.why,
        "aria-describedby": seg.mark.id,
      }, seg.text));
    }
  }

  function whys(items) {
    const box = el("div", { class: "mark-whys", hidden: "" });
    for (const item of items) box.appendChild(el("span", { id: item.id }, item.why));
    return box;
  }

  // The delivered text with its doubted sentences and flagged words marked;
  // its characters stay exactly the text.
  function renderText(output, view) {
    if (!view.text.length) return;
    const text = document.createDocumentFragment();
    for (const chunk of view.text) {
      if (!chunk.status) { appendSegments(text, chunk.segments); continue; }
      const span = el("span", {
        class: "sentence-" + chunk.status, tabindex: "0",
        "data-why": "Sentence " + chunk.sentence + ": " + chunk.why,
        "aria-describedby": view.id_prefix + "s" + chunk.sentence,
      });
      appendSegments(span, chunk.segments);
      text.appendChild(span);
    }
    // The same characters, now marked: a live region must not read them again.
    const live = output.getAttribute("aria-live");
    if (live) output.setAttribute("aria-live", "off");
    output.replaceChildren(text);
    if (live) window.setTimeout(() => output.setAttribute("aria-live", live), 1000);
    clear(output, null);
    const box = whys(view.text_whys);
    box.id = output.id + "-whys";
    output.after(box);
  }

  // Takes away what render put beside the text element (the marks' whys)
  // and empties and hides the table slot; either may be null.
  function clear(outputEl, slot) {
    const old = outputEl ? $(outputEl.id + "-whys") : null;
    if (old) old.remove();
    if (slot) { slot.hidden = true; slot.replaceChildren(); }
  }

  // The handout's actions on one sentence: keep it (recorded), use the
  // diagnosis as written (a new version of the handout), or edit it in the
  // handout's text box. Each form posts to the handout page itself.
  function actionCell(s, editor) {
    const cell = el("td", { class: "sentence-actions" });
    const csrf = document.querySelector("#handout-form input[name=csrfmiddlewaretoken]");
    const form = el("form", { method: "post", "aria-label": "Sentence " + s.number });
    if (csrf) form.appendChild(el("input", { type: "hidden", name: "csrfmiddlewaretoken", value: csrf.value }));
    form.appendChild(el("input", { type: "hidden", name: "sentence", value: String(s.number) }));
    if (["doubted", "rerun"].includes(s.status)) {
      form.appendChild(el("button", { type: "submit", name: "action", value: "keep" }, "Keep"));
    }
    if (s.status !== "as_written" && s.plain) {
      form.appendChild(el("button", { type: "submit", name: "action", value: "as_written" }, "Use as written"));
    }
    const edit = el("button", { type: "button" }, "Edit");
    edit.addEventListener("click", () => {
      if (!editor) return;
      const at = s.plain ? editor.value.indexOf(s.plain.text) : -1;
      editor.focus();
      if (at >= 0) editor.setSelectionRange(at, at + s.plain.text.length);
    });
    if (editor) form.appendChild(edit);
    cell.appendChild(form);
    return cell;
  }

  function renderTable(slot, view, language, editor) {
    slot.replaceChildren();
    if (view.sentences.length < 1) { slot.hidden = true; return; }
    const section = el("section", { class: "sentences", "aria-labelledby": slot.id + "-h" });
    section.appendChild(el(slot.dataset.headingLevel || "h3", { id: slot.id + "-h" }, "Sentence by sentence"));
    const hint = el("p", { class: "hint" }, "Each sentence of the diagnosis beside its plain words. ");
    hint.appendChild(el("mark", { class: "mark-flag" }, "Flagged words"));
    hint.appendChild(document.createTextNode(": the diagnosis does not say them. "));
    hint.appendChild(el("mark", { class: "mark-lost" }, "Lost words"));
    hint.appendChild(document.createTextNode(": missing from the plain words. "));
    hint.appendChild(el("mark", { class: "mark-term" }, "Medical terms"));
    hint.appendChild(document.createTextNode(": explained from a vetted vocabulary. Hover over or focus a mark to see why."));
    section.appendChild(hint);
    const scroll = el("div", { class: "table-scroll", role: "region", tabindex: "0",
                               "aria-label": "Sentence by sentence table" });
    const table = el("table", { class: "sentence-table" });
    const head = el("tr");
    const columns = ["#", "Diagnosis", "Plain words", "Status"].concat(editor ? ["Action"] : []);
    for (const name of columns) head.appendChild(el("th", { scope: "col" }, name));
    table.appendChild(el("thead")).appendChild(head);
    const body = table.appendChild(el("tbody"));
    for (const s of view.sentences) {
      const row = el("tr", { "data-status": s.status, id: slot.id + "-" + s.number });
      row.appendChild(el("th", { scope: "row" }, String(s.number)));
      const source = row.appendChild(el("td", { class: "sentence-source", "data-label": "Diagnosis" }));
      appendSegments(source, s.source_segments);
      const plain = row.appendChild(el("td", { class: "sentence-plain", lang: language || "en",
                                               "data-label": "Plain words" }));
      if (s.plain) appendSegments(plain, s.plain_segments);
      else plain.appendChild(el("em", {}, "(nothing written)"));
      const status = row.appendChild(el("td", { class: "sentence-status", "data-label": "Status" }));
      status.appendChild(el("span", { class: "status-badge", "data-status": s.status }, s.status_label));
      if (s.why) { status.appendChild(document.createTextNode(" ")); status.appendChild(el("span", { class: "why" }, s.why)); }
      if (editor) row.appendChild(actionCell(s, editor));
      body.appendChild(row);
    }
    scroll.appendChild(table);
    section.appendChild(scroll);
    section.appendChild(whys(view.table_whys));
    slot.appendChild(section);
    slot.hidden = false;
  }

  // Renders a view into the text element (may be null) and the table slot;
  // with an editor (the handout's text box) each sentence gets its actions.
  function render(view, outputEl, slot, language, editor) {
    if (outputEl) renderText(outputEl, view);
    if (slot) renderTable(slot, view, language, editor || null);
  }

  // Fetches a translation's view; resolves to null when it cannot be read.
  async function load(url) {
    try {
      const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      return response.ok ? await response.json() : null;
    } catch (error) {
      return null;
    }
  }

  window.clinicalSentences = { render, load, clear };

  // A page that comes with its view renders it at once.
  for (const holder of document.querySelectorAll("[data-sentence-view]")) {
    const data = $(holder.dataset.sentenceView);
    if (!data) continue;
    const view = JSON.parse(data.textContent);
    render(view, holder.dataset.sentenceText ? $(holder.dataset.sentenceText) : null,
           $(holder.dataset.sentenceSlot), holder.dataset.language,
           holder.dataset.sentenceEditor ? $(holder.dataset.sentenceEditor) : null);
  }
})();
