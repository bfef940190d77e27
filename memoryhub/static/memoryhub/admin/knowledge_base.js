// The knowledge base page (admin): imports polled until done, and confirmations asked
// by a form's data-confirm (kept out of the page so its Content-Security-Policy needs no
// inline script).
(function () {
  // Poll unfinished imports (and indexing of finished ones) until done; no dependencies.
  // The contents' counts move with them: as loaded, plus what each import created (and
  // indexed) since, so "Records" never lags behind an import's progress.
  function contents() {
    var box = document.getElementById("kb-contents");
    if (!box) return;
    var total = +box.dataset.total, pending = +box.dataset.pending, running = false;
    document.querySelectorAll("tr.import-job").forEach(function (row) {
      if (row.dataset.createdNow === undefined) return;
      var created = +row.dataset.createdNow - +row.dataset.created;
      var indexed = +row.dataset.indexedNow - +row.dataset.indexed;
      total += created; pending += created - indexed;
      running = running || row.dataset.finished !== "1" || +row.dataset.indexedNow < +row.dataset.createdNow;
    });
    document.querySelector("#kb-records a").textContent = total;
    document.querySelector("#kb-pending a").textContent = Math.max(0, pending);
    document.getElementById("kb-importing").hidden = !running;
  }
  document.querySelectorAll("tr.import-job").forEach(function (row) {
    function show(job) {
      row.querySelector(".import-status").textContent = job.status_label;
      row.querySelector(".import-summary").textContent = job.summary;
      row.dataset.createdNow = job.created; row.dataset.indexedNow = job.indexed;
      row.querySelector(".import-parsed").textContent = job.parsed;
      var bar = row.querySelector(".import-bar");
      bar.max = job.total || 1; bar.value = job.imported;
      row.querySelector(".import-count").textContent = job.imported + "/" + (job.total === null ? "?" : job.total);
      var index = row.querySelector(".index-bar");
      index.max = job.created || 1; index.value = job.indexed;
      row.querySelector(".index-count").textContent = job.indexed + "/" + job.created;
      var errors = row.querySelector(".import-errors");
      errors.textContent = Object.keys(job.errors || {}).map(function (k) { return k + ": " + job.errors[k].join("; "); }).join(" | ");
      [["cancel", job.can_cancel], ["rerun", job.can_rerun], ["undo", job.can_undo]].forEach(function (pair) {
        var button = row.querySelector(".import-" + pair[0]);
        if (button) button.style.display = pair[1] ? "" : "none";
      });
      row.dataset.finished = job.finished ? "1" : "0";
      contents();
      return job.finished && job.indexed >= job.created;
    }
    var timer = setInterval(function () {
      fetch(row.dataset.url, {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (job) {
        if (show(job)) {
          clearInterval(timer);
          if (job.receipt) location.reload();  // the receipt's link
        }
      });
    }, 1000);
  });
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
  // Arriving at an import's row (after an upload, a cancel, a run again or an undo), the
  // page scrolls to it: what was done is said above the imports, where it can be read,
  // not at the top of the page, scrolled out of view.
  var target = /^#import-\d+$/.test(window.location.hash) && document.querySelector(window.location.hash);
  var said = document.querySelector("ul.messagelist");
  if (target && said) {
    var imports = target.closest("table");
    imports.parentNode.insertBefore(said, imports);
    // After the browser's own scroll to the row, which comes once the page has loaded.
    var show = function () { said.scrollIntoView({block: "start"}); };
    if (document.readyState === "complete") setTimeout(show, 0);
    else window.addEventListener("load", function () { setTimeout(show, 0); });
  }
})();
