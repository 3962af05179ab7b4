// The page's selectors: each chart that follows them (its layout.meta.select names the keys)
// holds the traces of every choice, each trace's meta naming its choice by option index; the
// selected choice's traces are shown, the others hidden, and the title set to the choice's.
(function () {
  const state = {};
  function apply(div) {
    const meta = div.layout && div.layout.meta;
    if (!meta || !meta.select) return;
    const key = meta.select.map((k) => state[k] || "0").join("|");
    const visible = div.data.map((t) => {
      const m = t.meta || {};
      const mine = meta.select.map((k) => String(m[k])).join("|");
      return mine === key ? (m.on === undefined ? true : m.on) : false;
    });
    Plotly.update(div, { visible: visible }, { "title.text": meta.titles[key] || "" });
  }
  function applyAll() {
    document.querySelectorAll(".js-plotly-plot").forEach(apply);
  }
  let restored = false;
  document.querySelectorAll("select[data-select]").forEach((sel) => {
    state[sel.dataset.select] = sel.value;
    const drawn = [...sel.options].find((o) => o.defaultSelected) || sel.options[0];
    restored = restored || sel.value !== drawn.value; // a reload keeps the last selection
    sel.addEventListener("change", () => {
      state[sel.dataset.select] = sel.value;
      applyAll();
    });
  });
  if (restored) applyAll();
  // A chart inside a closed <details> is drawn when it is first opened (figures.py's
  // defer); one drawn there before has no width until then, and is sized.
  document.querySelectorAll("details").forEach((d) =>
    d.addEventListener("toggle", () => {
      if (!d.open) return;
      d.querySelectorAll(".plotly-deferred").forEach((div) => {
        const fig = JSON.parse(div.dataset.figure);
        div.classList.remove("plotly-deferred");
        div.style.height = "";
        Plotly.newPlot(div, fig.data, fig.layout, { responsive: true });
      });
      d.querySelectorAll(".js-plotly-plot").forEach((p) => Plotly.Plots.resize(p));
    })
  );
})();
