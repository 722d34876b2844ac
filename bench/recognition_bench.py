"""Benchmark: offline recognition of order numbers and yes/no, German and English, and event-loop lag
while a recognizer loads.

1. **Accuracy**: eSpeak NG (German voice ``de``, US voice ``en-us``) speaks 20 order numbers of 1–5
   digits — a third digit by digit, a third in pairs ("siebenundvierzig elf"), a third as one number
   ("dreitausendvierhundertzwölf"), seeded — and ja/nein (yes/no) ×10. Each is fed in 20 ms pieces to
   the offline default (PocketSphinx, the bundled US English model; German through the German
   lexicon and grammar) with the words a collect node hands over (``phrases_for``), and the transcript
   is read by the runtime's number parser. Reported: exact digit strings out of 20, yes/no out of 10.
2. **Loop lag**: a 5 ms ticker runs on the event loop (a call's frame clock) while a stream opens;
   the longest tick delay is reported for: a warmed pool (what a call sees after start-up), a pool
   miss for a small-lexicon decoder (numbers, yes/no, German), and a pool miss for the full English
   decoder (free speech), and the start-up warm of 2 decoders per kind — decoding in this process,
   then the same in a decoder process (``parley.voice.engines.sphinx_host``). Side by side: the
   ticker alone (baseline).

    .venv/bin/python bench/recognition_bench.py [--seed 7] [--speed 160] [--lag-runs 5] [--lag-only]
        [--languages de,en]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from parley.flows.definition import FlowDefinition
from parley.runtime.numbers import spoken_digits
from parley.runtime.validators import parse_yes_no
from parley.voice.engines import sphinx, sphinx_host
from parley.voice.engines.espeak import EspeakTts
from parley.voice.engines.sphinx import Lexicon, PocketsphinxStt, pool, warm_pool
from parley.voice.session_call import phrases_for

DE = ["null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"]
DE_TEENS = [
    "zehn",
    "elf",
    "zwölf",
    "dreizehn",
    "vierzehn",
    "fünfzehn",
    "sechzehn",
    "siebzehn",
    "achtzehn",
    "neunzehn",
]
DE_TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]
EN = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
EN_TEENS = [
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]  # fmt: skip


def german(n: int) -> str:
    if n < 10:
        return DE[n]
    if n < 20:
        return DE_TEENS[n - 10]
    if n < 100:
        tens, unit = divmod(n, 10)
        return DE_TENS[tens] if unit == 0 else ("ein" if unit == 1 else DE[unit]) + "und" + DE_TENS[tens]
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return ("ein" if hundreds == 1 else DE[hundreds]) + "hundert" + (german(rest) if rest else "")
    thousands, rest = divmod(n, 1000)
    return ("ein" if thousands == 1 else german(thousands)) + "tausend" + (german(rest) if rest else "")


def english(n: int) -> str:
    if n < 10:
        return EN[n]
    if n < 20:
        return EN_TEENS[n - 10]
    if n < 100:
        tens, unit = divmod(n, 10)
        return EN_TENS[tens] + ("" if unit == 0 else " " + EN[unit])
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return EN[hundreds] + " hundred" + (" and " + english(rest) if rest else "")
    thousands, rest = divmod(n, 1000)
    return english(thousands) + " thousand" + (" " + english(rest) if rest else "")


def order_numbers(language: str, seed: int, count: int = 20) -> list[tuple[str, str]]:
    """(what is said, the digits) for ``count`` order numbers of 1–5 digits, three styles mixed."""
    rng = random.Random(seed)
    words, number = (DE, german) if language == "de" else (EN, english)
    cases = []
    for index in range(count):
        length = 1 + index % 5
        digits = str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(length - 1))
        style = index % 3
        if style == 0 or length == 1:
            said = " ".join(words[int(d)] for d in digits)
        elif style == 1:
            pairs = [digits[i : i + 2] for i in range(0, len(digits), 2)]
            said = " ".join(
                " ".join(words[int(d)] for d in p) if p[0] == "0" else number(int(p)) for p in pairs
            )
        else:
            said = number(int(digits))
        cases.append((said, digits))
    return cases


FLOW = FlowDefinition.model_validate(
    {
        "language": "de",
        "start_node": "n",
        "nodes": [
            {"id": "n", "type": "collect", "variable": "n", "kind": "digits", "prompt": "?", "next": "y"},
            {"id": "y", "type": "collect", "variable": "y", "kind": "yes_no", "prompt": "?", "next": "e"},
            {"id": "e", "type": "end", "text": "."},
        ],
    }
)


async def speak(text: str, voice: str, speed: int) -> bytes:
    return b"".join([c async for c in EspeakTts(voice, speed).synthesize(text, sample_rate=16000)])


async def hear(audio: bytes, language: str, phrases: list[str] | None) -> str:
    stream = await PocketsphinxStt().open_stream(language, 16000, phrases=phrases)
    padded = bytes(8000) + audio + bytes(16000)  # a breath before, the end-of-turn silence after
    for offset in range(0, len(padded), 640):
        stream.feed(padded[offset : offset + 640])
    await stream.finish()
    text = " ".join([t.text async for t in stream if t.is_final])
    await stream.aclose()
    return text


async def accuracy(language: str, seed: int, speed: int, verbose: bool) -> tuple[int, int]:
    voice = "de" if language == "de" else "en-us"
    numbers_ok = 0
    for said, digits in order_numbers(language, seed):
        heard = await hear(await speak(said, voice, speed), language, phrases_for(FLOW, "n", language))
        got = spoken_digits(heard)
        numbers_ok += got == digits
        if verbose and got != digits:
            print(f"    {digits:>6} said {said!r}, heard {heard!r} → {got}")
    answers_ok = 0
    yes, no = ("ja", "nein") if language == "de" else ("yes", "no")
    for index in range(10):
        said = yes if index % 2 == 0 else no
        heard = await hear(await speak(said, voice, speed), language, phrases_for(FLOW, "y", language))
        answers_ok += parse_yes_no(heard, FLOW.nodes[1]) == (said == yes)  # type: ignore[arg-type]
        if verbose and parse_yes_no(heard, FLOW.nodes[1]) != (said == yes):  # type: ignore[arg-type]
            print(f"    {said!r} heard {heard!r}")
    return numbers_ok, answers_ok


async def max_lag(work: object | None, alone_s: float = 0.3) -> float:
    """The longest delay of a 5 ms ticker on the loop while ``work`` (a coroutine factory) runs
    (``None``: the ticker alone for ``alone_s`` seconds, the baseline)."""
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - started - 0.005)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    if work is None:
        await asyncio.sleep(alone_s)
    else:
        await work()  # type: ignore[operator]
    await asyncio.sleep(0.02)
    stop.set()
    await task
    return max(lags) * 1000


async def open_and_close(language: str, phrases: list[str] | None) -> None:
    stream = await PocketsphinxStt().open_stream(language, 16000, phrases=phrases)
    await stream.finish()
    _ = [t async for t in stream]
    await stream.aclose()


async def loop_lag(runs: int) -> None:
    de_phrases = phrases_for(FLOW, "n", "de")

    def drain(kind: sphinx.DecoderKind) -> None:
        while pool().free(kind):
            pool().take(kind)

    figures: dict[str, list[float]] = {"baseline": [], "warm": [], "miss_lexicon": [], "miss_full": []}
    for _ in range(runs):
        figures["baseline"].append(await max_lag(None))
        await asyncio.to_thread(warm_pool, 2)
        figures["warm"].append(await max_lag(lambda: open_and_close("de", de_phrases)))
        drain(Lexicon("de"))
        figures["miss_lexicon"].append(await max_lag(lambda: open_and_close("de", de_phrases)))
        drain(None)
        figures["miss_full"].append(await max_lag(lambda: open_and_close("en", None)))
    # The same misses with decoders in a decoder process (PARLEY_VOICE_DECODER_PROCESSES): the
    # process warms nothing, so every stream builds its decoder there; and the start-up warm itself.
    figures.update(
        {
            "baseline_3s": [],
            "warm_up_here": [],
            "proc_warm_up": [],
            "proc_miss_lexicon": [],
            "proc_miss_full": [],
        }
    )
    for _ in range(runs):
        figures["baseline_3s"].append(await max_lag(None, 3.0))  # as long as a warm-up, for comparison
        drain(Lexicon("de"))
        drain(None)
        figures["warm_up_here"].append(await max_lag(lambda: asyncio.to_thread(warm_pool, 2)))
        hosts = await asyncio.to_thread(sphinx_host.start, 1, 2)
        assert hosts is not None
        figures["proc_warm_up"].append(await max_lag(lambda: asyncio.to_thread(hosts.ping)))  # noqa: B023
        await asyncio.to_thread(sphinx_host.stop)
        hosts = await asyncio.to_thread(sphinx_host.start, 1, 0)
        assert hosts is not None
        await asyncio.to_thread(hosts.ping)  # the process is up (imports done), its pool empty
        figures["proc_miss_lexicon"].append(await max_lag(lambda: open_and_close("de", de_phrases)))
        figures["proc_miss_full"].append(await max_lag(lambda: open_and_close("en", None)))
        await asyncio.to_thread(sphinx_host.stop)
    for name, values in figures.items():
        print(f"  loop lag, {name:<17} median {statistics.median(values):6.1f} ms, max {max(values):6.1f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--speed", type=int, default=160, help="eSpeak words per minute")
    parser.add_argument("--lag-runs", type=int, default=5, help="0: no loop-lag part")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--lag-only", action="store_true", help="skip the accuracy part")
    parser.add_argument("--languages", default="de,en", help="accuracy for these, comma-separated")
    args = parser.parse_args()
    await asyncio.to_thread(warm_pool, 2)
    for language in () if args.lag_only else args.languages.split(","):
        numbers_ok, answers_ok = await accuracy(language, args.seed, args.speed, not args.quiet)
        print(f"{language}: order numbers {numbers_ok}/20 exact, yes/no {answers_ok}/10")
    if args.lag_runs:
        await loop_lag(args.lag_runs)


if __name__ == "__main__":
    asyncio.run(main())
