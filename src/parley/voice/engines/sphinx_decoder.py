"""PocketSphinx decoders: models and lexicons, the decoder pool and one stream's decoding state.

What runs where a decoder lives: in this process (``PARLEY_VOICE_DECODER_PROCESSES=0``, tests) or in
a decoder process (:mod:`parley.voice.engines.sphinx_host`), which imports this module and nothing of
the engine. The engine that opens streams on them is :mod:`parley.voice.engines.sphinx`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parley.voice.engines import lexicon
from parley.voice.engines.base import Transcript, Word
from parley.voice.engines.vad import SpeechSegmenter, WebRtcVad

RATE = 16000
FRAME_MS = 20
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2
FRAMES_PER_SECOND = 100  # PocketSphinx's frame rate
PARTIAL_EVERY_MS = 300
BUNDLED = "en-us"
_FILLERS = re.compile(r"^(<s>|</s>|<sil>|\[.*\]|\+\+.*\+\+)$")

DECODE_EXECUTOR = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pocketsphinx")


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


def phrase_grammar(decoder: Any, phrases: Sequence[str]) -> str | None:
    """A JSGF grammar looping over the phrases' words the decoder's dictionary knows, or None."""
    words: list[str] = []
    for phrase in phrases:
        for word in re.findall(r"[a-zA-Z']+", phrase.lower()):
            if word not in words and decoder.lookup_word(word) is not None:
                words.append(word)
    if not words:
        return None
    return "#JSGF V1.0;\ngrammar hints;\npublic <utt> = ( " + " | ".join(words) + " )+ ;\n"


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
            grammar = phrase_grammar(decoder, phrases)
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
