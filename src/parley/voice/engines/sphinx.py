"""Offline streaming speech recognition with PocketSphinx and its bundled US English model.

Audio is resampled to 16 kHz, gated by the VAD (so silence costs no decoding) and decoded in a worker
thread: partial hypotheses while someone speaks, a final transcript with word timings at the end of
each utterance (after the VAD's hangover) and when the stream finishes.

Only US English ships with the package. Other languages need a model on disk:
``<data_dir>/models/pocketsphinx/<language>/`` with the acoustic model in ``hmm/``, a pronunciation
dictionary ``*.dict`` and a language model ``*.lm.bin`` or ``*.lm`` (for example CMU Sphinx's German
model). Without one, the language is refused with a sentence saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import re
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parley.voice.audio import Resampler
from parley.voice.engines.base import (
    EngineUnavailable,
    LanguageUnavailable,
    SttEngine,
    SttStream,
    Transcript,
    Word,
)
from parley.voice.engines.vad import SpeechSegmenter, WebRtcVad, vad_installed

RATE = 16000
FRAME_MS = 20
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2
FRAMES_PER_SECOND = 100  # PocketSphinx's frame rate
PARTIAL_EVERY_MS = 300
BUNDLED = "en-us"
_FILLERS = re.compile(r"^(<s>|</s>|<sil>|\[.*\]|\+\+.*\+\+)$")

_EXECUTOR = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pocketsphinx")


def sphinx_installed() -> bool:
    return importlib.util.find_spec("pocketsphinx") is not None


def normalise_language(language: str | None) -> str:
    if not language:
        return BUNDLED
    lowered = language.strip().lower().replace("_", "-")
    return BUNDLED if lowered in ("en", "en-us") else lowered


@dataclass(frozen=True)
class ModelFiles:
    hmm: str
    dict: str
    lm: str


def find_model(models_dir: Path | None, language: str) -> ModelFiles | None:
    """A model for ``language`` under ``models_dir/pocketsphinx/<language>``, if one is there."""
    if models_dir is None:
        return None
    base = models_dir / "pocketsphinx" / language
    hmm = base / "hmm"
    dicts = sorted(base.glob("*.dict"))
    lms = sorted(base.glob("*.lm.bin")) or sorted(base.glob("*.lm"))
    if hmm.is_dir() and dicts and lms:
        return ModelFiles(str(hmm), str(dicts[0]), str(lms[0]))
    return None


class _DecoderPool:
    """Decoders take a quarter of a second to load; finished streams hand theirs back."""

    def __init__(self) -> None:
        self._free: dict[ModelFiles | None, list[Any]] = {}
        self._lock = threading.Lock()

    def take(self, model: ModelFiles | None) -> Any:
        with self._lock:
            free = self._free.get(model)
            if free:
                return free.pop()
        import pocketsphinx  # type: ignore[import-untyped]

        options: dict[str, Any] = {"samprate": RATE, "loglevel": "FATAL"}
        if model is not None:
            options.update(hmm=model.hmm, dict=model.dict, lm=model.lm)
        return pocketsphinx.Decoder(**options)

    def give(self, model: ModelFiles | None, decoder: Any) -> None:
        with self._lock:
            free = self._free.setdefault(model, [])
            if len(free) < 4:
                free.append(decoder)


_POOL = _DecoderPool()


def _word(segment_word: str) -> str:
    return re.sub(r"\(\d+\)$", "", segment_word)


class _Decoding:
    """Runs on a worker thread: VAD gating, utterances, hypotheses. Never touched concurrently."""

    def __init__(self, decoder: Any, use_vad: bool) -> None:
        self.decoder = decoder
        self.segmenter = (
            SpeechSegmenter(WebRtcVad(RATE, 2), frame_ms=FRAME_MS, frame_bytes=FRAME_BYTES)
            if use_vad
            else None
        )
        self.pending = b""
        self.samples = 0  # 16 kHz samples received so far
        self.utt_start_ms: int | None = None
        self.last_partial = ""
        self.last_partial_ms = 0

    def _now_ms(self) -> int:
        return self.samples * 1000 // RATE

    def _start(self, at_ms: int) -> None:
        self.decoder.start_utt()
        self.utt_start_ms = at_ms
        self.last_partial = ""
        self.last_partial_ms = at_ms

    def _partial(self) -> Transcript | None:
        if self.utt_start_ms is None or self._now_ms() - self.last_partial_ms < PARTIAL_EVERY_MS:
            return None
        self.last_partial_ms = self._now_ms()
        hyp = self.decoder.hyp()
        text = hyp.hypstr.strip() if hyp is not None else ""
        if not text or text == self.last_partial:
            return None
        self.last_partial = text
        return Transcript(text, False, self.utt_start_ms, self._now_ms())

    def _end(self) -> Transcript | None:
        if self.utt_start_ms is None:
            return None
        self.decoder.end_utt()
        start = self.utt_start_ms
        self.utt_start_ms = None
        words = []
        for seg in self.decoder.seg():
            if _FILLERS.match(seg.word):
                continue
            words.append(
                Word(
                    _word(seg.word),
                    start + seg.start_frame * 1000 // FRAMES_PER_SECOND,
                    start + (seg.end_frame + 1) * 1000 // FRAMES_PER_SECOND,
                    round(float(seg.prob), 3),
                )
            )
        if not words:
            return None
        confidences = [w.confidence for w in words if w.confidence is not None]
        confidence = round(sum(confidences) / len(confidences), 3) if confidences else None
        return Transcript(
            " ".join(w.text for w in words),
            True,
            words[0].start_ms,
            words[-1].end_ms,
            confidence,
            tuple(words),
        )

    def process(self, audio: bytes, final: bool) -> list[Transcript]:
        out: list[Transcript] = []
        if self.segmenter is None:
            if self.utt_start_ms is None and audio:
                self._start(self._now_ms())
            if audio:
                self.decoder.process_raw(audio, False, False)
                self.samples += len(audio) // 2
                partial = self._partial()
                if partial:
                    out.append(partial)
        else:
            data = self.pending + audio
            usable = len(data) // FRAME_BYTES * FRAME_BYTES
            self.pending = data[usable:]
            for offset in range(0, usable, FRAME_BYTES):
                frame = data[offset : offset + FRAME_BYTES]
                event = self.segmenter.process(frame)
                self.samples += FRAME_BYTES // 2
                if event is not None and event.kind == "start":
                    self._start(event.at_ms)
                    self.decoder.process_raw(event.audio, False, False)
                    continue
                if self.utt_start_ms is not None:
                    self.decoder.process_raw(frame, False, False)
                    partial = self._partial()
                    if partial:
                        out.append(partial)
                if event is not None and event.kind == "end":
                    done = self._end()
                    if done:
                        out.append(done)
            if final and self.utt_start_ms is not None and self.pending:
                self.decoder.process_raw(self.pending, False, False)
                self.samples += len(self.pending) // 2
                self.pending = b""
        if final:
            done = self._end()
            if done:
                out.append(done)
        return out


class SphinxStream(SttStream):
    def __init__(
        self,
        decoder: Any,
        model: ModelFiles | None,
        sample_rate: int,
        grammar: str | None,
        use_vad: bool,
    ) -> None:
        self._model = model
        self._decoder = decoder
        self._grammar = grammar
        if grammar is not None:
            decoder.add_jsgf_string("hints", grammar)
            decoder.activate_search("hints")
        self._decoding = _Decoding(decoder, use_vad)
        self._resampler = Resampler(sample_rate, RATE)
        self._audio: list[bytes] = []
        self._wake = asyncio.Event()
        self._finishing = False
        self._closed = False
        self._results: asyncio.Queue[Transcript | BaseException | None] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def feed(self, pcm16: bytes) -> None:
        if self._finishing or self._closed:
            raise RuntimeError("the stream is finished")
        if len(pcm16) % 2:
            raise ValueError("PCM16 audio must have an even number of bytes")
        converted = self._resampler.feed(pcm16)
        if converted:
            self._audio.append(converted)
            self._wake.set()

    async def finish(self) -> None:
        if not self._finishing:
            tail = self._resampler.flush()
            if tail:
                self._audio.append(tail)
            self._finishing = True
            self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                audio = b"".join(self._audio)
                self._audio.clear()
                final = self._finishing
                for item in await loop.run_in_executor(_EXECUTOR, self._decoding.process, audio, final):
                    self._results.put_nowait(item)
                if final:
                    break
        except Exception as exc:  # surfaced to the reader
            self._results.put_nowait(exc)
        finally:
            self._results.put_nowait(None)
            self._release()

    def _release(self) -> None:
        if self._decoder is None:
            return
        decoder, self._decoder = self._decoder, None
        try:
            if self._decoding.utt_start_ms is not None:
                decoder.end_utt()
            if self._grammar is not None:
                decoder.activate_search("_default")
                decoder.remove_search("hints")
        except RuntimeError:  # a decoder in a bad state is not reused
            return
        _POOL.give(self._model, decoder)

    async def __aiter__(self) -> AsyncIterator[Transcript]:
        while True:
            item = await self._results.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class PocketsphinxStt(SttEngine):
    name = "pocketsphinx"

    def __init__(self, language: str = BUNDLED, models_dir: Path | None = None, use_vad: bool = True) -> None:
        self.language = language
        self.models_dir = models_dir
        self.use_vad = use_vad and vad_installed()

    def _model(self, language: str) -> ModelFiles | None:
        if language == BUNDLED:
            return find_model(self.models_dir, language)
        model = find_model(self.models_dir, language)
        if model is None:
            raise LanguageUnavailable(
                f"PocketSphinx on this server has no model for {language!r}: only US English (en-us) is "
                f"bundled. Put a model in <data dir>/models/pocketsphinx/{language}/ (hmm/, *.dict, "
                "*.lm.bin) or configure a vendor speech-to-text provider."
            )
        return model

    @staticmethod
    def grammar(decoder: Any, phrases: Sequence[str]) -> str | None:
        words: list[str] = []
        for phrase in phrases:
            for word in re.findall(r"[a-zA-Z']+", phrase.lower()):
                if word not in words and decoder.lookup_word(word) is not None:
                    words.append(word)
        if not words:
            return None
        return "#JSGF V1.0;\ngrammar hints;\npublic <utt> = ( " + " | ".join(words) + " )+ ;\n"

    async def open_stream(
        self, language: str | None, sample_rate: int, *, phrases: Sequence[str] | None = None
    ) -> SttStream:
        if not sphinx_installed():
            raise EngineUnavailable(
                "PocketSphinx is not installed on this server; install it with 'pip install pocketsphinx'."
            )
        chosen = normalise_language(language or self.language)
        model = self._model(chosen)
        loop = asyncio.get_running_loop()
        decoder = await loop.run_in_executor(_EXECUTOR, _POOL.take, model)
        grammar = self.grammar(decoder, phrases) if phrases else None
        return SphinxStream(decoder, model, sample_rate, grammar, self.use_vad)
