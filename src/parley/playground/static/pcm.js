// Audio helpers shared by the page and the capture worklet (both load this file):
// a streaming resampler from the audio context's rate to 16 kHz, and PCM16 conversions.
"use strict";
(function (scope) {
  class Downsampler {
    // Averages over one output period (a simple low-pass against aliasing), then interpolates
    // linearly; seamless across blocks of any size.
    constructor(inRate, outRate) {
      this.step = inRate / outRate;
      this.taps = Math.max(1, Math.round(this.step));
      this.history = new Float32Array(this.taps);
      this.index = 0;
      this.sum = 0;
      this.last = 0;
      this.t = 0;
    }

    process(input) {
      const n = input.length;
      const filtered = new Float32Array(n + 1);
      filtered[0] = this.last;
      for (let i = 0; i < n; i++) {
        this.sum += input[i] - this.history[this.index];
        this.history[this.index] = input[i];
        this.index = (this.index + 1) % this.taps;
        filtered[i + 1] = this.sum / this.taps;
      }
      const out = [];
      let t = this.t;
      while (t < n) {
        const k = Math.floor(t);
        const f = t - k;
        out.push(filtered[k] * (1 - f) + filtered[k + 1] * f);
        t += this.step;
      }
      this.t = t - n;
      this.last = filtered[n];
      return toInt16(out);
    }
  }

  function toInt16(samples) {
    const out = new Int16Array(samples.length);
    for (let i = 0; i < samples.length; i++) {
      const s = Math.max(-1, Math.min(1, samples[i]));
      out[i] = s < 0 ? s * 0x8000 : s * 0x7fff;
    }
    return out;
  }

  function toFloat32(int16) {
    const out = new Float32Array(int16.length);
    for (let i = 0; i < int16.length; i++) out[i] = int16[i] / 0x8000;
    return out;
  }

  // Cuts PCM16 into 20 ms frames (320 samples at 16 kHz) and hands each to `send`.
  class Framer {
    constructor(send, samples = 320) {
      this.send = send;
      this.frame = new Int16Array(samples);
      this.fill = 0;
    }

    push(pcm) {
      let offset = 0;
      while (offset < pcm.length) {
        const take = Math.min(pcm.length - offset, this.frame.length - this.fill);
        this.frame.set(pcm.subarray(offset, offset + take), this.fill);
        this.fill += take;
        offset += take;
        if (this.fill === this.frame.length) {
          this.send(this.frame.buffer);
          this.frame = new Int16Array(this.frame.length);
          this.fill = 0;
        }
      }
    }
  }

  scope.ParleyPcm = { Downsampler, Framer, toInt16, toFloat32 };
})(globalThis);
