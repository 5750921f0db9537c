/* "Discover now" on the server page: the box #discovery-progress shows the run's state, asked of
   a small JSON endpoint (staff only) every few seconds; when the run ends the page loads again,
   showing what the discovery found. No framework; without JavaScript the box shows the state
   the page was loaded with. */
"use strict";
(() => {
  const box = document.getElementById("discovery-progress");
  if (!box || box.dataset.finished === "true") return;
  const state = box.querySelector(".discovery-state");
  const interval = Number(box.dataset.interval) || 1500;
  const poll = async () => {
    let data;
    try {
      const response = await fetch(box.dataset.statusUrl, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
      });
      // Refused, or sent to the login page (signed out meanwhile): stop asking.
      if (!response.ok || response.redirected) {
        state.textContent = "unknown (reload the page to see it)";
        return;
      }
      data = await response.json();
    } catch (error) {
      // The server did not answer (restarting, offline): ask again a little later.
      setTimeout(poll, interval * 2);
      return;
    }
    state.textContent = data.label;
    box.dataset.status = data.status;
    box.className = `discovery-${data.status}`;
    if (data.finished) {
      window.location.replace(box.dataset.doneUrl);
      return;
    }
    setTimeout(poll, interval);
  };
  setTimeout(poll, interval);
})();
