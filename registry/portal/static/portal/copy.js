/* Copy buttons: <button class="copy" data-copy="ID"> copies the text of the element with that id
   and says so in the status next to it (no framework; the text stays selectable without it). */
"use strict";
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button.copy[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source) return;
  const status = button.parentElement.querySelector(".copied");
  const say = (text) => { if (status) status.textContent = text; };
  try {
    await navigator.clipboard.writeText(source.textContent);
    say("Copied.");
  } catch (error) {
    // No clipboard access (an insecure origin, a refusal): select it for the person to copy.
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    say("Selected: press Ctrl+C (or Cmd+C) to copy.");
  }
});
