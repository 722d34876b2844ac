"""Benchmark: the voice pipeline (``parley.voice.pipeline``), in one process.

1. **voice to voice, offline default**: the order number spoken by eSpeak NG (US voice) is fed in real
   time (20 ms frames) to a pipeline with the offline engines (WebRTC VAD, PocketSphinx with the digit
   grammar of a collect node, eSpeak NG), whose turn answers the order-status sentence at once (the
   flow engine's own time is in bench/runtime_bench.py). Reported: the pipeline's
   ``voice_to_voice_ms`` (end of speech as the VAD decides it → first agent audio), its parts, and
   what the caller perceives (last voiced frame → first agent audio, which adds the VAD's hangover).
   Side by side in the same run: the same audio through instant fake engines (the pipeline's floor).
2. **pipeline overhead per turn**: instant fake engines, audio fed as fast as the pipeline takes it;
   ``voice_to_voice_ms`` per turn and CPU per turn, against a baseline that runs only the VAD
   endpointing (``SpeechSegmenter``) over the same frames.
3. **voiced sessions per core**: N sessions at once on one core (``sched_setaffinity``), fake engines,
   caller audio paced in real time and agent audio paced out like the WebSocket transport (at most
   200 ms ahead); every output frame's lateness against its playout time. Side by side: a bare pacing
   loop (the same timers and frames, no pipeline).
4. **CPU and memory per session**: from (3), and for the offline engines (a few real sessions).
6. **the live call** (``--live N``): first audio after connect over a real server, the demo's
   order-number turn with the normal against the short hangover, dead air while a slow tool runs
   (fillers off against on), the re-prompt time of a silent caller, and an ``llm`` turn against the
   local OpenAI-compatible stub streaming 30 words a second (first sentence → first audio).

    .venv/bin/python bench/voice_bench.py [--trials 10] [--turns 2000] [--sessions 50,100,200]
        [--seconds 10] [--offline-sessions 4] [--engines] [--live 10 [--tool-seconds 5] [--reprompt-ms 6000]]

``--engines`` also prints ``python -m parley.voice.bench`` (eSpeak NG and PocketSphinx alone).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.voice.pipeline.fakes import SILENCE, SPEECH, LoudnessVad  # noqa: E402

from parley.runtime.engine import AgentEvent, TurnResult  # noqa: E402
from parley.voice import bench as engine_bench  # noqa: E402
from parley.voice.engines.base import SttEngine, SttStream, Transcript, TtsEngine, Vad  # noqa: E402
from parley.voice.engines.espeak import EspeakTts  # noqa: E402
from parley.voice.engines.sphinx import PocketsphinxStt  # noqa: E402
from parley.voice.engines.vad import SpeechSegmenter, WebRtcVad  # noqa: E402
from parley.voice.pipeline.frames import (  # noqa: E402
    AgentText,
    AudioOut,
    EndFrame,
    FrameQueue,
    MetricsFrame,
    TranscriptFrame,
)
from parley.voice.pipeline.pipeline import Expect, PipelineConfig, TurnReply, VoicePipeline  # noqa: E402
from parley.voice.transport_ws import DIGITS, PLAYOUT_LEAD_S  # noqa: E402

RATE = 16000
FRAME = 640
FRAME_S = 0.02
SPOKEN = "one two"
REPLY = (
    "Your Seat Leon, B L I 5489, is at status delivered. Expected completion: May the twentieth. "
    "Gross cost: two thousand five hundred and forty seven euros."
)


# --- engines and ports ------------------------------------------------------------------------------


class FixedTurns:
    """The session's turn, answered at once with one sentence (the flow engine is measured elsewhere)."""

    def __init__(self, reply: str = REPLY) -> None:
        self.reply = reply
        self.texts: list[str] = []

    async def turn(self, text: str) -> TurnReply:
        self.texts.append(text)
        result = TurnResult(events=[AgentEvent("say", "status", self.reply)], engine_ms=0.0)
        return TurnReply(result, phrases=list(DIGITS))


class _InstantStream(SttStream):
    def __init__(self, text: str) -> None:
        self.text = text
        self.queue: asyncio.Queue[Transcript | None] = asyncio.Queue()
        self.fed = False

    def feed(self, pcm16: bytes) -> None:
        self.fed = True

    async def finish(self) -> None:
        self.queue.put_nowait(Transcript(self.text, True, 0, 0))
        self.queue.put_nowait(None)

    async def aclose(self) -> None:
        self.queue.put_nowait(None)

    async def _iterate(self) -> AsyncIterator[Transcript]:
        while (item := await self.queue.get()) is not None:
            yield item

    def __aiter__(self) -> AsyncIterator[Transcript]:
        return self._iterate()


