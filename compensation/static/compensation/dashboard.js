// The ops dashboard's panel on the admin index: fetch its fragment now and every few seconds,
// put it in place, and say so plainly when a refresh fails (the last figures stay, marked stale).
(function () {
  "use strict";
  const panel = document.getElementById("ops-dashboard");
  if (!panel) {
    return;
  }
  const body = panel.querySelector(".ops-dashboard-body");
  const warning = panel.querySelector(".ops-dashboard-stale");
  let seconds = 5; // until the first fragment says otherwise (data-refresh-seconds)
  let refreshedAt = null; // the server's time of the figures shown
  let timer = null;
  let busy = false; // a request is under way: never two at once

  function say(template) {
    warning.textContent = template.replace("%(time)s", refreshedAt || "–").replace("%(seconds)s", seconds);
    warning.hidden = false;
    panel.classList.add("ops-dashboard-is-stale");
  }

  async function refresh() {
    timer = null;
    busy = true;
    // A request that hangs must not stop the loop: give up after two intervals.
    const abort = new AbortController();
    const giveUp = setTimeout(() => abort.abort(), seconds * 2000);
    try {
      const response = await fetch(panel.dataset.url, {
        credentials: "same-origin", cache: "no-store", signal: abort.signal,
      });
      // Signed out: the admin answers with its login page (a redirect), or 403 without the permission.
      if (response.redirected || response.status === 403) {
        say(panel.dataset.signedOut);
        return;
      }
      if (!response.ok) {
        throw new Error(String(response.status));
      }
      const html = await response.text();
      // What the operator opened (the chart's table) stays open across refreshes.
      const open = [...body.querySelectorAll("details[data-keep]")].filter((d) => d.open).map((d) => d.dataset.keep);
      body.innerHTML = html;
      body.querySelectorAll("details[data-keep]").forEach((d) => { d.open = open.includes(d.dataset.keep); });
      const figures = body.querySelector(".ops-dash");
      if (figures) {
        refreshedAt = figures.dataset.refreshed;
        seconds = Number(figures.dataset.refreshSeconds) || seconds;
      }
      warning.hidden = true;
      panel.classList.remove("ops-dashboard-is-stale");
    } catch (error) {
      say(refreshedAt ? panel.dataset.stale : panel.dataset.never);
    } finally {
      clearTimeout(giveUp);
      busy = false;
      schedule();
    }
  }

  function schedule() {
    // A hidden tab asks for nothing; it refreshes as soon as it is shown again.
    if (timer === null && !busy && !document.hidden) {
      timer = setTimeout(refresh, seconds * 1000);
    }
  }

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && timer === null && !busy) {
      refresh();
    }
  });
  refresh();
})();
