// A flow's graph as SVG, laid out in layers: the start node on top, each node one layer below the
// first node that reaches it (breadth first); nodes nobody reaches go last. Edges that go back up or
// sideways are drawn as curves on the right so they never hide under a node.
import { s } from "./ui.js";

const BOX_W = 168, BOX_H = 50, GAP_X = 36, GAP_Y = 64, MARGIN = 24;

export function layers(nodes, edges) {
  const start = (nodes.find((n) => n.is_start) || nodes[0] || {}).id;
  const depth = new Map();
  if (start !== undefined) depth.set(start, 0);
  const queue = start === undefined ? [] : [start];
  while (queue.length) {
    const id = queue.shift();
    for (const edge of edges) {
      if (edge.from === id && !depth.has(edge.to)) {
        depth.set(edge.to, depth.get(id) + 1);
        queue.push(edge.to);
      }
    }
  }
  const deepest = Math.max(-1, ...depth.values());
  const rows = [];
  for (const node of nodes) {
    const level = depth.has(node.id) ? depth.get(node.id) : deepest + 1;
    (rows[level] = rows[level] || []).push(node);
  }
  return rows.filter(Boolean);
}

export function flowGraph(full, title) {
  const rows = layers(full.nodes, full.edges);
  const widest = Math.max(1, ...rows.map((row) => row.length));
  const width = MARGIN * 2 + widest * BOX_W + (widest - 1) * GAP_X + 60;
  const height = MARGIN * 2 + rows.length * BOX_H + (rows.length - 1) * GAP_Y;
  const place = new Map();
  rows.forEach((row, level) => {
    const rowWidth = row.length * BOX_W + (row.length - 1) * GAP_X;
    const left = (width - 60 - rowWidth) / 2;
    row.forEach((node, i) => {
      place.set(node.id, { x: left + i * (BOX_W + GAP_X), y: MARGIN + level * (BOX_H + GAP_Y), level });
    });
  });

  const svg = s("svg", {
    viewBox: `0 0 ${width} ${height}`, class: "flow-graph", role: "img", "aria-label": title,
    width, height,
  });
  svg.append(s("title", { text: title }));
  const defs = s("defs", {}, s("marker", {
    id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse",
  }, s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow-head" })));
  svg.append(defs);

  const edgeLayer = s("g", { class: "edges" });
  const labelLayer = s("g", { class: "edge-labels" });
  full.edges.forEach((edge, index) => {
    const a = place.get(edge.from), b = place.get(edge.to);
    if (!a || !b) return;
    let d, lx, ly;
    if (b.level > a.level) {
      const x1 = a.x + BOX_W / 2, y1 = a.y + BOX_H, x2 = b.x + BOX_W / 2, y2 = b.y;
      const my = (y1 + y2) / 2;
      d = `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2 - 2}`;
      lx = (x1 + x2) / 2; ly = my - 3;
    } else {
      // back or sideways: out of the right side, around, into the target's right side
      const x1 = a.x + BOX_W, y1 = a.y + BOX_H / 2, x2 = b.x + BOX_W, y2 = b.y + BOX_H / 2;
      const bulge = Math.max(x1, x2) + 30 + (index % 3) * 10;
      d = `M${x1},${y1} C${bulge},${y1} ${bulge},${y2} ${x2 + 2},${y2}`;
      lx = bulge - 4; ly = (y1 + y2) / 2;
    }
    edgeLayer.append(s("path", { d, class: `edge edge-${edge.kind}`, "marker-end": "url(#arrow)" }));
    const label = edge.kind === "next" ? "" : (edge.label || edge.kind);
    if (label) {
      labelLayer.append(s("text", { x: lx, y: ly, class: "edge-label", "text-anchor": "middle", text: shorten(label, 28) }));
    }
  });
  svg.append(edgeLayer);

  for (const node of full.nodes) {
    const at = place.get(node.id);
    const group = s("g", { class: `node node-${node.type}${node.is_start ? " start" : ""}${node.reachable ? "" : " unreachable"}`, transform: `translate(${at.x},${at.y})` });
    group.append(
      s("rect", { width: BOX_W, height: BOX_H, rx: 8, ry: 8 }),
      s("text", { x: 12, y: 20, class: "node-id", text: shorten(node.label || node.id, 22) }),
      s("text", { x: 12, y: 38, class: "node-type", text: node.type + (node.is_start ? " · start" : "") }),
      s("title", { text: `${node.id} (${node.type})` }),
    );
    svg.append(group);
  }
  svg.append(labelLayer);
  return svg;
}

function shorten(text, max) {
  return text.length > max ? text.slice(0, max - 1) + "…" : text;
}