class InstantStt(SttEngine):
    """Answers ``text`` the moment the utterance ends."""

    name = "instant"

    def __init__(self, text: str = SPOKEN) -> None:
        self.text = text

    async def open_stream(
        self, language: str | None, sample_rate: int, *, phrases: Sequence[str] | None = None
    ) -> SttStream:
        return _InstantStream(self.text)


class InstantTts(TtsEngine):
    """``seconds`` of audio at once (in 100 ms chunks, as engines deliver them)."""

    name = "instant"

    def __init__(self, seconds: float = 1.0) -> None:
        self.chunks = max(1, int(seconds * 10))

    def synthesize(
        self, text: str, *, voice: str | None, language: str | None, sample_rate: int
    ) -> AsyncIterator[bytes]:
        return self._run(sample_rate)

    async def _run(self, sample_rate: int) -> AsyncIterator[bytes]:
        chunk = b"\x01\x00" * (sample_rate // 10)
        for _ in range(self.chunks):
            yield chunk
            await asyncio.sleep(0)


def pipeline(stt: SttEngine, tts: TtsEngine, vad: Vad, **config: Any) -> VoicePipeline:
    return VoicePipeline(
        stt=stt,
        tts=tts,
        vad=vad,
        turns=FixedTurns(),
        config=PipelineConfig(language="en", phrases=list(DIGITS), voice="en-us", **config),
    )


# --- helpers -------------------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def frames_of(pcm: bytes) -> list[bytes]:
    pcm += bytes(-len(pcm) % FRAME)
    return [pcm[i : i + FRAME] for i in range(0, len(pcm), FRAME)]


async def speech(text: str) -> bytes:
    return b"".join(
        [c async for c in EspeakTts("en-us").synthesize(text, voice=None, language="en", sample_rate=RATE)]
    )


def last_voiced(frames: Sequence[bytes]) -> int:
    vad = WebRtcVad(RATE)
    voiced = [i for i, f in enumerate(frames) if vad.is_speech(f)]
    return voiced[-1]


# --- 1. voice to voice on the offline default ------------------------------------------------------------


@dataclass
class Trial:
    metrics: dict[str, float | None]
    perceived_ms: float
    heard: str


async def one_trial(
    engines: tuple[SttEngine, TtsEngine, Vad], frames: list[bytes], last: int, **config: Any
) -> Trial:
    voice = pipeline(*engines, **config)
    first_audio: list[float] = []
    metrics: list[dict[str, float | None]] = []
    heard: list[str] = []
    done = asyncio.Event()

    async def consume() -> None:
        while True:
            frame = await voice.out.get()
            if isinstance(frame, AudioOut) and not first_audio:
                first_audio.append(time.perf_counter())
            elif isinstance(frame, TranscriptFrame) and frame.final:
                heard.append(frame.text)
            elif isinstance(frame, MetricsFrame):
                metrics.append(frame.metrics)
                done.set()

    consumer = asyncio.create_task(consume())
    start = time.perf_counter()
    last_voiced_at = 0.0
    for i, frame in enumerate(frames):  # real time, as a caller's audio arrives
        delay = start + i * FRAME_S - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await voice.push_audio(frame)
        if i == last:
            last_voiced_at = time.perf_counter()
        if done.is_set():
            break
    await asyncio.wait_for(done.wait(), 30)
    await voice.aclose()
    await voice.drain()
    consumer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await consumer
    return Trial(metrics[0], (first_audio[0] - last_voiced_at) * 1000, " ".join(heard))


async def voice_to_voice(trials: int) -> None:
    audio = await speech(SPOKEN)
    frames = frames_of(bytes(RATE * 2 // 2) + audio + bytes(RATE * 2 * 2))
    last = last_voiced(frames)
    candidates: dict[str, Any] = {
        "offline (PocketSphinx + eSpeak NG)": lambda: (
            PocketsphinxStt(),
            EspeakTts("en-us"),
            WebRtcVad(RATE),
        ),
        "instant fake engines (floor)": lambda: (InstantStt(), InstantTts(), WebRtcVad(RATE)),
    }
    results: dict[str, list[Trial]] = {name: [] for name in candidates}
    for make in candidates.values():  # warm-up: the library and a decoder load once
        await one_trial(make(), frames, last)
    for _ in range(trials):  # alternate the candidates, trial by trial
        for name, make in candidates.items():
            results[name].append(await one_trial(make(), frames, last))
    print(
        f"\n## 1. Voice to voice ({trials} trials each, {SPOKEN!r} spoken by eSpeak NG, fed in real time)\n"
    )
    print(
        "| engines | voice_to_voice p50 / p90 ms | stt_final p50 | tts_first_byte p50 | perceived p50 (from last voiced frame) | heard right |"
    )
    print("|---|---|---|---|---|---|")
    medians = {}
    for name, runs in results.items():
        v2v = [r.metrics["voice_to_voice_ms"] or 0.0 for r in runs]
        stt = [r.metrics["stt_final_ms"] or 0.0 for r in runs]
        tts = [r.metrics["tts_first_byte_ms"] or 0.0 for r in runs]
        perceived = [r.perceived_ms for r in runs]
        right = sum(r.heard == SPOKEN for r in runs)
        medians[name] = statistics.median(v2v)
        print(
            f"| {name} | {statistics.median(v2v):.0f} / {pct(v2v, 0.9):.0f} | {statistics.median(stt):.0f} | "
            f"{statistics.median(tts):.1f} | {statistics.median(perceived):.0f} | {right}/{len(runs)} |"
        )
    offline, floor = medians.values()
    print(f"\noffline − floor (the engines' share): {offline - floor:.0f} ms; target p50 ≤ 400 ms")


# --- 2. pipeline overhead per turn ---------------------------------------------------------------------


async def overhead(turns: int) -> None:
    utterance = [SPEECH] * 10 + [SILENCE] * 40  # 200 ms speech, then more than the 600 ms hangover
    voice = pipeline(InstantStt(), InstantTts(0.2), LoudnessVad(), max_ahead_ms=10_000)
    v2v: list[float] = []
    done = asyncio.Event()

    async def consume() -> None:
        while True:
            frame = await voice.out.get()
            if isinstance(frame, MetricsFrame):
                v2v.append(frame.metrics["voice_to_voice_ms"] or 0.0)
                done.set()

    consumer = asyncio.create_task(consume())
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(turns):
        done.clear()
        for frame in utterance:
            await voice.push_audio(frame)
        await done.wait()
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    consumer.cancel()
    await voice.aclose()

    segmenter = SpeechSegmenter(LoudnessVad(), frame_ms=20, frame_bytes=FRAME)
    base0 = time.process_time()
    for _ in range(turns):
        for frame in utterance:
            segmenter.process(frame)
    base = time.process_time() - base0
    print(f"\n## 2. Pipeline overhead per turn ({turns} turns, instant fake engines)\n")
    print("| what | per turn |")
    print("|---|---|")
    print(
        f"| voice_to_voice p50 / p99 / max | {statistics.median(v2v):.2f} / {pct(v2v, 0.99):.2f} / {max(v2v):.2f} ms |"
    )
    print(f"| CPU, whole pipeline (50 frames in, 10 out, 1 turn) | {cpu / turns * 1000:.3f} ms |")
    print(f"| CPU, baseline: VAD endpointing alone over the same frames | {base / turns * 1000:.3f} ms |")
    print(f"| wall per turn | {wall / turns * 1000:.3f} ms |")
    print(f"\npipeline CPU / baseline: {cpu / max(base, 1e-9):.1f}×; target voice_to_voice ≤ 10 ms")


# --- 3. and 4. concurrent voiced sessions ----------------------------------------------------------------


@dataclass
class SessionStats:
    late_ms: list[float] = field(default_factory=list)
    input_lag_ms: list[float] = field(default_factory=list)
    frames_out: int = 0
    turns: int = 0


async def paced_session(
    seconds: float, stats: SessionStats, engines: tuple[SttEngine, TtsEngine, Vad] | None, caller: list[bytes]
) -> None:
    """One call: caller audio in real time, agent audio sent like the WebSocket transport paces it.

    Without engines (the baseline) the same agent frames (1 s) are queued at the moment the pipeline
    would answer (end of the caller's speech + the 600 ms hangover), with no VAD, STT, turn or TTS.
    """
    voice = pipeline(*engines) if engines is not None else None
    out = voice.out if voice is not None else FrameQueue()
    stop = time.perf_counter() + seconds

    async def send_out() -> None:
        playout = time.perf_counter()
        turn = -1
        while True:
            frame = await out.get()
            if not isinstance(frame, AudioOut):
                continue
            now = time.perf_counter()
            if frame.turn != turn:  # a new run of agent speech starts now
                turn, playout = frame.turn, now
                stats.turns += 1
            else:
                stats.late_ms.append(max(0.0, (now - playout) * 1000))
            playout = max(playout, now)
            if playout - now > PLAYOUT_LEAD_S:
                await asyncio.sleep(playout - now - PLAYOUT_LEAD_S)
            stats.frames_out += 1
            playout += FRAME_S

    sender = asyncio.create_task(send_out())
    start = time.perf_counter()
    i = 0
    answer_at = next(k for k in range(len(caller) - 1, -1, -1) if caller[k] != SILENCE) + 31
    while time.perf_counter() < stop:
        due = start + i * FRAME_S
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        stats.input_lag_ms.append(max(0.0, (time.perf_counter() - due) * 1000))
        if voice is not None:
            await voice.push_audio(caller[i % len(caller)])
        elif i % len(caller) == answer_at:
            for _ in range(50):
                out.put(AudioOut(b"\x01\x00" * 320, i))
        i += 1
    sender.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sender
    if voice is not None:
        await voice.aclose()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(voice.drain(), 5)


async def sessions_at(
    count: int, seconds: float, make: Any, caller: list[bytes]
) -> tuple[list[SessionStats], float, float, int]:
    gc.collect()
    rss0 = rss_kib()
    stats = [SessionStats() for _ in range(count)]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    tasks = []
    for s in stats:  # spread the starts over one frame period, as calls arrive
        tasks.append(asyncio.create_task(paced_session(seconds, s, make() if make else None, caller)))
        await asyncio.sleep(FRAME_S / count)
    peak = 0
    while not all(t.done() for t in tasks):
        await asyncio.sleep(0.5)
        peak = max(peak, rss_kib())
    await asyncio.gather(*tasks)
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    return stats, cpu, wall, max(0, peak - rss0)


def report_sessions(label: str, count: int, result: tuple[list[SessionStats], float, float, int]) -> None:
    stats, cpu, wall, _rss = result
    late = [x for s in stats for x in s.late_ms]
    lag = [x for s in stats for x in s.input_lag_ms]
    over = sum(1 for x in late if x > 40)
    frames = sum(s.frames_out for s in stats)
    turns = sum(s.turns for s in stats)
    print(
        f"| {label} | {count} | {cpu / wall * 100:.0f} % | {cpu / wall / count * 1000:.2f} | "
        f"{frames} | {turns} | {pct(late, 0.99):.1f} / {max(late, default=0):.1f} | {over} | "
        f"{pct(lag, 0.99):.1f} / {max(lag, default=0):.1f} |"
    )


HEADER = (
    "| candidate | sessions | CPU (one core) | CPU ms per session-second | agent frames "
    "| turns | output lateness p99 / max ms | frames > 40 ms late | input lag p99 / max ms |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


async def cold_decoders(count: int) -> None:
    """Open ``count`` PocketSphinx streams at once in a fresh process: their memory, and how long the
    event loop stalls meanwhile (model loading holds the GIL). They go back to the pool (warm after)."""
    gaps: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append((now - last) * 1000)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    gc.collect()
    rss0 = rss_kib()
    engine = PocketsphinxStt()
    started = time.perf_counter()
    streams = await asyncio.gather(
        *[engine.open_stream("en", RATE, phrases=list(DIGITS)) for _ in range(count)]
    )
    took = (time.perf_counter() - started) * 1000
    rss1 = rss_kib()
    stop.set()
    await ticker
    for stream in streams:
        await stream.aclose()
    print(
        f"Cold start: {count} PocketSphinx decoders opened at once in {took:.0f} ms, "
        f"{(rss1 - rss0) / count / 1024:.1f} MiB RSS each; the event loop's longest stall meanwhile "
        f"{max(gaps, default=0):.0f} ms (decoders are pooled: later streams reuse them).\n"
    )


async def concurrent(counts: list[int], seconds: float, offline_sessions: int, pin: bool) -> None:
    if pin:  # one core: the figures are per core
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    # 1 s of speech, 2 s of silence: a turn every 3 s; the agent's 1 s answer ends before the caller
    # speaks again (no barge-in)
    caller = [SPEECH] * 50 + [SILENCE] * 100
    where = "one core" if pin else "unpinned, one event loop"
    print(f"\n## 3. Voiced sessions ({where}; {seconds:.0f} s each, fake engines, real-time pacing)\n")
    print(HEADER)
    for count in counts:
        report_sessions("bare pacing (baseline)", count, await sessions_at(count, seconds, None, caller))
        report_sessions(
            "pipeline, fake engines",
            count,
            await sessions_at(count, seconds, lambda: (InstantStt(), InstantTts(1.0), LoudnessVad()), caller),
        )
    if offline_sessions:
        audio = await speech(SPOKEN)
        spoken = frames_of(bytes(RATE) + audio + bytes(RATE * 3))
        print(
            f"\n## 4. Offline engines per session ({where}; {seconds:.0f} s, {SPOKEN!r} then silence, looped)\n"
        )
        await cold_decoders(min(offline_sessions, 4))
        await one_trial((PocketsphinxStt(), EspeakTts("en-us"), WebRtcVad(RATE)), spoken, last_voiced(spoken))
        print(HEADER)
        report_sessions(
            "pipeline, offline engines",
            offline_sessions,
            await sessions_at(
                offline_sessions,
                seconds,
                lambda: (PocketsphinxStt(), EspeakTts("en-us"), WebRtcVad(RATE)),
                spoken,
            ),
        )


async def memory(count: int) -> None:
    """Python heap per live session (tracemalloc), fake engines, each in the middle of an utterance."""
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    voices = [pipeline(InstantStt(), InstantTts(1.0), LoudnessVad()) for _ in range(count)]
    for voice in voices:
        for _ in range(20):
            await voice.push_audio(SPEECH)
    heap = (tracemalloc.get_traced_memory()[0] - before) / count
    tracemalloc.stop()
    for voice in voices:
        await voice.aclose()
    print("\n## 5. Memory per session\n\n| what | per session |\n|---|---|")
    print(
        f"| Python heap of a live pipeline mid-utterance (fake engines, {count} sessions, tracemalloc) | {heap / 1024:.1f} KiB |"
    )


# --- 6. the live call: turn-taking, first audio, dead air, re-prompts (issue 13) -------------------------

DEMO_ORDER_NODE = Expect(kind="digits", phrases=list(DIGITS), min_digits=1, max_digits=12)


async def order_number_turn(trials: int) -> None:
    """Perceived latency of the demo's order-number turn on the offline default: the normal hangover
    (the collect node's answer not known to be complete: how every turn was taken before) against the
    short one the node's digit bounds allow, trial by trial."""
    audio = await speech(SPOKEN)
    frames = frames_of(bytes(RATE * 2 // 2) + audio + bytes(RATE * 2 * 2))
    last = last_voiced(frames)
    engines = lambda: (PocketsphinxStt(), EspeakTts("en-us"), WebRtcVad(RATE))  # noqa: E731
    candidates: dict[str, dict[str, Any]] = {
        "before: fixed 600 ms hangover": {},
        "now: the node's answer is complete → short hangover (220 ms)": {"expect": DEMO_ORDER_NODE},
    }
    results: dict[str, list[Trial]] = {name: [] for name in candidates}
    await one_trial(engines(), frames, last)  # warm-up
    for _ in range(trials):
        for name, config in candidates.items():
            results[name].append(await one_trial(engines(), frames, last, **config))
    print(f"\n## 6a. Order-number turn, offline default ({trials} trials each, {SPOKEN!r}, real time)\n")
    print(
        "| endpointing | perceived p50 / p90 ms (last voiced frame → first agent audio sent) | "
        "voice_to_voice p50 | hangover p50 | heard right |"
    )
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        perceived = [r.perceived_ms for r in runs]
        v2v = [r.metrics["voice_to_voice_ms"] or 0.0 for r in runs]
        hang = [r.metrics["hangover_ms"] or 0.0 for r in runs]
        right = sum(r.heard == SPOKEN for r in runs)
        print(
            f"| {name} | {statistics.median(perceived):.0f} / {pct(perceived, 0.9):.0f} | "
            f"{statistics.median(v2v):.0f} | {statistics.median(hang):.0f} | {right}/{len(runs)} |"
        )
    print("\ntarget: perceived p50 ≤ 450 ms")


class PlayoutClock:
    """When each agent frame reaches the caller: the transport's pacing (``VoiceCall._send``) replayed
    on the pipeline's queue; ``starts`` holds each frame's playout time."""

    def __init__(self, voice: VoicePipeline) -> None:
        self.voice = voice
        self.starts: list[float] = []
        self.texts: list[tuple[float, str]] = []
        self.ended = asyncio.Event()
        self.metrics = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        playout = time.perf_counter()
        while True:
            frame = await self.voice.out.get()
            if isinstance(frame, AudioOut):
                now = time.perf_counter()
                playout = max(playout, now)
                if playout - now > PLAYOUT_LEAD_S:
                    await asyncio.sleep(playout - now - PLAYOUT_LEAD_S)
                self.starts.append(playout)
                playout += FRAME_S
            elif isinstance(frame, AgentText):
                self.texts.append((time.perf_counter(), frame.text))
            elif isinstance(frame, MetricsFrame):
                self.metrics.set()
            elif isinstance(frame, EndFrame):
                self.ended.set()

    def longest_gap(self, since: float, until: float) -> float:
        """The longest stretch without agent audio from ``since`` to the frame at ``until`` (seconds)."""
        times = [since] + [t for t in self.starts if since <= t <= until]
        ends = [times[0]] + [t + FRAME_S for t in times[1:]]
        return max((times[i + 1] - ends[i] for i in range(len(times) - 1)), default=0.0)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class SlowToolTurns(FixedTurns):
    """A turn whose tool takes ``seconds`` (the flow engine waits for it)."""

    def __init__(self, seconds: float) -> None:
        super().__init__("Your car is ready for pick up.")
        self.seconds = seconds

    async def turn(self, text: str) -> TurnReply:
        await asyncio.sleep(self.seconds)
        return await super().turn(text)


async def dead_air(tool_s: float) -> None:
    """Longest agent-side silence from the caller's last voiced frame to the answer while a slow tool
    runs, offline eSpeak NG voice: fillers off (before) against the default 1.5 s filler."""
    print(f"\n## 6b. Dead air while a {tool_s:.0f} s tool runs (eSpeak NG, transport pacing replayed)\n")
    print(
        "| fillers | longest agent silence | fillers said | first answer audio after the last voiced frame |"
    )
    print("|---|---|---|---|")
    utterance = [SPEECH] * 10 + [SILENCE] * 40
    for name, filler_ms in (("off (before)", 0), ("after 1.5 s (default)", 1500)):
        voice = VoicePipeline(
            stt=InstantStt(),
            tts=EspeakTts("en-us"),
            vad=LoudnessVad(),
            turns=SlowToolTurns(tool_s),
            config=PipelineConfig(
                language="en", voice="en-us", filler_after_ms=filler_ms, reprompt_after_ms=0
            ),
        )
        clock = PlayoutClock(voice)
        last = 0.0
        for i, frame in enumerate(utterance):
            await voice.push_audio(frame)
            if i == 9:
                last = time.perf_counter()
            await asyncio.sleep(FRAME_S)
        await asyncio.wait_for(clock.metrics.wait(), 60)
        answer_at = next(t for t, text in clock.texts if text.startswith("Your car"))
        first_answer = next(t for t in clock.starts if t >= answer_at)
        # the silences up to the answer's first frame (the answer itself is continuous speech)
        gap = clock.longest_gap(last, first_answer)
        print(f"| {name} | {gap:.2f} s | {voice.fillers} | {first_answer - last:.2f} s |")
        await voice.aclose()
        await clock.close()
    print("\ntarget: longest silence ≤ 1.8 s")


async def reprompt_timing(trials: int, reprompt_ms: int) -> None:
    """From the end of the agent's audio to the re-prompt's first audio, with the caller silent."""
    print(
        f"\n## 6c. Re-prompt of a silent caller (configured {reprompt_ms} ms, {trials} trials, eSpeak NG)\n"
    )
    measured = []
    for _ in range(trials):
        voice = VoicePipeline(
            stt=InstantStt(),
            tts=EspeakTts("en-us"),
            vad=LoudnessVad(),
            turns=FixedTurns(),
            config=PipelineConfig(
                language="en", voice="en-us", reprompt_after_ms=reprompt_ms, max_reprompts=1
            ),
        )
        clock = PlayoutClock(voice)
        voice.speak(["Please tell me your order number."])
        voice.start()
        while len(clock.texts) < 2:
            await asyncio.sleep(0.01)
        asked_at = clock.texts[1][0]
        greeting_end = max(t for t in clock.starts if t < asked_at) + FRAME_S
        while not [t for t in clock.starts if t >= asked_at]:
            await asyncio.sleep(0.01)
        first = next(t for t in clock.starts if t >= asked_at)
        measured.append((first - greeting_end) * 1000)
        await voice.aclose()
        await clock.close()
    print("| configured | measured p50 / max (end of agent audio → re-prompt audio) | error |")
    print("|---|---|---|")
    p50 = statistics.median(measured)
    print(f"| {reprompt_ms} ms | {p50:.0f} / {max(measured):.0f} ms | {p50 - reprompt_ms:+.0f} ms |")
    print("\ntarget: within ± 500 ms")


async def first_audio_after_connect(trials: int) -> None:
    """A real server (uvicorn, SQLite, the flow's offline engines): from the WebSocket's connect to the
    first binary frame of the opening, for a voice-only client."""
    import tempfile

    import httpx
    from tests.conftest import JWT_SECRET, make_token
    from tests.live import serve_in_thread
    from websockets.asyncio.client import connect

    from parley.app import create_app
    from parley.config import Settings
    from parley.demo.flows import ORDER_STATUS_FLOW
    from parley.kit.migrate import upgrade

    print(f"\n## 6d. First audio after connect (real server, SQLite, offline default, {trials} calls)\n")
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        await asyncio.to_thread(upgrade, url)
        settings = Settings(
            data_dir=Path(tmp),
            database_url=url,
            auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
            rate_limit_per_minute=0,
            log_level="WARNING",
            log_json=False,
        )
        app = create_app(settings)
        with serve_in_thread(app) as base:
            headers = {"Authorization": f"Bearer {make_token('bench')}"}
            async with httpx.AsyncClient(base_url=base, headers=headers) as client:
                org = (await client.post("/api/organizations", json={"name": "Bench"})).json()["id"]
                client.headers["X-Organization-Id"] = org
                # the demo's opening (greeting and order-number question), English, offline engines
                nodes = {n["id"]: n for n in ORDER_STATUS_FLOW["nodes"]}
                definition = {
                    "language": "en",
                    "variables": {"shop_name": "Autohaus Demo", "order_number": None},
                    "start_node": "greet",
                    "nodes": [
                        nodes["greet"],
                        {**nodes["ask_order"], "next": "bye", "on_failure": "bye"},
                        {"id": "bye", "type": "end", "text": "Goodbye."},
                    ],
                }
                created = await client.post("/api/flows", json={"name": "Demo", "definition": definition})
                assert created.status_code == 200, created.text
                flow = created.json()
                await client.post(f"/api/flows/{flow['id']}/publish")
                waits = []
                for _ in range(trials):
                    session = (
                        await client.post("/api/sessions", json={"flow_id": flow["id"], "voiced": True})
                    ).json()["id"]
                    ws_url = base.replace("http://", "ws://") + f"/api/sessions/{session}/audio"
                    started = time.perf_counter()
                    async with connect(
                        ws_url, additional_headers={**headers, "X-Organization-Id": org}
                    ) as ws:
                        while not isinstance(await ws.recv(), bytes):
                            pass
                        waits.append((time.perf_counter() - started) * 1000)
                        await ws.send('{"type": "end"}')
                        with contextlib.suppress(Exception):
                            while True:
                                await ws.recv()
    print("| transport | connect → first audio p50 / max |")
    print("|---|---|")
    print(
        f"| WebSocket (before: never; the opening was not spoken) | {statistics.median(waits):.0f} / {max(waits):.0f} ms |"
    )
    print("\ntarget: ≤ 1 s")


LLM_CALLER = (
    "where is my car. I brought it in on Monday for new brakes and I would like to know when I can "
    "pick it up again"
)


async def llm_turn(trials: int) -> None:
    """A voiced ``llm`` turn over a real server (uvicorn, SQLite, the runtime and its LLM client)
    against the local OpenAI-compatible stub streaming 30 words a second; eSpeak NG speaks, the
    caller's words come from an instant recognizer. From the caller's last frame: when the first
    sentence was whole (its ``agent_text``), the first agent audio, and the whole answer (its last
    ``agent_text``: before streaming, the first audio could only follow that)."""
    import tempfile

    import httpx
    from tests.conftest import JWT_SECRET, make_token
    from tests.live import serve_in_thread
    from tests.stubs.openai import StubState, make_openai_stub
    from websockets.asyncio.client import connect

    from parley.app import create_app
    from parley.config import Settings
    from parley.kit.migrate import upgrade
    from parley.voice.session_call import Engines

    stub = StubState(slow_seconds=10 / 30)  # model "slow": a word every 1/30 s
    print(f"\n## 6e. LLM turn streamed into speech (stub at 30 words/s, eSpeak NG, {trials} turns)\n")
    rows: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp, serve_in_thread(make_openai_stub(stub)) as llm_url:
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        await asyncio.to_thread(upgrade, url)
        settings = Settings(
            data_dir=Path(tmp),
            database_url=url,
            auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
            rate_limit_per_minute=0,
            outbound_allowlist=["127.0.0.1"],
            log_level="WARNING",
            log_json=False,
        )
        app = create_app(settings)
        app.state.voice_engines = lambda: Engines(
            InstantStt(LLM_CALLER), EspeakTts("en-us"), LoudnessVad(), "en-us"
        )
        with serve_in_thread(app) as base:
            headers = {"Authorization": f"Bearer {make_token('bench')}"}
            async with httpx.AsyncClient(base_url=base, headers=headers) as client:
                org = (await client.post("/api/organizations", json={"name": "Bench"})).json()["id"]
                client.headers["X-Organization-Id"] = org
                await client.put(
                    "/api/providers/openai/config",
                    json={"api_key": stub.api_key, "base_url": f"{llm_url}/v1", "model": "slow"},
                )
                definition = {
                    "language": "en",
                    "start_node": "chat",
                    "nodes": [
                        {
                            "id": "chat",
                            "type": "llm",
                            "system_prompt": "Answer briefly.",
                            "max_turns": 50,
                            "transitions": [
                                {"name": "bye", "description": "The caller is done.", "next": "bye"}
                            ],
                        },
                        {"id": "bye", "type": "end", "text": "Goodbye!"},
                    ],
                }
                created = await client.post("/api/flows", json={"name": "Chat", "definition": definition})
                assert created.status_code == 200, created.text
                flow = created.json()["id"]
                await client.post(f"/api/flows/{flow}/publish")
                for _ in range(trials + 1):  # the first is a warm-up
                    session = (
                        await client.post("/api/sessions", json={"flow_id": flow, "voiced": True})
                    ).json()
                    ws_url = base.replace("http://", "ws://") + f"/api/sessions/{session['id']}/audio"
                    async with connect(
                        ws_url, additional_headers={**headers, "X-Organization-Id": org}
                    ) as ws:
                        await ws.recv()  # ready
                        for frame in [SPEECH] * 10:
                            await ws.send(frame)
                        spoke = time.perf_counter()
                        for frame in [SILENCE] * 40:
                            await ws.send(frame)
                        first_text = first_audio = last_text = 0.0
                        while True:
                            message = await asyncio.wait_for(ws.recv(), 30)
                            now = time.perf_counter()
                            if isinstance(message, bytes):
                                first_audio = first_audio or now
                                continue
                            event = json.loads(message)
                            if event["type"] == "agent_text":
                                first_text = first_text or now
                                last_text = now
                            if event["type"] == "metrics":
                                break
                        await ws.send('{"type": "end"}')
                        with contextlib.suppress(Exception):
                            while True:
                                await ws.recv()
                    rows.append(
                        (
                            (first_text - spoke) * 1000,
                            (first_audio - spoke) * 1000,
                            (last_text - spoke) * 1000,
                        )
                    )
    rows = rows[1:]
    sentence = [r[0] for r in rows]
    audio = [r[1] for r in rows]
    whole = [r[2] for r in rows]
    gap = [a - s for s, a, _ in rows]
    print(
        "| from the caller's last voiced frame (audio sent at once: the hangover takes no time here) | p50 ms | max ms |"
    )
    print("|---|---|---|")
    print(
        f"| first sentence whole (its agent_text) | {statistics.median(sentence):.0f} | {max(sentence):.0f} |"
    )
    print(f"| first agent audio | {statistics.median(audio):.0f} | {max(audio):.0f} |")
    print(
        f"| whole answer generated (before: the earliest first audio) | {statistics.median(whole):.0f} | {max(whole):.0f} |"
    )
    print(
        f"\nfirst audio − first sentence: p50 {statistics.median(gap):.0f} ms, max {max(gap):.0f} ms (target ≤ 150 ms)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--sessions", default="50,100,200")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--offline-sessions", type=int, default=4)
    parser.add_argument("--engines", action="store_true", help="also run python -m parley.voice.bench")
    parser.add_argument("--live", type=int, default=0, help="trials of the live-call figures (section 6)")
    parser.add_argument("--tool-seconds", type=float, default=5.0)
    parser.add_argument("--reprompt-ms", type=int, default=6000)
    parser.add_argument(
        "--no-pin", action="store_true", help="do not pin to one core (on a machine busy with other work)"
    )
    args = parser.parse_args()
    print(f"# Voice benchmarks ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start)")
    if args.engines:
        print("\n## Engines alone (python -m parley.voice.bench)\n")
        await engine_bench.main()
    if args.live:
        await first_audio_after_connect(args.live)
        await order_number_turn(args.live)
        await dead_air(args.tool_seconds)
        await reprompt_timing(max(1, args.live // 3), args.reprompt_ms)
        await llm_turn(args.live)
        if not args.trials and not args.turns:
            return
    if args.trials:
        await voice_to_voice(args.trials)
    if args.turns:
        await overhead(args.turns)
    counts = [int(c) for c in args.sessions.split(",") if c.strip()]
    if counts or args.offline_sessions:
        await concurrent(counts, args.seconds, args.offline_sessions, not args.no_pin)
    await memory(max(counts, default=100))


if __name__ == "__main__":
    asyncio.run(main())
