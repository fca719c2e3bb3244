// The acceptance figures' panel on the admin index: fetch its fragment now and every minute
// (the figures move slowly), and say so when a refresh fails (the last figures stay).
(function () {
  "use strict";
  const panel = document.getElementById("acceptance-figures");
  if (!panel) {
    return;
  }
  const body = panel.querySelector(".acc-figures-body");
  const warning = panel.querySelector(".acc-figures-stale");
  const seconds = 60;
  let loaded = false;

  async function refresh() {
    try {
      const response = await fetch(panel.dataset.url, {credentials: "same-origin", cache: "no-store"});
      if (response.redirected || !response.ok) {
        throw new Error(String(response.status));
      }
      body.innerHTML = await response.text();
      loaded = true;
      warning.hidden = true;
    } catch (error) {
      warning.textContent = loaded ? panel.dataset.stale : panel.dataset.never;
      warning.hidden = false;
    } finally {
      setTimeout(refresh, seconds * 1000);
    }
  }
  refresh();
})();
