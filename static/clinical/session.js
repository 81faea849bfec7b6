// Idle-timeout warning: two minutes before the session ends the page offers
// one click to stay signed in; at the end it goes to the login page.
(function () {
  "use strict";
  const body = document.body;
  const timeoutS = Number(body.dataset.idleTimeoutS || 0);
  const banner = document.getElementById("session-warning");
  if (!timeoutS || !banner) return;
  const text = document.getElementById("session-warning-text");
  const WARN_S = 120;
  let deadline = Date.now() + timeoutS * 1000;

  function csrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  async function extend() {
    const response = await fetch(body.dataset.extendUrl, {
      method: "POST", credentials: "same-origin", headers: { "X-CSRFToken": csrfToken() },
    });
    if (response.ok) {
      deadline = Date.now() + (await response.json()).idle_timeout_s * 1000;
      banner.hidden = true;
    } else {
      window.location.reload();
    }
  }

  function tick() {
    const left = Math.round((deadline - Date.now()) / 1000);
    if (left <= 0) { window.location.href = body.dataset.loginUrl; return; }
    if (left <= WARN_S) {
      text.textContent = "For privacy you will be signed out in " + Math.max(1, Math.ceil(left / 60)) +
        (left > 60 ? " minutes" : " minute") + " without activity.";
      banner.hidden = false;
    }
  }

  document.getElementById("session-extend").addEventListener("click", extend);
  // Starting a translation counts as activity.
  document.addEventListener("submit", () => { deadline = Date.now() + timeoutS * 1000; banner.hidden = true; });
  setInterval(tick, 1000);
  window.clinicalSession = { extend };
})();
