"""How long the demo agent talks when it answers "where is my car?": seconds of eSpeak NG speech of the
status answer and the question after it, the texts before issue 17 side by side with today's, over
demo orders (median). Run: ``PYTHONPATH=src .venv/bin/python bench/demo_speech.py [--orders 50]``."""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from parley.connector.demo import generate_orders
from parley.demo.flows import ORDER_STATUS_FLOW
from parley.kit.templates import render_template
from parley.voice.engines.espeak import EspeakTts

# The status answer and the question after it as they were before issue 17 (the baseline).
BEFORE = (
    "{% set o = order.order %}{% if language == 'en' %}Your {{ o.manufacturer_name }} "
    "{{ o.model_name }} ({{ o.plate }}) is at status {{ o.project_status }}. Expected "
    "completion: {{ o.finish_date }}. Gross cost: {{ o.total_gross_cost }} euros. Would you like a call back?"
    "{% else %}Ihr {{ o.manufacturer_name }} {{ o.model_name }} ({{ o.plate }}) hat den Status "
    "{{ o.project_status }}. Voraussichtliche Fertigstellung: {{ o.finish_date }}. Kosten "
    "brutto: {{ o.total_gross_cost }} Euro. Möchten Sie einen Rückruf?{% endif %}"
)
NODES = {node["id"]: node for node in ORDER_STATUS_FLOW["nodes"]}
NOW = NODES["say_status"]["text"] + " " + NODES["offer_cost"]["prompt"]


async def seconds(tts: EspeakTts, text: str, voice: str) -> float:
    samples = 0
    async for chunk in tts.synthesize(text, voice=voice, sample_rate=16000):
        samples += len(chunk) // 2
    return samples / 16000


async def main(count: int) -> None:
    tts = EspeakTts()
    orders = list(generate_orders(count, seed=1))
    for language, voice in (("de", "de"), ("en", "en-us")):
        figures: dict[str, list[float]] = {"before": [], "now": []}
        for order in orders:
            context: dict[str, Any] = {
                **ORDER_STATUS_FLOW["variables"],
                "language": language,
                "order": {"order": order},
            }
            for name, template in (("before", BEFORE), ("now", NOW)):
                figures[name].append(await seconds(tts, render_template(template, context), voice))
        before, now = statistics.median(figures["before"]), statistics.median(figures["now"])
        print(f"{language}: before {before:.1f} s, now {now:.1f} s ({now / before:.2f}x), {count} orders")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orders", type=int, default=50)
    asyncio.run(main(parser.parse_args().orders))
