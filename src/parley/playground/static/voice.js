// The browser's side of a voiced session, shared by the playground and the operator console (both
// import this module): the microphone captured, resampled to 16 kHz PCM16 and sent in 20 ms frames over
// the session's audio WebSocket; the agent's audio played gaplessly through Web Audio; the server's
// events handed to the page. The pages only decide what to show and in which language.
import "./pcm.js";  // sets globalThis.ParleyPcm (the capture worklet loads the same file)

const RATE = 16000;
const Pcm = () => globalThis.ParleyPcm;

// One audio context per page: browsers allow few, and a worklet processor is registered once per context.
const shared = { context: null, worklet: null };

class Player {
  constructor(context, listener) {
    this.context = context;
    this.listener = listener;
    this.output = context.createGain();
    this.output.connect(context.destination);
    this.next = 0;
    this.sources = new Set();
    this.playedMs = 0;
    this.dropped = 0;
  }

  enqueue(buffer) {
    const samples = Pcm().toFloat32(new Int16Array(buffer));
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
      this.listener.played(this.playedMs);
    };
  }

  clear() {
    this.dropped += this.sources.size;  // buffers cut off by the caller (barge-in)
    this.listener.dropped(this.dropped);
    for (const source of this.sources) {
      source.onended = null;
      try { source.stop(); } catch (error) { /* not started yet */ }
    }
    this.sources.clear();
    this.next = 0;
  }
}

/** The page's audio context, resumed (call it inside a click: browsers start audio after a gesture). */
export async function audioContext() {
  if (!shared.context) {
    const Context = window.AudioContext || window.webkitAudioContext;
    shared.context = new Context({ latencyHint: "interactive" });
  }
  if (shared.context.state === "suspended") await shared.context.resume();
  return shared.context;
}

/** Starts the microphone; `send` gets each 20 ms PCM16 frame. Answers an object with stop(). */
export async function startCapture(send, echo) {
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    throw new Error("no-microphone");
  }
  const context = await audioContext();
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: echo, noiseSuppression: echo, autoGainControl: echo },
  });
  if (typeof window.MediaStreamTrackProcessor === "function") return readTrack(stream, send);
  const source = context.createMediaStreamSource(stream);
  const mute = context.createGain();
  mute.gain.value = 0;  // processors must reach the destination to run; the caller hears nothing
  mute.connect(context.destination);
  let node;
  if (context.audioWorklet && window.AudioWorkletNode) {
    if (!shared.worklet) {  // once per audio context: a processor name can be registered only once
      shared.worklet = context.audioWorklet.addModule("/playground/pcm.js")
        .then(() => context.audioWorklet.addModule("/playground/capture-worklet.js"))
        .catch((error) => { shared.worklet = null; throw error; });
    }
    await shared.worklet;
    node = new AudioWorkletNode(context, "parley-pcm-capture", { numberOfInputs: 1, numberOfOutputs: 1 });
    node.port.onmessage = (message) => send(message.data);
  } else {
    const downsampler = new (Pcm().Downsampler)(context.sampleRate, RATE);
    const framer = new (Pcm().Framer)(send);
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

// How many of the track's audio frames (10 ms each in Chromium) wait for a page that is late to read.
const TRACK_BUFFER_FRAMES = 500;

// The microphone track's own audio frames, read in order: a page that is late (a busy machine) reads
// them late, but every sample arrives. An audio context's graph would play silence for the time its
// thread was late instead, cutting words out of what the caller said.
function readTrack(stream, send) {
  const [track] = stream.getAudioTracks();
  const reader = new window.MediaStreamTrackProcessor({ track, maxBufferSize: TRACK_BUFFER_FRAMES }).readable.getReader();
  const framer = new (Pcm().Framer)(send);
  let downsampler = null;
  let rate = 0;
  let stopped = false;
  (async () => {
    while (!stopped) {
      const { value: data, done } = await reader.read();
      if (done) return;
      try {
        if (stopped) return;
        if (data.sampleRate !== rate) {
          rate = data.sampleRate;
          downsampler = new (Pcm().Downsampler)(rate, RATE);
        }
        const samples = new Float32Array(data.numberOfFrames);
        data.copyTo(samples, { planeIndex: 0, format: "f32-planar" });
        framer.push(downsampler.process(samples));
      } finally {
        data.close();
      }
    }
  })();
  return {
    stop() {
      stopped = true;
      reader.cancel().catch(() => {});
      for (const each of stream.getTracks()) each.stop();
    },
  };
}

/**
 * The audio connection of one session. `grant` is what POST /api/sessions/{id}/audio-token answered.
 * `on` receives: event(serverEvent) for every JSON event, state(name, detail) for "connecting",
 * "starting", "listening", "muted", "mic-failed" (detail: the error), "refused" (detail: code and
 * reason), "dropped" (the connection closed while the session was on), and played(ms) / dropped(n)
 * for the agent's audio.
 */
export class VoiceLine {
  constructor(on, options = {}) {
    this.on = on;
    this.echo = options.echo !== false;
    this.socket = null;
    this.capture = null;
    this.player = null;
    this.live = true;
  }

  get connected() { return Boolean(this.socket); }
  get listening() { return Boolean(this.capture); }

  async open(grant) {
    const context = await audioContext();
    this.player = new Player(context, { played: (ms) => this.on.played(ms), dropped: (n) => this.on.dropped(n) });
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${location.host}${grant.audio_path}?token=${encodeURIComponent(grant.token)}`);
    socket.binaryType = "arraybuffer";
    this.socket = socket;
    this.on.state("connecting");
    socket.onmessage = (message) => {
      if (typeof message.data === "string") {
        let event;
        try { event = JSON.parse(message.data); } catch (error) { return; }
        if (event.type === "ready") this.listen();
        if (event.type === "interruption" && this.player) this.player.clear();
        this.on.event(event);
      } else if (this.player) {
        this.player.enqueue(message.data);
      }
    };
    socket.onclose = (close) => {
      if (this.socket !== socket) return;
      this.socket = null;
      this.mute(true);
      if (close.code >= 4000) {
        // refused (authentication, role, unknown or ended session, rate limit, engines unavailable)
        this.on.state("refused", `${close.code}${close.reason ? ": " + close.reason : ""}`);
      } else if (this.live) {
        this.on.state("dropped");  // the server ends a session whose audio connection drops
      }
    };
  }

  listen() {
    if (this.capture) return;
    this.on.state("starting");
    startCapture((frame) => {
      if (this.socket && this.socket.readyState === WebSocket.OPEN) this.socket.send(frame);
    }, this.echo).then((capture) => {
      if (!this.socket) { capture.stop(); return; }
      this.capture = capture;
      this.on.state("listening");
    }).catch((error) => {
      this.on.state("mic-failed", error);
    });
  }

  /** The microphone off; the connection (and the session) stays. */
  mute(quiet) {
    if (this.capture) this.capture.stop();
    this.capture = null;
    if (!quiet) this.on.state("muted");
  }

  /** Asks the server to end the session (it answers with an "end" event); false without a connection. */
  end() {
    if (!this.socket || this.socket.readyState !== WebSocket.OPEN) return false;
    this.socket.send(JSON.stringify({ type: "end" }));
    return true;
  }

  /** Hangs up locally: microphone off, connection closed, no more events. */
  close() {
    this.live = false;
    this.mute(true);
    const socket = this.socket;
    this.socket = null;
    if (socket && socket.readyState <= WebSocket.OPEN) socket.close(1000);
  }
}
