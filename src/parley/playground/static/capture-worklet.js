// The microphone's audio, on the audio thread: resampled to 16 kHz PCM16 and posted in 20 ms frames.
// pcm.js is added to the worklet first (same global scope).
"use strict";

class PcmCapture extends AudioWorkletProcessor {
  constructor() {
    super();
    const { Downsampler, Framer } = globalThis.ParleyPcm;
    this.downsampler = new Downsampler(sampleRate, 16000);
    // Copied, not transferred: transferring from the audio thread stalls headless Chromium's page.
    this.framer = new Framer((buffer) => this.port.postMessage(buffer));
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (channel) this.framer.push(this.downsampler.process(channel));
    return true;
  }
}

registerProcessor("parley-pcm-capture", PcmCapture);
