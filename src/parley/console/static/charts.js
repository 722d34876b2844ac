// Inline SVG charts (no library): stacked columns per day and lines. Every chart carries a title and a
// description for screen readers; the pages put the same figures in a table beside it.
import { s } from "./ui.js";

const W = 640, H = 220, PAD = { left: 44, right: 12, top: 12, bottom: 36 };

function niceMax(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 4, 8, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function frame(title, description, max, labels) {
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": title });
  svg.append(s("title", { text: title }), s("desc", { text: description }));
  const plotH = H - PAD.top - PAD.bottom;
  for (let i = 0; i <= 4; i += 1) {
    const y = PAD.top + plotH - (plotH * i) / 4;
    svg.append(
      s("line", { x1: PAD.left, x2: W - PAD.right, y1: y, y2: y, class: "grid" }),
      s("text", { x: PAD.left - 6, y: y + 4, class: "axis", "text-anchor": "end", text: formatTick((max * i) / 4) }),
    );
  }
  const step = (W - PAD.left - PAD.right) / Math.max(labels.length, 1);
  const every = Math.max(1, Math.ceil(labels.length / 10));
  labels.forEach((label, i) => {
    if (i % every) return;
    svg.append(s("text", { x: PAD.left + step * (i + 0.5), y: H - PAD.bottom + 16, class: "axis", "text-anchor": "middle", text: label }));
  });
  return { svg, plotH, step };
}

function formatTick(value) {
  return value >= 1000 ? `${Math.round(value / 100) / 10}k` : String(Math.round(value * 10) / 10);
}

/** series: [{key, label, cls}], rows: [{label, values: {key: number}}] */
export function stackedBars(title, description, series, rows) {
  const totals = rows.map((row) => series.reduce((sum, item) => sum + (row.values[item.key] || 0), 0));
  const max = niceMax(Math.max(0, ...totals));
  const { svg, plotH, step } = frame(title, description, max, rows.map((row) => row.label));
  const width = Math.min(40, step * 0.7);
  rows.forEach((row, i) => {
    let y = PAD.top + plotH;
    const x = PAD.left + step * i + (step - width) / 2;
    for (const item of series) {
      const value = row.values[item.key] || 0;
      if (!value) continue;
      const height = (plotH * value) / max;
      y -= height;
      const rect = s("rect", { x, y, width, height, class: `bar ${item.cls}` });
      rect.append(s("title", { text: `${row.label}: ${item.label} ${value}` }));
      svg.append(rect);
    }
  });
  return withLegend(svg, series);
}

/** series: [{key, label, cls}], rows as above; missing values break the line. */
export function lines(title, description, series, rows) {
  const all = rows.flatMap((row) => series.map((item) => row.values[item.key])).filter((v) => v !== null && v !== undefined);
  const max = niceMax(Math.max(0, ...all));
  const { svg, plotH, step } = frame(title, description, max, rows.map((row) => row.label));
  for (const item of series) {
    let d = "";
    let pen = false;
    rows.forEach((row, i) => {
      const value = row.values[item.key];
      if (value === null || value === undefined) { pen = false; return; }
      const x = PAD.left + step * (i + 0.5);
      const y = PAD.top + plotH - (plotH * value) / max;
      d += `${pen ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)} `;
      pen = true;
      const dot = s("circle", { cx: x, cy: y, r: 3, class: `dot ${item.cls}` });
      dot.append(s("title", { text: `${row.label}: ${item.label} ${Math.round(value)}` }));
      svg.append(dot);
    });
    svg.append(s("path", { d: d.trim(), class: `line ${item.cls}` }));
  }
  return withLegend(svg, series);
}

function withLegend(svg, series) {
  const legend = document.createElement("ul");
  legend.className = "legend";
  for (const item of series) {
    const entry = document.createElement("li");
    const swatch = document.createElement("span");
    swatch.className = `swatch ${item.cls}`;
    swatch.setAttribute("aria-hidden", "true");
    entry.append(swatch, document.createTextNode(item.label));
    legend.append(entry);
  }
  const figure = document.createElement("figure");
  figure.className = "chart-figure";
  figure.append(svg, legend);
  return figure;
}

/** Horizontal bars, one per row: [{label, value, cls}] in milliseconds. */
export function hbars(title, rows) {
  const max = niceMax(Math.max(1, ...rows.map((r) => r.value || 0)));
  const rowH = 22, left = 90, width = 420;
  const svg = s("svg", { viewBox: `0 0 ${left + width + 70} ${rowH * rows.length + 8}`, class: "chart hbars", role: "img", "aria-label": title });
  svg.append(s("title", { text: title }));
  rows.forEach((row, i) => {
    const y = 4 + i * rowH;
    const w = row.value ? (width * row.value) / max : 0;
    svg.append(
      s("text", { x: left - 8, y: y + 14, class: "axis", "text-anchor": "end", text: row.label }),
      s("rect", { x: left, y: y + 3, width: Math.max(w, 1), height: rowH - 8, class: `bar ${row.cls || ""}` }),
      s("text", { x: left + w + 6, y: y + 14, class: "axis", text: row.value === null || row.value === undefined ? "–" : `${Math.round(row.value)} ms` }),
    );
  });
  return svg;
}
