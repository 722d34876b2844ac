// Parley playground: pick a flow, start a session, talk by microphone (WebSocket audio) or by typing.
// No framework, no build step. The token lives in this module only. The audio side (microphone,
// playback, the audio WebSocket) is voice.js, which the operator console uses too.
import { VoiceLine, audioContext } from "./voice.js";

{
  const $ = (id) => document.getElementById(id);
  const ui = {
    connectForm: $("connect-form"), token: $("token"), org: $("org"),
    sessionForm: $("session-form"), flow: $("flow"), start: $("start-session"), end: $("end-session"),
    sessionInfo: $("session-info"), mic: $("mic"), echo: $("echo"), speaking: $("speaking"),
    messageForm: $("message-form"), message: $("message"), send: $("send"),
    status: $("status"), log: $("log"), partial: $("partial"), played: $("played"),
    metrics: document.querySelector("#metrics tbody"), tools: $("tools"),
  };
  const state = { session: null, line: null };

  // --- the API ----------------------------------------------------------------------------------

  function headers(json) {
    const out = { Authorization: "Bearer " + ui.token.value.trim() };
    const org = ui.org.value.trim();
    if (org) out["X-Organization-Id"] = org;
    if (json) out["Content-Type"] = "application/json";
    return out;
  }

  async function api(method, path, body) {
    let response;
    try {
      response = await fetch(path, {
        method,
        headers: headers(body !== undefined),
        body: body === undefined ? undefined : JSON.stringify(body),
        credentials: "omit",
        cache: "no-store",
      });
    } catch (error) {
      throw new Error("The server cannot be reached.");
    }
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (error) { data = null; }
    if (!response.ok) {
      let detail = data && data.detail;
      if (Array.isArray(detail)) detail = detail.map((d) => d.msg).join("; ");
      throw new Error(`${response.status}: ${detail || response.statusText || "the request failed"}`);
    }
    return data;
  }

  // --- what the page shows -------------------------------------------------------------------

  function setStatus(text, isError) {
    ui.status.textContent = text;
    ui.status.classList.toggle("error", Boolean(isError));
  }

  function addLine(kind, text, extra) {
    const item = document.createElement("li");
    item.className = kind + (extra ? " " + extra : "");
    item.textContent = text;
    ui.log.append(item);
    ui.log.scrollTop = ui.log.scrollHeight;
    return item;
  }

  function addTool(data, nodeId) {
    const item = document.createElement("li");
    const title = document.createElement("strong");
    title.textContent = (data && (data.tool || data.name)) || nodeId || "tool";
    const body = document.createElement("pre");
    body.textContent = JSON.stringify(data, null, 2);
    item.append(title, body);
    ui.tools.append(item);
  }

  function addMetrics(event) {
    const row = document.createElement("tr");
    const cell = (value) => {
      const td = document.createElement("td");
      td.textContent = value === null || value === undefined ? "–" : String(Math.round(value));
      return td;
    };
    const turn = document.createElement("td");
    turn.textContent = String(event.turn);
    row.append(turn, cell(event.stt_final_ms), cell(event.engine_ms), cell(event.tts_first_byte_ms),
      cell(event.voice_to_voice_ms));
    row.dataset.voiceToVoice = event.voice_to_voice_ms ?? "";
    ui.metrics.append(row);
  }

  function showTurn(turn) {
    for (const event of turn.events || []) {
      if (event.type === "say" && event.text) addLine("agent", event.text);
      else if (event.type === "tool_call") addTool(event.data, event.node_id);
      else if (event.type === "transfer") addLine("note", "Transfer: " + JSON.stringify(event.data));
      else if (event.type === "signal") addLine("note", "Signal: " + ((event.data && event.data.type) || ""));
    }
    if (turn.status === "ended") sessionEnded(turn.outcome, turn.end_reason);
  }

  function controls() {
    const live = Boolean(state.session);
    ui.start.disabled = live || !ui.flow.value;
    ui.end.disabled = !live;
    ui.mic.disabled = !live;
    ui.message.disabled = !live;
    ui.send.disabled = !live;
    const on = Boolean(state.line && state.line.listening);
    ui.mic.setAttribute("aria-pressed", String(on));
    ui.mic.textContent = on ? "Stop microphone" : "Start microphone";
  }

  // --- the audio WebSocket --------------------------------------------------------------------------

  function onEvent(event) {
    switch (event.type) {
      case "speech":
        ui.speaking.hidden = !event.speaking;
        break;
      case "transcript":
        if (event.final) {
          ui.partial.textContent = "";
          addLine("caller", event.text);
        } else {
          ui.partial.textContent = event.text;
        }
        break;
      case "agent_text":
        addLine("agent", event.text);
        break;
      case "tool_call":
        addTool(event.data, event.node_id);
        break;
      case "metrics":
        addMetrics(event);
        break;
      case "interruption":
        addLine("note", "You interrupted the agent.");
        break;
      case "warning":
        addLine("note", event.detail);
        break;
      case "error":
        addLine("note", event.detail, "error");
        break;
      case "end":
        sessionEnded(event.outcome, event.reason);
        break;
      default:
        break;
    }
  }

  function onState(name, detail) {
    switch (name) {
      case "connecting": setStatus("Connecting the microphone…"); break;
      case "starting": setStatus("Starting the microphone…"); break;
      case "listening": setStatus("Listening. Speak now."); break;
      case "muted": setStatus("Microphone off. Type, or start the microphone again."); break;
      case "mic-failed":
        setStatus("Microphone: " + (detail && detail.message === "no-microphone"
          ? "This browser gives no microphone here (it needs https or localhost)." : (detail && detail.message) || detail), true);
        break;
      case "refused":
        state.line = null;
        setStatus(`The audio connection was refused (${detail}).`, true);
        break;
      case "dropped": sessionEnded("abandoned", "connection closed"); break;
      default: break;
    }
    ui.speaking.hidden = ui.speaking.hidden || !(state.line && state.line.listening);
    controls();
  }

  async function openSocket() {
    const line = new VoiceLine({
      event: onEvent,
      state: onState,
      played: (ms) => {
        ui.played.dataset.ms = String(Math.round(ms));
        ui.played.textContent = (ms / 1000).toFixed(1) + " s";
      },
      dropped: (n) => { ui.played.dataset.dropped = String(n); },
    }, { echo: ui.echo.checked });
    state.line = line;
    try {
      await audioContext();  // inside the click: browsers only start audio after a gesture
      const grant = await api("POST", `/api/sessions/${encodeURIComponent(state.session)}/audio-token`);
      await line.open(grant);
    } catch (error) {
      state.line = null;
      throw error;
    }
    controls();
  }

  function sessionEnded(outcome, reason) {
    state.session = null;
    if (state.line) state.line.close();
    state.line = null;
    ui.speaking.hidden = true;
    controls();
    setStatus(`The session has ended (${[outcome, reason].filter(Boolean).join(", ") || "ended"}).`);
  }

  // --- the forms ------------------------------------------------------------------------------------

  ui.connectForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    setStatus("Loading flows…");
    try {
      const page = await api("GET", "/api/flows?limit=200");
      ui.flow.replaceChildren();
      const published = page.items.filter((flow) => flow.status === "published");
      for (const flow of published) {
        const option = document.createElement("option");
        option.value = flow.id;
        option.textContent = `${flow.name} (v${flow.latest_version})`;
        ui.flow.append(option);
      }
      if (!published.length) {
        const option = document.createElement("option");
        option.value = "";
        option.textContent = "No published flow in this organization";
        ui.flow.append(option);
      }
      ui.flow.disabled = !published.length;
      setStatus(`${published.length} published flow(s). Pick one and start a session.`);
    } catch (error) {
      setStatus("Could not load the flows: " + error.message, true);
    }
    controls();
  });

  ui.flow.addEventListener("change", controls);

  ui.sessionForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    ui.start.disabled = true;
    ui.log.replaceChildren();
    ui.tools.replaceChildren();
    ui.metrics.replaceChildren();
    ui.partial.textContent = "";
    try {
      const turn = await api("POST", "/api/sessions", { flow_id: ui.flow.value, channel: "web", voiced: true });
      state.session = turn.id;
      ui.sessionInfo.textContent = `Session ${turn.id}`;
      setStatus("Session started. Start the microphone or type.");
      controls();
      showTurn(turn);
    } catch (error) {
      setStatus("Could not start a session: " + error.message, true);
      controls();
    }
  });

  ui.end.addEventListener("click", async () => {
    const id = state.session;
    if (!id) return;
    if (state.line && state.line.end()) return;  // the server ends it and sends "end"
    try {
      const row = await api("POST", `/api/sessions/${encodeURIComponent(id)}/end`);
      sessionEnded(row.outcome, row.end_reason);
    } catch (error) {
      setStatus("Could not end the session: " + error.message, true);
    }
  });

  ui.mic.addEventListener("click", async () => {
    if (state.line && state.line.listening) {  // muting keeps the connection (and the session) open
      state.line.mute();
      ui.speaking.hidden = true;
      return;
    }
    try {
      if (state.line && state.line.connected) state.line.listen();
      else await openSocket();
    } catch (error) {
      setStatus("Could not start the microphone: " + error.message, true);
    }
  });

  ui.messageForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = ui.message.value.trim();
    if (!text || !state.session) return;
    ui.message.value = "";
    addLine("caller", text);
    try {
      const turn = await api("POST", `/api/sessions/${encodeURIComponent(state.session)}/messages`, { text });
      showTurn(turn);
    } catch (error) {
      addLine("note", error.message, "error");
    }
  });

  controls();
}
