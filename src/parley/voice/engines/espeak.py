"""Offline text-to-speech with eSpeak NG, from the ``espeakng-loader`` wheel (library and voice data).

The library is driven through ctypes in synchronous mode: ``espeak_Synth`` runs in a worker thread
and hands audio (22.05 kHz PCM16) to a callback in small chunks. The library is one global instance
per process, so syntheses run one at a time on a dedicated thread; eSpeak is several hundred times
faster than real time, and the worker runs at most ``AHEAD_SECONDS`` of audio ahead of its reader
before it waits, so a slow reader never holds the engine for long texts. Closing the iterator makes
the callback answer "abort", which stops ``espeak_Synth`` at its next chunk.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib.util
import threading
from collections import deque
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from parley.voice.audio import Resampler
from parley.voice.engines.base import EngineUnavailable, LanguageUnavailable, TtsEngine

NATIVE_RATE = 22050
AHEAD_SECONDS = 20
CHUNK_MS = 60

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_PARAM_RATE = 1

# Language → eSpeak voice, when only a language is given.
LANGUAGE_VOICES = {"en": "en-us", "en-us": "en-us", "en-gb": "en", "de": "de", "de-de": "de"}

_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


def espeak_installed() -> bool:
    return importlib.util.find_spec("espeakng_loader") is not None


def espeak_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("espeakng-loader")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@dataclass
class SynthesisRun:
    """What one synthesis did (for tests and metrics)."""

    samples: int = 0
    cancelled: bool = False
    finished: bool = False


class _Run:
    """Between the worker thread and the async reader: chunks, a run-ahead limit, the cancel flag."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.chunks: deque[bytes | BaseException | None] = deque()
        self.ready = asyncio.Event()
        self.cond = threading.Condition()
        self.buffered = 0
        self.cancel = threading.Event()
        self.info = SynthesisRun()

    def push(self, item: bytes | BaseException | None) -> bool:
        """Worker side; answers False when the reader is gone."""
        with self.cond:
            while (
                isinstance(item, bytes)
                and self.buffered > AHEAD_SECONDS * NATIVE_RATE * 2
                and not self.cancel.is_set()
            ):
                self.cond.wait(0.5)
            if self.cancel.is_set():
                return False
            self.chunks.append(item)
            if isinstance(item, bytes):
                self.buffered += len(item)
        try:
            self.loop.call_soon_threadsafe(self.ready.set)
        except RuntimeError:  # the event loop is closed: nobody reads any more
            self.cancel.set()
            return False
        return True

    async def pull(self) -> bytes | BaseException | None:
        while True:
            with self.cond:
                if self.chunks:
                    item = self.chunks.popleft()
                    if isinstance(item, bytes):
                        self.buffered -= len(item)
                    self.cond.notify_all()
                    return item
                self.ready.clear()
            await self.ready.wait()

    def stop(self) -> None:
        with self.cond:
            self.cancel.set()
            self.cond.notify_all()


class _Library:
    def __init__(self) -> None:
        import espeakng_loader  # type: ignore[import-untyped]

        self.lib: Any = ctypes.CDLL(espeakng_loader.get_library_path())
        self.lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self.lib.espeak_Initialize.restype = ctypes.c_int
        self.lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        self.lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self.lib.espeak_Synth.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        rate = self.lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, CHUNK_MS, espeakng_loader.get_data_path().encode(), 0
        )
        if rate != NATIVE_RATE:
            raise EngineUnavailable("eSpeak NG is installed but could not be initialised.")
        self.current: _Run | None = None
        self.callback = _Callback(self._on_audio)  # kept referenced for the library's lifetime
        self.lib.espeak_SetSynthCallback(self.callback)

    def _on_audio(self, wav: Any, count: int, _events: Any) -> int:
        run = self.current
        if run is None or run.cancel.is_set():
            return 1
        if count > 0 and wav:
            run.info.samples += count
            if not run.push(ctypes.string_at(wav, count * 2)):
                run.info.cancelled = True
                return 1
        return 0

    def synthesize(self, run: _Run, text: str, voice: str, speed: int) -> None:
        """On the engine thread: the whole synthesis, its chunks pushed to ``run``."""
        try:
            if run.cancel.is_set():
                run.info.cancelled = True
                return
            if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
                run.push(LanguageUnavailable(f"eSpeak NG has no voice {voice!r}; try 'en-us', 'en' or 'de'."))
                return
            self.lib.espeak_SetParameter(_PARAM_RATE, speed, 0)
            data = text.encode("utf-8")
            self.current = run
            try:
                self.lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
            finally:
                self.current = None
            run.info.finished = not run.info.cancelled
            run.push(None)
        except BaseException as exc:  # pragma: no cover - surfaced to the reader, never lost
            run.push(EngineUnavailable("eSpeak NG failed to synthesize the text."))
            raise exc


_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="espeak")
_LIBRARY: _Library | None = None
_LOAD_LOCK = threading.Lock()


def _library() -> _Library:
    global _LIBRARY
    with _LOAD_LOCK:
        if _LIBRARY is None:
            if not espeak_installed():
                raise EngineUnavailable(
                    "eSpeak NG is not installed on this server; install it with 'pip install espeakng-loader'."
                )
            try:
                _LIBRARY = _Library()
            except OSError as exc:
                raise EngineUnavailable("eSpeak NG is installed but its library does not load.") from exc
        return _LIBRARY


class EspeakTts(TtsEngine):
    name = "espeak"

    def __init__(self, voice: str = "de", speed: int = 160) -> None:
        self.voice = voice
        self.speed = speed
        self.last_run: SynthesisRun | None = None

    def resolve_voice(self, voice: str | None, language: str | None) -> str:
        if voice:
            return voice
        if language:
            return LANGUAGE_VOICES.get(language.lower(), language.lower())
        return self.voice

    async def synthesize(
        self, text: str, *, voice: str | None = None, language: str | None = None, sample_rate: int = 16000
    ) -> AsyncIterator[bytes]:
        library = _library()
        loop = asyncio.get_running_loop()
        run = _Run(loop)
        self.last_run = run.info
        resampler = Resampler(NATIVE_RATE, sample_rate)
        name = self.resolve_voice(voice, language)
        work = loop.run_in_executor(_EXECUTOR, library.synthesize, run, text, name, self.speed)
        try:
            while True:
                item = await run.pull()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                out = resampler.feed(item)
                if out:
                    yield out
            tail = resampler.flush()
            if tail:
                yield tail
        finally:
            if not run.info.finished:
                run.info.cancelled = True
            run.stop()
            work.add_done_callback(lambda f: f.exception())  # never "exception was never retrieved"

    async def idle(self) -> None:
        """Wait until the engine thread has finished what was queued before this call."""
        await asyncio.get_running_loop().run_in_executor(_EXECUTOR, lambda: None)
