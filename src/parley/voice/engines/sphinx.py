"""Offline streaming speech recognition with PocketSphinx and its bundled US English model.

Audio is resampled to 16 kHz, gated by the VAD (so silence costs no decoding) and decoded in a worker
thread: partial hypotheses while someone speaks, a final transcript with word timings at the end of
each utterance (after the VAD's hangover) and when the stream finishes.

Only a US English model ships with the package. German is heard through it with a grammar: German
words transcribed to the model's phones (:mod:`parley.voice.engines.lexicon`), so a German decoder
knows numbers, ja/nein and a few answer words, nothing else. Numbers and yes/no in English use the
same kind of small-lexicon decoder (tens of milliseconds to load); free English speech uses the full
dictionary and language model. Other languages need a model on disk:
``<data_dir>/models/pocketsphinx/<language>/`` with the acoustic model in ``hmm/``, a pronunciation
dictionary ``*.dict`` and a language model ``*.lm.bin`` or ``*.lm``. Without one, the language is
refused with a sentence saying what the engine can serve.

Creating a decoder holds the GIL (0.2 s for the full model on an idle machine, seconds under load), so
:func:`warm_pool` fills the pool at start-up, off the event loop, and finished streams hand their
decoders back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import re
import tempfile
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from parley.voice.audio import Resampler
from parley.voice.engines import lexicon, sphinx_host
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


@dataclass(frozen=True)
class Lexicon:
    """A decoder of the bundled acoustic model with one of our small lexicons and no language model."""

    language: str  # "de" or "en"


# What a pooled decoder was built from: a model on disk, a small lexicon, or (None) the bundled
# US English model with its full dictionary and language model.
DecoderKind = ModelFiles | Lexicon | None

_DICT_FILES: dict[str, str] = {}
POOL_KEEP = 4  # decoders kept per kind once streams hand them back


def _dictionary_file(language: str) -> str:
    path = _DICT_FILES.get(language)
    if path is None:
        with tempfile.NamedTemporaryFile("w", suffix=f"-{language}.dict", delete=False) as handle:
            handle.write(lexicon.dictionary_text(language))
        path = _DICT_FILES[language] = handle.name
    return path


class _DecoderPool:
    """Decoders are slow to load and hold the GIL meanwhile: warmed at start-up, handed back after use."""

    def __init__(self) -> None:
        self._free: dict[DecoderKind, list[Any]] = {}
        self._lock = threading.Lock()
        self.created = 0  # decoders built (the tests see whether a stream had to build one)

    def take(self, kind: DecoderKind) -> Any:
        with self._lock:
            free = self._free.get(kind)
            if free:
                return free.pop()
        return self.build(kind)

    def build(self, kind: DecoderKind) -> Any:
        import pocketsphinx  # type: ignore[import-untyped]

        options: dict[str, Any] = {"samprate": RATE, "loglevel": "FATAL"}
        if isinstance(kind, ModelFiles):
            options.update(hmm=kind.hmm, dict=kind.dict, lm=kind.lm)
        elif isinstance(kind, Lexicon):
            options.update(lm=None, dict=_dictionary_file(kind.language))
        decoder = pocketsphinx.Decoder(**options)
        self.created += 1
        return decoder

    def give(self, kind: DecoderKind, decoder: Any) -> None:
        with self._lock:
            free = self._free.setdefault(kind, [])
            if len(free) < POOL_KEEP:
                free.append(decoder)

    def free(self, kind: DecoderKind) -> int:
        with self._lock:
            return len(self._free.get(kind, ()))


_POOL = _DecoderPool()

# What a server warms at start-up: the kinds the offline default serves, two of each.
WARM_KINDS: tuple[DecoderKind, ...] = (None, Lexicon("de"))


def warm_pool(count: int = 2, kinds: Sequence[DecoderKind] = WARM_KINDS) -> int:
    """Fill the pool up to ``count`` free decoders per kind (blocking: run it off the event loop)."""
    if not sphinx_installed():
        return 0
    built = 0
    for kind in kinds:
        while _POOL.free(kind) < count:
            decoder = _POOL.build(kind)
            if isinstance(kind, Lexicon):  # the grammars every call of that language uses
                for grammar in (lexicon.number_grammar(kind.language), lexicon.yes_no_grammar(kind.language)):
                    use_grammar(decoder, grammar)
            _POOL.give(kind, decoder)
            built += 1
    return built


def pool() -> _DecoderPool:
    return _POOL


def use_grammar(decoder: Any, grammar: str) -> None:
    """Activate ``grammar`` on the decoder, compiling it only the first time this decoder sees it.

    Compiling a JSGF grammar holds the GIL for tens of milliseconds, so each decoder keeps the
    grammars it has compiled as named searches, and :func:`warm_pool` compiles the common ones.
    """
    name = "g" + hashlib.sha256(grammar.encode()).hexdigest()[:16]
    try:
        decoder.activate_search(name)
    except KeyError:
        decoder.add_jsgf_string(name, grammar)
        decoder.activate_search(name)


def _word(segment_word: str) -> str:
    return re.sub(r"\(\d+\)$", "", segment_word)


class _Decoding:
    """Runs on a worker thread: VAD gating, utterances, hypotheses. Never touched concurrently."""

    def __init__(self, decoder: Any, use_vad: bool, spell: bool = False) -> None:
        self.decoder = decoder
        self.spell = spell  # lexicon words are ASCII ("fuenf"): show them as spelled ("fünf")
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
        if self.spell:
            text = " ".join(lexicon.display(w) for w in text.split())
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
        # a grammar search that found nothing in the audio (a cough, noise) has no segments at all
        for seg in self.decoder.seg() or ():
            if _FILLERS.match(seg.word):
                continue
            words.append(
                Word(
                    lexicon.display(_word(seg.word)) if self.spell else _word(seg.word),
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


class DecoderSession:
    """One stream's decoder and decoding state, driven by blocking calls from one thread at a time.

    Runs in this process (tests, ``PARLEY_VOICE_DECODER_PROCESSES=0``) or inside a decoder process
    (:mod:`parley.voice.engines.sphinx_host`), where building and decoding never hold this process's GIL.
    """

    def __init__(
        self, kind: DecoderKind, grammar: str | None, phrases: Sequence[str] | None, use_vad: bool
    ) -> None:
        decoder = _POOL.take(kind)
        if grammar is None and phrases and not isinstance(kind, Lexicon):
            grammar = PocketsphinxStt.grammar(decoder, phrases)
        if grammar is not None:
            use_grammar(decoder, grammar)
        self._decoder: Any = decoder
        self._kind = kind
        self._grammar = grammar
        self._decoding = _Decoding(decoder, use_vad, spell=isinstance(kind, Lexicon))

    def process(self, audio: bytes, final: bool) -> list[Transcript]:
        return self._decoding.process(audio, final)

    def release(self) -> None:
        """Hand the decoder back to the pool (idempotent)."""
        if self._decoder is None:
            return
        decoder, self._decoder = self._decoder, None
        try:
            if self._decoding.utt_start_ms is not None:
                decoder.end_utt()
            if self._grammar is not None and not isinstance(self._kind, Lexicon):
                decoder.activate_search("_default")  # the grammar stays compiled for the next stream
        except RuntimeError:  # a decoder in a bad state is not reused
            return
        _POOL.give(self._kind, decoder)


class SessionPort(Protocol):
    """What a stream drives: a :class:`DecoderSession` here, or one in a decoder process."""

    def process(self, audio: bytes, final: bool) -> list[Transcript]: ...

    def release(self) -> None: ...


class SphinxStream(SttStream):
    def __init__(self, session: SessionPort, sample_rate: int, executor: Executor) -> None:
        self._session: SessionPort | None = session
        self._executor = executor
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
        session = self._session
        assert session is not None
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                audio = b"".join(self._audio)
                self._audio.clear()
                final = self._finishing
                for item in await loop.run_in_executor(self._executor, session.process, audio, final):
                    self._results.put_nowait(item)
                if final:
                    break
        except Exception as exc:  # surfaced to the reader
            self._results.put_nowait(exc)
        finally:
            self._results.put_nowait(None)
            self._release()

    def _release(self) -> None:
        session, self._session = self._session, None
        if isinstance(session, DecoderSession):
            session.release()  # cheap here: the decoder goes back to this process's pool
        elif session is not None:
            # in a decoder process this is a round trip: never on the event loop's time
            self._executor.submit(session.release)

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
        model = find_model(self.models_dir, language)
        if model is None and language != BUNDLED and lexicon.base_language(language) not in lexicon.LEXICONS:
            raise LanguageUnavailable(unavailable_sentence(language, self.models_dir))
        return model

    def kind_for(self, language: str, phrases: Sequence[str] | None) -> tuple[DecoderKind, str | None]:
        """The decoder kind and grammar for a stream (public for tests and the benchmark)."""
        model = self._model(language)
        if model is not None:
            return model, None  # a grammar needs the decoder's dictionary: made in open_stream
        base = lexicon.base_language(language)
        if base == "en":
            # English keeps the full dictionary, with a loop over the node's words when it has any:
            # the structured English number grammar measured no better on digit strings
            return None, None
        return Lexicon(base), lexicon.grammar_for(phrases, base)

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
        kind, grammar = self.kind_for(chosen, phrases)
        loop = asyncio.get_running_loop()
        hosts = sphinx_host.hosts()
        if hosts is not None:  # decoders live in decoder processes: nothing here holds the GIL for long
            session: SessionPort = await loop.run_in_executor(
                sphinx_host.EXECUTOR, hosts.open, kind, grammar, phrases, self.use_vad
            )
            return SphinxStream(session, sample_rate, sphinx_host.EXECUTOR)
        phrase_list = list(phrases) if phrases else None
        session = await loop.run_in_executor(
            _EXECUTOR, DecoderSession, kind, grammar, phrase_list, self.use_vad
        )
        return SphinxStream(session, sample_rate, _EXECUTOR)


def languages(models_dir: Path | None) -> list[str]:
    """What PocketSphinx can hear on this server: the bundled model, German by grammar, models on disk."""
    served = ["en", "de"]
    if models_dir is not None and (models_dir / "pocketsphinx").is_dir():
        served += sorted(
            p.name for p in (models_dir / "pocketsphinx").iterdir() if find_model(models_dir, p.name)
        )
    return list(dict.fromkeys(served))


def serves(language: str, models_dir: Path | None) -> bool:
    chosen = normalise_language(language)
    return (
        chosen == BUNDLED
        or lexicon.base_language(chosen) in lexicon.LEXICONS
        or (find_model(models_dir, chosen) is not None)
    )


def unavailable_sentence(language: str, models_dir: Path | None) -> str:
    return (
        f"PocketSphinx on this server cannot hear {language!r}: it serves US English (en, en-US: free "
        "speech), German (de, de-DE: numbers, ja/nein and choices of known words, through a grammar on the "
        "bundled model)"
        + (
            f" and the models on disk ({', '.join(languages(models_dir)[2:])})"
            if languages(models_dir)[2:]
            else ""
        )
        + f". Put a model in <data dir>/models/pocketsphinx/{language}/ (hmm/, *.dict, *.lm.bin) or "
        "configure a vendor speech-to-text provider."
    )
