// Draws the report from its JSON (output/html.py) with the inlined Apache ECharts. What was drawn
// is written to #render-status as JSON ({charts: {name: {drawn, ink}}, errors, done}): the test
// reads it from headless Chromium, and a person can look at it when a chart is missing.
(function () {
  "use strict";
  const status = { charts: {}, errors: [], done: false };
  const statusEl = document.getElementById("render-status");
  const publish = () => { statusEl.textContent = JSON.stringify(status); };
  window.addEventListener("error", (event) => { status.errors.push(String(event.message)); publish(); });

  const data = JSON.parse(document.getElementById("report-data").textContent);
  const ranks = data.ranks;
  const many = ranks.length > data.many_ranks;
  const COLORS = { input: "#e0a100", h2d: "#b07cc6", forward: "#4c8bf5", backward: "#2e5cb8",
                   optimizer: "#36a57a", wait: "#9aa3b2" };
  const charts = [];

  function seconds(s) {
    s = Math.round(s);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    const two = (n) => String(n).padStart(2, "0");
    return h ? `${h}:${two(m)}:${two(r)}` : `${m}:${two(r)}`;
  }

  function bytes(b) {
    if (b === null || b === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(b) >= 1024 && i < units.length - 1) { b /= 1024; i += 1; }
    return `${b.toFixed(i >= 3 ? 2 : 0)} ${units[i]}`;
  }

  const ms = (v) => (v === null || v === undefined ? "unknown" : `${v.toFixed(1)} ms`);

  function ink(chart) {
    // drawn pixels in the chart's canvas (every 4th): a chart that rendered has some
    const canvas = chart.getDom().querySelector("canvas");
    if (!canvas) return 0;
    const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    let n = 0;
    for (let i = 3; i < pixels.length; i += 16) if (pixels[i] > 0) n += 1;
    return n;
  }

  function draw(name, option, height, hint) {
    const el = document.getElementById(`chart-${name}`);
    document.getElementById(`${name}-hint`).textContent = hint;
    if (!option) {
      el.style.display = "none";
      status.charts[name] = { drawn: false };
      return;
    }
    el.style.height = `${height}px`;
    const chart = echarts.init(el, null, { renderer: "canvas" });
    chart.setOption(Object.assign({ animation: false }, option));
    charts.push(chart);
    const rows = option.yAxis.type === "category" ? option.yAxis.data.length : null;   // ranks drawn as rows
    status.charts[name] = { drawn: true, series: option.series.length, rows, ink: ink(chart) };
    chart.on("finished", () => { status.charts[name].ink = ink(chart); publish(); });
  }

  // one rank's points [end s, start s, value] of a series, or []
  const points = (rank, key) => ((data.series[rank] || {})[key] || []);

  function overTime(key, label, format) {
    const withData = ranks.filter((r) => points(r, key).length);
    if (!withData.length) return null;
    const tooltip = { trigger: many ? "item" : "axis", confine: true };
    if (!many) {
      return {
        tooltip: Object.assign(tooltip, { valueFormatter: format }),
        legend: { type: "scroll", top: 0 },
        grid: { left: 70, right: 24, top: 40, bottom: 50 },
        xAxis: { type: "value", name: "since the first sample", nameLocation: "middle", nameGap: 28,
                 axisLabel: { formatter: seconds }, min: 0 },
        yAxis: { type: "value", name: label, axisLabel: { formatter: format } },
        series: withData.map((r, i) => ({
          name: `rank ${r}`, type: "line", showSymbol: points(r, key).length < 60, connectNulls: false,
          data: points(r, key).map((p) => [p[0], p[2]]),
          // the session's step-time change points, once (on the first rank's line)
          markLine: key === "step_ms" && i === 0 && (data.changes || []).length ? {
            symbol: "none", label: { formatter: "changed", position: "insideEndTop" },
            tooltip: { formatter: (p) => p.name },
            data: data.changes.map((c) => ({ xAxis: c[0], name: c[1] })),
          } : undefined,
        })),
      };
    }
    // a heatmap: a row per rank, a column per rollup end; each cell is the rank's rollup covering it
    const ends = [...new Set(withData.flatMap((r) => points(r, key).map((p) => p[0])))].sort((a, b) => a - b);
    const cells = [];
    let lo = Infinity, hi = -Infinity;
    ranks.forEach((r, y) => {
      const ps = points(r, key);
      let i = 0;
      ends.forEach((end, x) => {
        while (i < ps.length && ps[i][0] < end) i += 1;
        if (i < ps.length && ps[i][1] < end && ps[i][2] !== null) {
          cells.push([x, y, ps[i][2]]);
          lo = Math.min(lo, ps[i][2]);
          hi = Math.max(hi, ps[i][2]);
        }
      });
    });
    const sorted = cells.map((c) => c[2]).sort((a, b) => a - b);
    const mid = sorted.length ? sorted[Math.floor(sorted.length / 2)] : 0;
    const span = Math.max(hi - mid, mid - lo, 0.1 * Math.abs(mid), 1e-9);
    return {
      tooltip: Object.assign(tooltip, {
        formatter: (p) => `rank ${ranks[p.value[1]]} at ${seconds(ends[p.value[0]])}: ${format(p.value[2])}` }),
      grid: { left: 70, right: 24, top: 10, bottom: 80 },
      xAxis: { type: "category", data: ends.map(seconds), name: "since the first sample", nameLocation: "middle",
               nameGap: 26, splitArea: { show: false } },
      yAxis: { type: "category", data: ranks.map((r) => `rank ${r}`), inverse: true,
               axisLabel: { interval: ranks.length <= 64 ? 0 : "auto", fontSize: 10 } },
      // diverging around the median cell: typical cells are grey, slower or larger ones orange to
      // red, faster or smaller ones blue; the scale spans at least 10% of the median either way, so
      // noise of a few percent stays near grey
      visualMap: { min: mid - span, max: mid + span, calculable: true, orient: "horizontal", left: "center",
                   bottom: 0, itemHeight: 260, formatter: format,
                   inRange: { color: ["#2f6fde", "#a9c6f0", "#eceef2", "#f2b36b", "#c62828"] } },
      series: [{ name: label, type: "heatmap", data: cells, progressive: 0 }],
    };
  }

  const rowsHeight = (base) => Math.max(base, 15 * ranks.length + 130);
  const rollup = "one point per rank per 2 s (older points cover longer spans once a long session's rollups "
    + "merge in pairs)";
  const missing = "Not drawn: this needs the run's frames.msgpack (the session's rollups are rebuilt from it).";
  const hasSeries = Object.keys(data.series).length > 0;

  draw("steps", overTime("step_ms", "ms", (v) => `${Number(v).toFixed(0)} ms`),
       many ? rowsHeight(360) : 360,
       hasSeries ? `The mean step of each rank, ${rollup}. A gap: its step time could not be known there.`
                 : missing);

  // the phases of each rank's typical step, stacked
  const phaseRanks = ranks.filter((r) => data.phases[r]);
  const unit = data.phase_unit;
  const focusLabel = (r) => (r === data.focus ? `{focus|rank ${r} ◀}` : `rank ${r}`);
  draw("phases", phaseRanks.length ? {
    tooltip: { trigger: "axis", axisPointer: { type: "shadow" }, confine: true,
               valueFormatter: (v) => (unit === "ms" ? `${v.toFixed(1)} ms` : `${v.toFixed(1)}%`) },
    legend: { top: 0 },
    grid: { left: 90, right: 24, top: 36, bottom: 40 },
    xAxis: { type: "value", name: unit === "ms" ? "ms per typical step" : "% of the step", nameLocation: "middle",
             nameGap: 26, max: unit === "%" ? 100 : null },
    yAxis: { type: "category", data: phaseRanks, inverse: true,
             axisLabel: { interval: 0, fontSize: phaseRanks.length > 32 ? 10 : 12, formatter: focusLabel,
                          rich: { focus: { fontWeight: "bold", color: "#c62828" } } } },
    series: data.phases_order.map((phase) => ({
      name: phase, type: "bar", stack: "step", color: COLORS[phase], barMaxWidth: 28,
      data: phaseRanks.map((r) => Number((data.phases[r][phase] || 0).toFixed(2))),
    })),
  } : null, rowsHeight(260),
  phaseRanks.length
    ? (unit === "ms" ? "Time per typical step in each phase, over the detailed window."
                     : "Share of the step in each phase (the step time is not known, so no milliseconds).")
      + (data.focus !== null ? ` ◀ marks rank ${data.focus}, which the diagnosis names.` : "")
    : "No rank completed a step in the detailed window.");

  // memory: GPU memory where NVML read the ranks' processes, else host RSS with the DataLoader workers
  const gpu = data.memory_source === "gpu" && ranks.some((r) => points(r, "gpu_bytes").length);
  draw("memory", overTime(gpu ? "gpu_bytes" : "rss_bytes", gpu ? "GPU memory" : "RSS", bytes),
       many ? rowsHeight(360) : 360,
       hasSeries ? `${gpu ? "The GPU memory of each rank's processes (NVML)" : "The host RSS of each rank's process "
                   + "with its DataLoader workers"}: the peak in each rollup, ${rollup}.` : missing);

  // hot frames of a chosen rank, a table per phase
  const select = document.getElementById("hot-rank");
  const tables = document.getElementById("hot-tables");
  const hotRanks = ranks.filter((r) => data.hot[r] && Object.keys(data.hot[r]).length);
  function showHot(rank) {
    tables.replaceChildren();
    const byPhase = data.hot[rank] || {};
    for (const phase of data.phases_order) {
      const rows = byPhase[phase];
      if (!rows || !rows.length) continue;
      const h = document.createElement("h3");
      h.textContent = phase;
      const table = document.createElement("table");
      const head = table.insertRow();
      for (const title of ["share of phase", "time", "frame", "called from"]) {
        const th = document.createElement("th");
        th.textContent = title;
        head.appendChild(th);
      }
      for (const [frame, via, share, msTotal] of rows) {
        const row = table.insertRow();
        const cells = [[`${(100 * share).toFixed(1)}%`, "num"], [ms(msTotal), "num"], [frame, "frame"],
                       [via || "", "via"]];
        for (const [text, cls] of cells) {
          const td = row.insertCell();
          td.textContent = text;
          td.className = cls;
        }
      }
      tables.append(h, table);
    }
  }
  for (const r of hotRanks) {
    const option = document.createElement("option");
    option.value = r;
    option.textContent = r;
    select.appendChild(option);
  }
  if (hotRanks.length) {
    select.value = hotRanks.includes(data.focus) ? data.focus : hotRanks[0];
    select.addEventListener("change", () => showHot(select.value));
    showHot(select.value);
  } else {
    tables.textContent = "No hot frames: no phase was sampled in the detailed window.";
  }
  status.hot_tables = tables.querySelectorAll("table").length;

  window.addEventListener("resize", () => charts.forEach((c) => c.resize()));
  status.done = true;
  document.body.dataset.rendered = String(charts.length);
  publish();
})();
