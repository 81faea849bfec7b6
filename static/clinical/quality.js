// Shows an output's reading level, safety and faithfulness checks, the
// model's own check and glossary (the "readability", "safety",
// "faithfulness", "self_check" and "glossary" of
// the done and verified frames, see clinical/quality/measure.py) in the
// panels of templates/clinical/_result.html.
// Says the same as clinical/quality/display.py does on the server.
// Text from the server is only ever written with textContent.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const KIND_LABELS = {
    dose: "Dose", measurement: "Measurement", number: "Number", drug: "Drug",
    laterality: "Side (left/right)", negation: "Negation", uncertainty: "Uncertainty (possible, probable)",
    extent: "Extent (partial, not completely)", term: "Medical term (not kept or explained)",
    lay_term: "Medical term (plain words no vetted vocabulary gives for it)",
  };
  const SAFETY_PASSED = "Nothing missing: every number with its unit, dose, drug name, side (left/right), " +
    "negation, uncertainty (possible, probable) and extent (partial, not completely) of the diagnosis is in the " +
    "explanation, and each medical term is kept or explained.";
  const SAFETY_UNCHECKED = "Not checked (the explanation did not complete).";
  const FLAG_LABELS = {
    number: "Number", unit: "Unit", drug: "Drug", laterality: "Side (left/right)",
    body_site: "Body part", vital_sign: "Vital sign", organ_function: "Organ function",
    direction: "Direction (up/down)", negation: "Negation", person: "Who (I/he/she)",
  };
  const FAITHFULNESS_PASSED = "Nothing added: the explanation states no number, unit, drug, side, body part, " +
    "vital sign, organ failure, direction (up/down), negation or person that the diagnosis does not.";
  const NOT_MEASURED = "Not measured for this language.";
  // The model's own check; {p}, {t}: P(yes) and the gate's threshold in whole percent.
  const SELF_CHECK_PASSED = "Says the same as the diagnosis by the model's own check: {p} % " +
    "(texts under {t} % are re-checked).";
  const SELF_CHECK_DOUBTED = "Doubted by the model's own check: {p} % that it says the same as the diagnosis " +
    "(under {t} %). Read it against the diagnosis before giving it to the patient: " +
    "in testing, 1 in 3 such texts was wrong, against 1 in 36 of the others.";
  const SELF_CHECK_MEASURED = "The model's own check: {p} % that it says the same as the diagnosis.";
  const percent = (value) => String(Math.round(value * 100));

  const grade = (value) => value == null ? "not measured (no words)" : "grade " + value.toFixed(1);

  function readabilityText(readability, readingLevel) {
    const score = readability.score;
    let output = NOT_MEASURED;
    if (readability.measure === "fkgl") {
      output = grade(score) + " (FKGL; asked for grade " + readingLevel + ")";
    } else if (readability.measure === "szigriszt_pazos") {
      output = score == null ? "not measured (no words)"
        : score.toFixed(1) + " of 100 (Szigriszt-Pazos; higher is easier)";
    }
    return { input: grade(readability.input_fkgl) + " (FKGL)", output: output, note: readability.note || "" };
  }

  // One check's panel (#<id>, #<id>-h, #<id>-summary, #<listId>): its state,
  // summary and one list item per finding, "<label>: <text> (<detail>)".
  function renderCheck(id, listId, title, passed, passedText, failedText, items, verified) {
    const box = $(id);
    if (!box) return;
    const list = $(listId);
    list.replaceChildren();
    let state = "unchecked", summary = SAFETY_UNCHECKED;
    if (passed === true) { state = "passed"; summary = passedText; }
    if (passed === false) {
      state = "failed";
      summary = failedText;
      items.forEach((item) => {
        const li = document.createElement("li");
        const kind = document.createElement("span");
        kind.className = "kind";
        kind.textContent = item.label + ":";
        li.append(kind, " " + item.text);
        if (item.detail) {
          const detail = document.createElement("span");
          detail.className = "detail";
          detail.textContent = "(" + item.detail + ")";
          li.append(" ", detail);
        }
        list.append(li);
      });
    }
    list.hidden = !list.children.length;
    $(id + "-h").textContent = title + (verified ? " (verified text)" : "");
    $(id + "-summary").textContent = summary;
    box.dataset.state = state;
    box.hidden = false;
  }

  function renderSafety(safety, verified) {
    const missing = safety.missing || [];
    renderCheck("safety", "safety-missing", "Safety check", safety.passed, SAFETY_PASSED,
      "Missing from the explanation (" + missing.length + "): check before giving it to the patient.",
      missing.map((item) => ({ label: KIND_LABELS[item.kind] || item.kind, text: item.text })), verified);
  }

  function renderFaithfulness(faithfulness, verified) {
    const flags = faithfulness.flags || [];
    renderCheck("faithfulness", "faithfulness-flags", "Faithfulness check", faithfulness.passed,
      FAITHFULNESS_PASSED,
      "Not in the diagnosis (" + flags.length + "): check these words before giving it to the patient.",
      flags.map((item) => ({ label: FLAG_LABELS[item.kind] || item.kind, text: item.text, detail: item.detail })),
      verified);
  }

  // The model's own check (frame.self_check: {p_yes, threshold, passed} or
  // null when it did not run: no panel).
  function renderSelfCheck(selfCheck, verified) {
    const box = $("self-check");
    if (!box) return;
    if (!selfCheck) { box.hidden = true; return; }
    let state = "measured";
    let summary = SELF_CHECK_MEASURED.replace("{p}", percent(selfCheck.p_yes));
    if (selfCheck.passed != null) {  // null: no threshold applied
      state = selfCheck.passed ? "passed" : "doubted";
      summary = (selfCheck.passed ? SELF_CHECK_PASSED : SELF_CHECK_DOUBTED)
        .replace("{p}", percent(selfCheck.p_yes)).replace("{t}", percent(selfCheck.threshold));
      if (selfCheck.sentences) summary += sentencesSummary(selfCheck.sentences, selfCheck.threshold);
    }
    $("self-check-h").textContent = "Model's own check" + (verified ? " (verified text)" : "");
    $("self-check-summary").textContent = summary;
    box.dataset.state = state;
    box.hidden = false;
  }

  // A note checked sentence by sentence (self_check.sentences: P(yes) or
  // null each), as clinical.quality.display.self_check_display words it.
  // The numbers (from 1) of a note's sentences under the threshold.
  function doubtedSentences(selfCheck) {
    const doubted = [];
    if (!selfCheck.sentences || selfCheck.threshold == null) return doubted;
    selfCheck.sentences.forEach((p, i) => { if (p != null && p < selfCheck.threshold) doubted.push(i + 1); });
    return doubted;
  }

  function sentencesSummary(sentences, threshold) {
    const doubted = doubtedSentences({ sentences: sentences, threshold: threshold });
    if (!doubted.length) return " Checked sentence by sentence: none of the " + sentences.length + " is doubted.";
    return " Checked sentence by sentence, the lowest shown: " + sentencesNamed(doubted) + " of " + sentences.length +
      (doubted.length === 1 ? " is" : " are") + " doubted.";
  }

  // [2] -> "sentence 2"; [2, 4, 5] -> "sentences 2, 4 and 5" (clinical.quality.display.sentences_named).
  function sentencesNamed(numbers) {
    const words = numbers.slice(0, -1).join(", ") + (numbers.length > 1 ? " and " : "") + numbers[numbers.length - 1];
    return (numbers.length === 1 ? "sentence " : "sentences ") + words;
  }

  // Each entry's definition comes from a vetted vocabulary, which it names
  // (clinical.quality.glossary.glossary_display fills both in, as on the server).
  function renderGlossary(glossary) {
    const section = $("glossary");
    if (!section || glossary == null) return;  // null: keep what is shown
    const list = $("glossary-list");
    list.replaceChildren();
    glossary.forEach((entry) => {
      const row = document.createElement("div");
      const term = document.createElement("dt");
      const item = document.createElement("dd");
      const definition = document.createElement("span");
      const source = document.createElement("span");
      term.textContent = entry.term;
      definition.className = "glossary-definition";
      definition.textContent = entry.definition;
      source.className = "glossary-source";
      source.textContent = "Source: " + (entry.source_name || entry.source);
      item.append(definition, " ", source);
      row.append(term, item);
      list.append(row);
    });
    section.hidden = !glossary.length;
  }

  window.clinicalQuality = {
    // frame: a done or verified frame; readingLevel: the grade asked for.
    render(frame, readingLevel, verified) {
      if (frame.readability) {
        const text = readabilityText(frame.readability, readingLevel);
        $("q-input").textContent = text.input;
        $("q-output").textContent = text.output;
        $("q-note").textContent = text.note;
        $("readability").hidden = false;
      }
      if (frame.safety) renderSafety(frame.safety, verified);
      if (frame.faithfulness) renderFaithfulness(frame.faithfulness, verified);
      if ("self_check" in frame) renderSelfCheck(frame.self_check, verified);
      renderGlossary(verified ? null : (frame.glossary || []));
    },
    hide() {
      ["safety", "faithfulness", "self-check", "readability", "glossary"].forEach((id) => { if ($(id)) $(id).hidden = true; });
    },
    // A short sentence for the status message after "Done.".
    summary(frame) {
      if (!frame.safety || frame.safety.passed == null) return "";
      let text = frame.safety.passed ? " Safety check: nothing missing."
        : " Safety check: " + (frame.safety.missing || []).length + " missing; see the list next to the text.";
      if (frame.faithfulness && frame.faithfulness.passed === false) {
        text += " Faithfulness check: " + (frame.faithfulness.flags || []).length +
          " not in the diagnosis; see the list next to the text.";
      }
      if (frame.self_check) {
        const doubted = doubtedSentences(frame.self_check);
        const which = doubted.length ? ", " + sentencesNamed(doubted) : "";
        text += frame.self_check.passed === false
          ? " Model's own check: doubted (" + percent(frame.self_check.p_yes) + " %" + which +
            "); read it before giving it to the patient."
          : " Model's own check: " + percent(frame.self_check.p_yes) + " % that it says the same as the diagnosis.";
      }
      return text;
    },
  };
})();
