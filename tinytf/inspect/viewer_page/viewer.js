/* tinytf attention viewer: draws the data of the JSON element #tinytf-data (written by
 * tinytf/inspect/viewer.py) as SVG.
 *
 *   head view   queries left, keys right; a line per (head, query, key) whose opacity is
 *               the weight, one colour per head; hover a token for its lines only
 *   model view  a small heatmap per attention and head; a click opens it large
 *
 * Plain DOM calls, no framework, no network. Tokens are user text: they only ever go
 * into textContent or an attribute set through the DOM, never into innerHTML, so a token
 * such as "<img src=x onerror=...>" is shown as the text it is.
 *
 * Weights arrive as integers (weight * weights_scale); each query row stops at its last
 * non-zero weight, the rest being 0.
 */
"use strict";

(function () {
  const SVG_NS = "http://www.w3.org/2000/svg";
  const data = JSON.parse(document.getElementById("tinytf-data").textContent);
  const SCALE = data.weights_scale;
  const MIN_LINE = data.min_line; // lighter lines (same integer units) would be invisible: not drawn
  const TOKEN_FONT = '13px ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace';
  const MAX_TOKEN_CHARS = 40; // longer tokens are cut with "…" (the whole token in a tooltip)
  const ROW = 20; // head view: px per token row
  const GAP = 300; // head view: px between the query and key columns, where the lines go
  const THUMB = 72; // model view: px of a small heatmap's longer side
  // Ten distinct head colours (matplotlib's "tab10"); more heads get evenly spread hues.
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];
  // The heatmap colour ramp, white to dark blue (as the PNG figures' "Blues").
  const RAMP = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];

  const maps = data.attention;
  const modelHeads = Math.max(1, ...maps.map((m) => m.first_head + m.weights.length));
  const hiddenHeads = new Set(); // indices into the current map's heads, kept across maps
  let current = 0; // the map the head view shows

  // ---- small helpers

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svgEl(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function weightAt(row, k) {
    return k < row.length ? row[k] : 0;
  }

  function fmt(weight) {
    return (weight / SCALE).toFixed(3);
  }

  function headColour(modelHead) {
    if (modelHeads <= PALETTE.length) return PALETTE[modelHead];
    return `hsl(${Math.round((modelHead * 360) / modelHeads)}, 68%, 44%)`;
  }

  function shade(weight) {
    const t = Math.min(Math.max(weight / SCALE, 0), 1) * (RAMP.length - 1);
    const i = Math.min(Math.floor(t), RAMP.length - 2);
    const f = t - i;
    return RAMP[i].map((c, j) => Math.round(c + f * (RAMP[i + 1][j] - c)));
  }

  function shown(token) {
    return token.length > MAX_TOKEN_CHARS ? token.slice(0, MAX_TOKEN_CHARS - 1) + "…" : token;
  }

  const measure = document.createElement("canvas").getContext("2d");
  function widest(tokens, heading = "") {
    measure.font = `bold ${TOKEN_FONT}`;
    const headingWidth = measure.measureText(heading).width;
    measure.font = TOKEN_FONT;
    return Math.ceil(Math.max(24, headingWidth, ...tokens.map((t) => measure.measureText(shown(t)).width)));
  }

  function headInfo(map, h) {
    return data.heads[`${map.name}.${map.first_head + h}`]; // undefined without head scores
  }

  function sidesText(map) {
    return `${map.query_side} → ${map.key_side}`; // which sequence the queries and the keys read
  }

  // ---- the header: title, facts, tokens, note

  function drawHeader() {
    document.getElementById("title").textContent = data.title;
    const facts = document.getElementById("facts");
    const add = (name, value) => {
      facts.append(el("dt", {}, name));
      const dd = el("dd");
      if (Array.isArray(value)) {
        dd.className = "tokens";
        for (const token of value) dd.append(el("span", { class: "tok" }, token));
      } else {
        dd.textContent = value;
      }
      facts.append(dd);
    };
    for (const [name, value] of data.facts) add(name, value);
    if (data.source_tokens !== null) add("source tokens", data.source_tokens);
    add(data.source_tokens !== null ? "target tokens" : "tokens", data.tokens);
    // The facts may name the answer already: the model's ("answer") or one imposed with --target.
    const named = data.facts.some(([name]) => name === "answer" || name.startsWith("target"));
    if (data.answer !== null && !named) add("answer", data.answer.join(" "));
    if (data.note) {
      const note = document.getElementById("note");
      note.textContent = data.note;
      note.hidden = false;
    }
    document.getElementById("heads-note").textContent = data.heads_note || "";
  }

  // ---- head view

  function fillSelect() {
    const select = document.getElementById("attention-select");
    maps.forEach((map, i) => select.append(el("option", { value: String(i) }, `${map.name}  (${sidesText(map)})`)));
    select.addEventListener("change", () => {
      current = Number(select.value);
      drawHeadTable();
      drawHeadView();
    });
  }

  function drawHeadTable() {
    const map = maps[current];
    const table = document.getElementById("head-table");
    table.replaceChildren();
    const scored = map.weights.some((_, h) => headInfo(map, h));
    const header = el("tr");
    header.append(el("th", {}, "head"));
    if (scored) {
      header.append(el("th", { class: "label" }, "label"));
      for (const pattern of data.patterns) header.append(el("th", {}, pattern));
      header.append(el("th", { title: "nats: 0 = one key, log T = spread evenly" }, "entropy"));
    }
    table.append(header);
    map.weights.forEach((_, h) => {
      const modelHead = map.first_head + h;
      const row = el("tr");
      const cell = el("td");
      const box = el("input", { type: "checkbox", id: `head-${h}`, "data-head": String(h) });
      box.checked = !hiddenHeads.has(h);
      box.addEventListener("change", () => {
        if (box.checked) hiddenHeads.delete(h);
        else hiddenHeads.add(h);
        drawHeadView();
      });
      const label = el("label", { for: `head-${h}` });
      const swatch = el("span", { class: "swatch" });
      swatch.style.background = headColour(modelHead);
      label.append(swatch, document.createTextNode(`head ${modelHead}`));
      cell.append(box, label);
      row.append(cell);
      const info = headInfo(map, h);
      if (scored) {
        row.append(el("td", { class: "label" }, info ? info.label : ""));
        for (const pattern of data.patterns) {
          const score = info ? info.scores[pattern] : null;
          const td = el("td", {}, score === null || score === undefined ? "–" : score.toFixed(2));
          if (score === null || score === undefined) td.className = "off";
          else td.style.background = `rgba(33, 113, 181, ${(0.45 * score).toFixed(3)})`;
          row.append(td);
        }
        row.append(el("td", {}, info ? info.entropy.toFixed(2) : ""));
      }
      table.append(row);
    });
  }

  function setAllHeads(on) {
    maps[current].weights.forEach((_, h) => (on ? hiddenHeads.delete(h) : hiddenHeads.add(h)));
    drawHeadTable();
    drawHeadView();
  }

  function drawHeadView() {
    const map = maps[current];
    const view = document.getElementById("head-view");
    view.replaceChildren();
    view.style.font = TOKEN_FONT;
    const queries = map.query_tokens;
    const keys = map.key_tokens;
    const pad = 10;
    const queryHeading = `queries (${map.query_side})`;
    const keyHeading = `keys (${map.key_side})`;
    const left = widest(queries, queryHeading) + 2 * pad; // the query column, right-aligned at its edge
    const right = widest(keys, keyHeading) + 2 * pad;
    const top = 30; // the column headings
    const x0 = left; // where lines start
    const x1 = left + GAP; // where lines end
    const rows = Math.max(queries.length, keys.length);
    view.setAttribute("width", String(left + GAP + right));
    view.setAttribute("height", String(top + rows * ROW + 10));
    const y = (i) => top + i * ROW + ROW / 2;

    view.append(svgEl("text", { class: "heading", x: x0 - pad, y: 18, "text-anchor": "end" }, queryHeading));
    view.append(svgEl("text", { class: "heading", x: x1 + pad, y: 18 }, keyHeading));

    // The lines, indexed by query and by key so that hovering a token finds its own at once.
    const lines = svgEl("g", { class: "lines" });
    const byQuery = queries.map(() => []);
    const byKey = keys.map(() => []);
    map.weights.forEach((rowsOfHead, h) => {
      if (hiddenHeads.has(h)) return;
      const colour = headColour(map.first_head + h);
      rowsOfHead.forEach((row, q) => {
        row.forEach((w, k) => {
          if (w < MIN_LINE) return;
          const line = svgEl("line", {
            x1: x0, y1: y(q), x2: x1, y2: y(k), stroke: colour, "stroke-opacity": (w / SCALE).toFixed(3),
            "data-head": String(h), "data-q": String(q), "data-k": String(k),
          });
          byQuery[q].push(line);
          byKey[k].push(line);
          lines.append(line);
        });
      });
    });
    view.append(lines);

    const tokenRow = (token, i, side) => {
      const g = svgEl("g", { class: `token ${side}`, "data-index": String(i) });
      const x = side === "query" ? 0 : x1;
      const width = side === "query" ? left : right;
      g.append(svgEl("rect", { x, y: top + i * ROW, width, height: ROW, rx: 3 }));
      const text = side === "query"
        ? svgEl("text", { x: x0 - pad, y: y(i), "text-anchor": "end", "dominant-baseline": "central" }, shown(token))
        : svgEl("text", { x: x1 + pad, y: y(i), "dominant-baseline": "central" }, shown(token));
      g.append(text);
      if (shown(token) !== token) g.append(svgEl("title", {}, token));
      g.addEventListener("mouseenter", () => focus(g, side === "query" ? byQuery[i] : byKey[i], side, i));
      g.addEventListener("mouseleave", () => unfocus(g));
      return g;
    };
    const tokens = svgEl("g", { class: "tokens" });
    queries.forEach((token, i) => tokens.append(tokenRow(token, i, "query")));
    keys.forEach((token, i) => tokens.append(tokenRow(token, i, "key")));
    view.append(tokens);

    function focus(g, own, side, i) {
      lines.classList.add("focused");
      for (const line of own) line.classList.add("on");
      g.classList.add("active");
      describeToken(map, side, i);
    }
    function unfocus(g) {
      lines.classList.remove("focused");
      for (const line of lines.querySelectorAll("line.on")) line.classList.remove("on");
      g.classList.remove("active");
    }
    resetTokenInfo();
  }

  function resetTokenInfo() {
    const info = document.getElementById("token-info");
    info.replaceChildren(el("span", { class: "help" }, "Hover a token: its strongest weights in each shown head appear here."));
  }

  // The hovered token's strongest weights per shown head: the keys a query reads most, or
  // the queries that read a key most.
  function describeToken(map, side, i) {
    const info = document.getElementById("token-info");
    const own = side === "query" ? map.query_tokens : map.key_tokens;
    const other = side === "query" ? map.key_tokens : map.query_tokens;
    info.replaceChildren(el("div", {}, `${side} ${i} “${own[i]}” ${side === "query" ? "reads" : "is read by"}:`));
    map.weights.forEach((rowsOfHead, h) => {
      if (hiddenHeads.has(h)) return;
      const weights = side === "query"
        ? other.map((_, k) => weightAt(rowsOfHead[i], k))
        : other.map((_, q) => weightAt(rowsOfHead[q], i));
      const top = weights.map((w, j) => [w, j]).filter(([w]) => w > 0).sort((a, b) => b[0] - a[0]).slice(0, 4);
      const line = el("div", { class: "top" });
      const swatch = el("span", { class: "swatch" });
      swatch.style.background = headColour(map.first_head + h);
      const about = headInfo(map, h);
      line.append(swatch, el("b", {}, `head ${map.first_head + h}${about ? " · " + about.label : ""}: `));
      for (const [w, j] of top) line.append(el("span", { class: "pair" }, `${other[j]} ${fmt(w)}`));
      if (top.length === 0) line.append(el("span", { class: "off" }, "nothing"));
      info.append(line);
    });
  }

  // ---- model view

  function paint(canvas, rowsOfHead, nq, nk) {
    canvas.width = nk;
    canvas.height = nq;
    const context = canvas.getContext("2d");
    const image = context.createImageData(nk, nq);
    for (let q = 0; q < nq; q++) {
      for (let k = 0; k < nk; k++) {
        const [r, g, b] = shade(weightAt(rowsOfHead[q], k));
        const at = 4 * (q * nk + k);
        image.data[at] = r;
        image.data[at + 1] = g;
        image.data[at + 2] = b;
        image.data[at + 3] = 255;
      }
    }
    context.putImageData(image, 0, 0);
    const scale = THUMB / Math.max(nq, nk);
    canvas.style.width = `${Math.max(1, Math.round(nk * scale))}px`;
    canvas.style.height = `${Math.max(1, Math.round(nq * scale))}px`;
  }

  function drawModelView() {
    const grid = document.getElementById("model-grid");
    const columns = Math.max(...maps.map((m) => m.weights.length));
    const header = el("tr");
    header.append(el("th"));
    for (let h = 0; h < columns; h++) header.append(el("th", {}, `head ${maps[0].first_head + h}`));
    grid.append(header);
    maps.forEach((map, m) => {
      const row = el("tr", { "data-attention": map.name });
      const name = el("th", { class: "row" }, map.name);
      name.append(el("span", { class: "sides" }, sidesText(map)));
      row.append(name);
      map.weights.forEach((rowsOfHead, h) => {
        const about = headInfo(map, h);
        const button = el("button", { type: "button", class: "thumb", "data-attention": map.name, "data-head": String(h) });
        button.title = `${map.name} head ${map.first_head + h}` + (about ? ` · ${about.label}` : "") + ": click to enlarge";
        const box = el("span", { class: "box" });
        const canvas = el("canvas");
        paint(canvas, rowsOfHead, map.query_tokens.length, map.key_tokens.length);
        box.append(canvas);
        button.append(box, el("span", { class: "caption" }, about ? about.label : `head ${map.first_head + h}`));
        button.addEventListener("click", () => openMap(m, h));
        const cell = el("td");
        cell.append(button);
        row.append(cell);
      });
      grid.append(row);
    });
  }

  // ---- one heatmap, large, in a dialog

  function openMap(m, h) {
    const map = maps[m];
    const about = headInfo(map, h);
    const rowsOfHead = map.weights[h];
    const queries = map.query_tokens;
    const keys = map.key_tokens;
    document.getElementById("map-title").textContent =
      `${map.name} · head ${map.first_head + h}${about ? " · " + about.label : ""}  (${sidesText(map)})`;
    const info = document.getElementById("map-info");
    info.textContent = "Point at a cell to read its weight.";

    const scores = document.getElementById("map-scores");
    scores.replaceChildren();
    if (about) {
      const names = el("tr");
      const values = el("tr");
      for (const pattern of data.patterns) {
        names.append(el("th", {}, pattern));
        const s = about.scores[pattern];
        values.append(el("td", s === null || s === undefined ? { class: "off" } : {}, s === null || s === undefined ? "–" : s.toFixed(3)));
      }
      names.append(el("th", {}, "entropy"), el("th", { class: "label" }, "label"));
      values.append(el("td", {}, about.entropy.toFixed(3)), el("td", { class: "label" }, about.label));
      scores.append(names, values);
    }

    const view = document.getElementById("map-view");
    view.replaceChildren();
    view.style.font = TOKEN_FONT;
    const cell = Math.max(16, Math.min(34, Math.floor(600 / Math.max(queries.length, keys.length))));
    const left = widest(queries) + 14;
    const top = widest(keys) + 14; // key labels are written upwards
    view.setAttribute("width", String(left + keys.length * cell + 8));
    view.setAttribute("height", String(top + queries.length * cell + 8));

    const rowLabels = queries.map((token, q) => {
      const label = svgEl("text", { class: "label", x: left - 6, y: top + q * cell + cell / 2,
        "text-anchor": "end", "dominant-baseline": "central" }, shown(token));
      view.append(label);
      return label;
    });
    const columnLabels = keys.map((token, k) => {
      const x = left + k * cell + cell / 2;
      const label = svgEl("text", { class: "label", x, y: top - 6, transform: `rotate(-90 ${x} ${top - 6})`,
        "dominant-baseline": "central" }, shown(token));
      view.append(label);
      return label;
    });

    const cells = svgEl("g", { class: "cells" });
    queries.forEach((_, q) => {
      keys.forEach((_, k) => {
        const [r, g, b] = shade(weightAt(rowsOfHead[q], k));
        cells.append(svgEl("rect", { class: "cell", x: left + k * cell, y: top + q * cell, width: cell, height: cell,
          fill: `rgb(${r},${g},${b})`, "data-q": String(q), "data-k": String(k) }));
      });
    });
    view.append(cells);

    let active = [];
    cells.addEventListener("mouseover", (event) => {
      const target = event.target;
      if (!target.dataset || target.dataset.q === undefined) return;
      const q = Number(target.dataset.q);
      const k = Number(target.dataset.k);
      for (const label of active) label.classList.remove("active");
      active = [rowLabels[q], columnLabels[k]];
      for (const label of active) label.classList.add("active");
      info.textContent = `query ${q} “${queries[q]}” → key ${k} “${keys[k]}”: ${fmt(weightAt(rowsOfHead[q], k))}`;
    });

    const dialog = document.getElementById("map-dialog");
    if (!dialog.open) dialog.showModal();
  }

  // ---- start

  drawHeader();
  fillSelect();
  drawHeadTable();
  drawHeadView();
  drawModelView();
  document.getElementById("heads-all").addEventListener("click", () => setAllHeads(true));
  document.getElementById("heads-none").addEventListener("click", () => setAllHeads(false));
  document.getElementById("map-close").addEventListener("click", () => document.getElementById("map-dialog").close());
  document.body.dataset.ready = "true"; // for tests and scripts: everything is drawn
})();
