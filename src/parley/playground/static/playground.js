// Parley playground: pick a flow, start a session, talk by microphone (WebSocket audio) or by typing.
// No framework, no build step. The token lives in this closure only.
"use strict";
(function () {
  const RATE = 16000;
  const $ = (id) => document.getElementById(id);
  const ui = {
    connectForm: $("connect-form"), token: $("token"), org: $("org"),
    sessionForm: $("session-form"), flow: $("flow"), start: $("start-session"), end: $("end-session"),
    sessionInfo: $("session-info"), mic: $("mic"), echo: $("echo"), speaking: $("speaking"),
    messageForm: $("message-form"), message: $("message"), send: $("send"),
    status: $("status"), log: $("log"), partial: $("partial"), played: $("played"),
    metrics: document.querySelector("#metrics tbody"), tools: $("tools"),
  };
  const state = { session: null, socket: null, capture: null, context: null, player: null, worklet: null };

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
    const on = Boolean(state.capture);
    ui.mic.setAttribute("aria-pressed", String(on));
    ui.mic.textContent = on ? "Stop microphone" : "Start microphone";
  }

  // --- agent audio: gapless playback through Web Audio ----------------------------------------

  class Player {
    constructor(context) {
      this.context = context;
      this.output = context.createGain();
      this.output.connect(context.destination);
      this.next = 0;
      this.sources = new Set();
      this.playedMs = 0;
    }

    enqueue(buffer) {
      const samples = ParleyPcm.toFloat32(new Int16Array(buffer));
      if (!samples.length) return;
      const audio = this.context.createBuffer(1, samples.length, RATE);
      audio.copyToChannel(samples, 0);
      const source = this.context.createBufferSource();
      source.buffer = audio;
      source.connect(this.output);
      const now = this.context.currentTime;
      // A fresh run of speech starts 60 ms from now (a little room for network jitter); later frames
      // follow sample-exactly after the previous one.
      if (this.next < now + 0.005) this.next = now + 0.06;
      source.start(this.next);
      this.next += audio.duration;
      this.sources.add(source);
      source.onended = () => {
        this.sources.delete(source);
        this.playedMs += audio.duration * 1000;
        ui.played.dataset.ms = String(Math.round(this.playedMs));
        ui.played.textContent = (this.playedMs / 1000).toFixed(1) + " s";
      };
    }

    clear() {
      this.dropped = (this.dropped || 0) + this.sources.size;
      ui.played.dataset.dropped = String(this.dropped);  // buffers cut off by the caller (barge-in)
      for (const source of this.sources) {
        source.onended = null;
        try { source.stop(); } catch (error) { /* not started yet */ }
      }
      this.sources.clear();
      this.next = 0;
    }
  }

  async function audioContext() {
    if (!state.context) {
      const Context = window.AudioContext || window.webkitAudioContext;
      state.context = new Context({ latencyHint: "interactive" });
      state.player = new Player(state.context);
    }
    if (state.context.state === "suspended") await state.context.resume();
    return state.context;
  }

  // --- microphone: capture, resample to 16 kHz PCM16, 20 ms frames --------------------------------

  async function startCapture(send) {
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new Error("This browser gives no microphone here (it needs https or localhost).");
    }
    const context = await audioContext();
    const echo = ui.echo.checked;
    const stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: echo, noiseSuppression: echo, autoGainControl: echo },
    });
    const source = context.createMediaStreamSource(stream);
    const mute = context.createGain();
    mute.gain.value = 0;  // processors must reach the destination to run; the caller hears nothing
    mute.connect(context.destination);
    let node;
    if (context.audioWorklet && window.AudioWorkletNode) {
      if (!state.worklet) {  // once per audio context: a processor name can be registered only once
        state.worklet = context.audioWorklet.addModule("/playground/pcm.js")
          .then(() => context.audioWorklet.addModule("/playground/capture-worklet.js"))
          .catch((error) => { state.worklet = null; throw error; });
      }
      await state.worklet;
      node = new AudioWorkletNode(context, "parley-pcm-capture", { numberOfInputs: 1, numberOfOutputs: 1 });
      node.port.onmessage = (message) => send(message.data);
    } else {
      const downsampler = new ParleyPcm.Downsampler(context.sampleRate, RATE);
      const framer = new ParleyPcm.Framer(send);
      node = context.createScriptProcessor(2048, 1, 1);
      node.onaudioprocess = (event) => framer.push(downsampler.process(event.inputBuffer.getChannelData(0)));
    }
    source.connect(node);
    node.connect(mute);
    return {
      stop() {
        source.disconnect();
        node.disconnect();
        if (node.port) node.port.onmessage = null;
        for (const track of stream.getTracks()) track.stop();
      },
    };
  }

  function stopCapture() {
    if (state.capture) state.capture.stop();
    state.capture = null;
    ui.speaking.hidden = true;
    controls();
  }

  function listen() {
    setStatus("Starting the microphone…");
    startCapture((frame) => {
      if (state.socket && state.socket.readyState === WebSocket.OPEN) state.socket.send(frame);
    }).then((capture) => {
      if (!state.socket) { capture.stop(); return; }
      state.capture = capture;
      controls();
      setStatus("Listening. Speak now.");
    }).catch((error) => {
      setStatus("Microphone: " + error.message, true);
    });
  }

  // --- the audio WebSocket --------------------------------------------------------------------------

  function onEvent(event) {
    switch (event.type) {
      case "ready":
        listen();
        break;
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
        if (state.player) state.player.clear();
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

  async function openSocket() {
    await audioContext();  // inside the click: browsers only start audio after a gesture
    const grant = await api("POST", `/api/sessions/${encodeURIComponent(state.session)}/audio-token`);
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${location.host}${grant.audio_path}?token=${encodeURIComponent(grant.token)}`);
    socket.binaryType = "arraybuffer";
    state.socket = socket;
    controls();
    setStatus("Connecting the microphone…");
    socket.onmessage = (message) => {
      if (typeof message.data === "string") {
        let event;
        try { event = JSON.parse(message.data); } catch (error) { return; }
        onEvent(event);
      } else if (state.player) {
        state.player.enqueue(message.data);
      }
    };
    socket.onclose = (close) => {
      if (state.socket !== socket) return;
      state.socket = null;
      stopCapture();
      if (close.code >= 4000) {
        // refused (authentication, role, unknown or ended session, rate limit, engines unavailable)
        setStatus(`The audio connection was refused (${close.code}${close.reason ? ": " + close.reason : ""}).`, true);
      } else if (state.session) {
        // the server ends a session whose audio connection drops
        sessionEnded("abandoned", "connection closed");
      }
      controls();
    };
  }

  function sessionEnded(outcome, reason) {
    state.session = null;
    stopCapture();
    if (state.socket) {
      const socket = state.socket;
      state.socket = null;
      if (socket.readyState === WebSocket.OPEN) socket.close(1000);
    }
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
    if (state.socket && state.socket.readyState === WebSocket.OPEN) {
      state.socket.send(JSON.stringify({ type: "end" }));  // the server ends it and sends "end"
      return;
    }
    try {
      const row = await api("POST", `/api/sessions/${encodeURIComponent(id)}/end`);
      sessionEnded(row.outcome, row.end_reason);
    } catch (error) {
      setStatus("Could not end the session: " + error.message, true);
    }
  });

  ui.mic.addEventListener("click", async () => {
    if (state.capture) {  // muting keeps the connection (and the session) open
      stopCapture();
      setStatus("Microphone off. Type, or start the microphone again.");
      return;
    }
    try {
      if (state.socket) listen();
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
})();
