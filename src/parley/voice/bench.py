"""Measure the offline engines: ``python -m parley.voice.bench``.

Prints eSpeak NG's time to the first audio chunk and its real-time factor for one sentence, and
PocketSphinx's real-time factor (open vocabulary and with a phrase list) on that sentence spoken,
fed in 20 ms pieces as a call delivers them. Medians of a few runs, after one warm-up.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from parley.voice.engines.espeak import EspeakTts
from parley.voice.engines.sphinx import PocketsphinxStt

SENTENCE = "Your car is ready for pick-up tomorrow after ten o'clock; the repair cost four hundred euros."
RUNS = 5


async def _tts(engine: EspeakTts) -> tuple[float, float, bytes]:
    started = time.perf_counter()
    first: float | None = None
    chunks = []
    async for chunk in engine.synthesize(SENTENCE, sample_rate=16000):
        first = first if first is not None else time.perf_counter() - started
        chunks.append(chunk)
    return first or 0.0, time.perf_counter() - started, b"".join(chunks)


async def _stt(audio: bytes, phrases: list[str] | None) -> tuple[float, str]:
    started = time.perf_counter()
    stream = await PocketsphinxStt().open_stream("en", 16000, phrases=phrases)
    for offset in range(0, len(audio), 640):
        stream.feed(audio[offset : offset + 640])
    await stream.finish()
    text = " ".join([t.text async for t in stream if t.is_final])
    await stream.aclose()
    return time.perf_counter() - started, text


async def main() -> None:
    engine = EspeakTts("en-us")
    await _tts(engine)  # loads the library
    runs = [await _tts(engine) for _ in range(RUNS)]
    audio = runs[0][2]
    seconds = len(audio) / 32000
    first = statistics.median(r[0] for r in runs) * 1000
    total = statistics.median(r[1] for r in runs)
    print(
        f"eSpeak NG: {seconds:.2f} s of speech; first audio after {first:.1f} ms; RTF {total / seconds:.4f}"
    )
    for label, phrases in (("open vocabulary", None), ("phrase list", [SENTENCE])):
        await _stt(audio, phrases)  # loads a decoder
        results = [await _stt(audio, phrases) for _ in range(RUNS)]
        elapsed = statistics.median(r[0] for r in results)
        print(f"PocketSphinx ({label}): RTF {elapsed / seconds:.3f}; heard {results[0][1]!r}")


if __name__ == "__main__":
    asyncio.run(main())
