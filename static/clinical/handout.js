// The patient handout page: print and copy buttons, and printing after
// "Save and print". Status messages go to the #handout-status live region.
(function () {
  "use strict";
  const sheet = document.getElementById("handout");
  if (!sheet) return;
  const text = document.getElementById("handout-text");
  const status = document.getElementById("handout-status");
  const say = (message) => { status.textContent = message; };

  function selectText() {
    const range = document.createRange();
    range.selectNodeContents(text);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  document.getElementById("print-btn").addEventListener("click", () => window.print());
  document.getElementById("copy-btn").addEventListener("click", async () => {
    try {
      if (!navigator.clipboard) throw new Error("no clipboard");
      await navigator.clipboard.writeText(text.textContent);
      say("Handout text copied to the clipboard.");
    } catch (error) {
      selectText();
      say("Copying is not allowed here. The text is selected: press Ctrl+C (or ⌘+C) to copy it.");
    }
  });
  if (sheet.dataset.printOnLoad === "true") {
    window.addEventListener("load", () => window.print());
  }
})();
