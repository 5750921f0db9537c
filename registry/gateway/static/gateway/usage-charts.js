/* The usage dashboard's charts over time, drawn with uPlot (vendor/uplot, served from our own
   static files): calls and errors per bin as bars, p50 and p95 latency as lines. The data is the
   report's series, handed over by the page with json_script (#usage-series). Each chart takes
   its box's width and follows it when the window is resized. Without script the numbers table
   (#usage-numbers) is what the page shows; once the charts are drawn it folds away. */
"use strict";
(() => {
  const source = document.getElementById("usage-series");
  if (!source || typeof uPlot !== "function") return;
  const data = JSON.parse(source.textContent);
  const style = getComputedStyle(document.documentElement);
  const ink = style.getPropertyValue("--body-fg").trim() || "#333";
  const hairline = style.getPropertyValue("--hairline-color").trim() || "#e8e8e8";
  const HEIGHT = 200;
  const when = data.step >= 86400 ? "{YYYY}-{MM}-{DD} UTC" : "{YYYY}-{MM}-{DD} {HH}:{mm} UTC";
  const utc = (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC");
  const day = uPlot.fmtDate("{MM}-{DD}");
  const clock = uPlot.fmtDate("{HH}:{mm}");
  // 24-hour UTC times on the x axis; a date where a day starts (every tick for daily bins).
  const tick = (ts) => {
    const date = utc(ts);
    return data.step >= 86400 || (date.getHours() === 0 && date.getMinutes() === 0)
      ? day(date)
      : clock(date);
  };
  const count = (u, value) => (value == null ? "-" : String(value));
  const ms = (u, value) =>
    value == null ? "-" : value < 10000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(1)} s`;
  const msTick = (v) => (v < 1000 ? `${Math.round(v)} ms` : `${+(v / 1000).toFixed(2)} s`);
  const fromZero = (u, min, max) => [0, max > 0 ? max * 1.1 : 1];
  // Half a bin either side, so the first and last bars are whole.
  const wholeBins = (u, min, max) => [min - data.step / 2, max + data.step / 2];
  const axis = (extra) => ({
    stroke: ink,
    grid: { stroke: hairline, width: 1 },
    ticks: { stroke: hairline, width: 1 },
    ...extra,
  });
  const bars = () => uPlot.paths.bars({ size: [0.7, 40] });

  const charts = [
    {
      box: "usage-chart-calls",
      series: [
        { label: "Calls", stroke: "#417690", fill: "#79aec8", paths: bars(), points: { show: false }, value: count },
        { label: "Errors", stroke: "#ba2121", fill: "#ba2121", paths: bars(), points: { show: false }, value: count },
      ],
      values: [data.calls, data.errors],
      y: { values: (u, ticks) => ticks.map((v) => (Number.isInteger(v) ? String(v) : "")) },
    },
    {
      box: "usage-chart-latency",
      series: [
        { label: "p50", stroke: "#79aec8", width: 2, value: ms },
        { label: "p95", stroke: "#417690", width: 2, value: ms },
      ],
      values: [data.p50, data.p95],
      y: { values: (u, ticks) => ticks.map(msTick) },
    },
  ];

  // Shown only with script (the table below stands in without it), before the boxes are measured.
  const area = document.getElementById("usage-charts");
  if (area) area.hidden = false;
  let drawn = 0;
  for (const chart of charts) {
    const box = document.getElementById(chart.box);
    if (!box) continue;
    const plot = new uPlot(
      {
        width: box.clientWidth,
        height: HEIGHT,
        tzDate: utc,
        scales: { x: { time: true, range: wholeBins }, y: { range: fromZero } },
        axes: [axis({ values: (u, ticks) => ticks.map(tick) }), axis({ ...chart.y, size: 64 })],
        series: [{ label: "Time", value: when }, ...chart.series],
        legend: { live: true },
        hooks: {
          draw: [
            (u) => {
              box.dataset.points = String(u.data[0].length);
              box.dataset.drawn = String(Number(box.dataset.drawn || 0) + 1);
            },
          ],
        },
      },
      [data.t, ...chart.values],
      box,
    );
    // Follow the box's width (the window, the flex wrap); only a change of width redraws.
    let width = box.clientWidth;
    new ResizeObserver(() => {
      if (box.clientWidth === width) return;
      width = box.clientWidth;
      requestAnimationFrame(() => plot.setSize({ width, height: HEIGHT }));
    }).observe(box);
    drawn += 1;
  }
  const numbers = document.getElementById("usage-numbers");
  if (drawn && numbers) numbers.open = false;
})();
