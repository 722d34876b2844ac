"""What the template budget costs: the demo agent's templates rendered by Parley's budgeted, immutable
sandbox side by side with Jinja2's stock ImmutableSandboxedEnvironment, in one run.

    .venv/bin/python bench/template_bench.py --rounds 5 --number 1000

Prints the median microseconds per render of each and their ratio, per template.
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from typing import Any

from jinja2 import ChainableUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from parley.demo.flows import ORDER_STATUS_FLOW
from parley.kit.templates import render_template

VARIABLES: dict[str, Any] = {
    "language": "de",
    "shop_name": "Autohaus Demo",
    "order": {
        "success": True,
        "order": {
            "manufacturer_name": "Mercedes-Benz",
            "model_name": "C-Klasse",
            "plate": "L-ST 6751",
            "project_status": "Wartet auf Teile",
            "finish_date": "2026-11-30",
            "total_gross_cost": 3070.76,
        },
    },
    "lines": [{"price": p} for p in range(50)],
}
LOOP = (
    "{% for l in lines %}{{ loop.index }}: {{ l.price }} Euro{% if not loop.last %}, {% endif %}{% endfor %}"
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args()
    stock = ImmutableSandboxedEnvironment(undefined=ChainableUndefined, autoescape=False)
    say = next(n["text"] for n in ORDER_STATUS_FLOW["nodes"] if n["id"] == "say_status")
    for label, text in (("say_status node", say), ("50-item loop", LOOP)):
        compiled = stock.from_string(text)
        candidates = {
            "stock sandbox (compiled once)": lambda c=compiled: c.render(VARIABLES),
            "stock sandbox (parse + render)": lambda t=text: stock.from_string(t).render(VARIABLES),
            "parley render_template": lambda t=text: render_template(t, VARIABLES),
        }
        medians = {}
        for _ in range(args.rounds):  # the candidates alternate inside each round
            for name, fn in candidates.items():
                seconds = timeit.timeit(fn, number=args.number) / args.number
                medians.setdefault(name, []).append(seconds * 1e6)
        base = statistics.median(medians["stock sandbox (parse + render)"])
        print(f"\n{label}")
        for name, values in medians.items():
            print(
                f"  {name:34s} {statistics.median(values):9.1f} µs   × {statistics.median(values) / base:.2f}"
            )


if __name__ == "__main__":
    main()
