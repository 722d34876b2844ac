"""``parley eval run``: run a suite against a flow through the platform's HTTP API, show progress and
a table, write JUnit XML and JSON on request; the exit code says whether every scenario passed."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

POLL_SECONDS = 0.5
_COLOURS = {"passed": "green", "failed": "red", "error": "magenta", "skipped": "yellow", "pending": "dim"}


class EvalError(Exception):
    """A problem worth one clear line on the terminal (exit code 2)."""


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = None
    if isinstance(detail, list):
        detail = "; ".join(str(d.get("msg", d)) for d in detail if isinstance(d, dict))
    return f"{response.status_code}: {detail or response.reason_phrase}"


def _ok(response: httpx.Response, what: str) -> Any:
    if response.status_code != 200:
        raise EvalError(f"{what} failed ({_detail(response)}).")
    return response.json()


def _flow_id(client: httpx.Client, flow: str) -> str:
    if flow.startswith("flow_"):
        return str(_ok(client.get(f"/api/flows/{flow}"), f"Opening flow {flow!r}")["id"])
    page = _ok(client.get("/api/flows", params={"q": flow, "limit": 200}), "Listing the flows")
    matches = [f for f in page["items"] if f["name"].casefold() == flow.casefold()]
    if not matches:
        raise EvalError(f"No flow named {flow!r}.")
    return str(matches[0]["id"])


def _suite_id(client: httpx.Client, suite: str) -> str:
    if suite.startswith("ds_"):
        return str(
            _ok(client.get(f"/api/evaluations/suites/{suite}"), f"Opening suite {suite!r}")["dataset_id"]
        )
    found = _ok(client.get("/api/evaluations/suites", params={"name": suite}), "Listing the suites")
    if not found:
        raise EvalError(f"No test suite named {suite!r} (see GET /api/evaluations/suites).")
    return str(found[0]["dataset_id"])


def _results(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 200}
        if cursor:
            params["cursor"] = cursor
        page = _ok(
            client.get(f"/api/evaluations/runs/{run_id}/results", params=params), "Reading the results"
        )
        results.extend(page["items"])
        cursor = page.get("next_cursor")
        if not cursor:
            return results


def _wait(client: httpx.Client, run: dict[str, Any], console: Console, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(escape(run["suite_name"]), total=run["total"])
        try:
            while run["status"] in ("queued", "running"):
                if time.monotonic() > deadline:
                    client.post(f"/api/evaluations/runs/{run['id']}/cancel")
                    raise EvalError(f"The run did not finish within {timeout:.0f} s; it was cancelled.")
                time.sleep(POLL_SECONDS)
                run = _ok(client.get(f"/api/evaluations/runs/{run['id']}"), "Reading the run")
                progress.update(task, completed=run["done"])
        except KeyboardInterrupt:
            client.post(f"/api/evaluations/runs/{run['id']}/cancel")
            raise EvalError("Interrupted; the run was cancelled.") from None
        progress.update(task, completed=run["done"])
    return run


def _first_problem(result: dict[str, Any]) -> str:
    if result["failures"]:
        failure = result["failures"][0]
        more = f" (+{len(result['failures']) - 1})" if len(result["failures"]) > 1 else ""
        actual = str(failure.get("actual"))
        actual = actual if len(actual) <= 80 else actual[:77] + "..."
        return f"{failure['expectation']}: expected {failure.get('expected')!r}, got {actual!r}{more}"
    return str(result.get("reason") or "")


def table(run: dict[str, Any], results: list[dict[str, Any]]) -> Table:
    version = f"version {run['flow_version']}" if run["flow_version"] else "draft"
    title = f"{run['suite_name']} on {run['flow_name']} ({version}) — run {run['id']}"
    grid = Table(title=escape(title), show_lines=False)
    grid.add_column("#", justify="right")
    grid.add_column("scenario")
    grid.add_column("status")
    grid.add_column("turns", justify="right")
    grid.add_column("slowest turn ms", justify="right")
    if run["mode"] == "voice":
        grid.add_column("heard ok", justify="right")
        grid.add_column("voice-to-voice ms", justify="right")
        grid.add_column("barge-in", overflow="fold")
    grid.add_column("why", overflow="fold")
    for result in results:
        status = result["status"]
        slowest = max((t["total_ms"] for t in result["turns"]), default=None)
        cells = [
            str(result["position"] + 1),
            escape(result["name"]),
            f"[{_COLOURS.get(status, 'white')}]{status}[/]",
            str(max(len(result["turns"]) - 1, 0)),
            "" if slowest is None else f"{slowest:.1f}",
        ]
        if run["mode"] == "voice":
            cells.extend(_voice_cells(result))
        cells.append("" if status == "passed" else escape(_first_problem(result)))
        grid.add_row(*cells)
    return grid


def _voice_cells(result: dict[str, Any]) -> list[str]:
    voiced = [t["voice"] for t in result["turns"] if t.get("voice")]
    accuracy = [v["recognition_accuracy"] for v in voiced if v.get("recognition_accuracy") is not None]
    latency = [v["voice_to_voice_ms"] for v in voiced if v.get("voice_to_voice_ms") is not None]
    barge = []
    for turn in result["turns"]:
        figures = (turn.get("voice") or {}).get("barge_in")
        if not figures:
            continue
        if figures.get("false_interruption"):
            what = "false, went on" if figures.get("agent_continued") else "false, went SILENT"
        elif figures.get("agent_interrupted"):
            stopped = figures.get("stopped_ms")
            what = "stopped" + (f" in {stopped:.0f} ms" if stopped is not None else "")
        else:
            what = "not interrupted"
        barge.append(f"t{turn['turn']}: {what}")
    return [
        f"{sum(accuracy) / len(accuracy):.0%}" if accuracy else "",
        f"{max(latency):.0f}" if latency else "",
        "; ".join(barge),
    ]


def junit(run: dict[str, Any], results: list[dict[str, Any]]) -> bytes:
    counts = run["counts"]
    suite = ET.Element(
        "testsuite",
        name=run["suite_name"],
        tests=str(run["total"]),
        failures=str(counts["failed"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"] + counts["pending"]),
        time=f"{sum((r.get('duration_ms') or 0.0) for r in results) / 1000:.3f}",
    )
    for result in results:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"{run['suite_name']}.{run['flow_name']}",
            name=result["name"],
            time=f"{(result.get('duration_ms') or 0.0) / 1000:.3f}",
        )
        status = result["status"]
        if status == "failed":
            failure = ET.SubElement(case, "failure", message=_first_problem(result))
            failure.text = "\n".join(
                f"{f['expectation']}: expected {f.get('expected')!r}, got {f.get('actual')!r}"
                for f in result["failures"]
            )
        elif status == "error":
            ET.SubElement(case, "error", message=str(result.get("reason") or "error"))
        elif status in ("skipped", "pending"):
            ET.SubElement(case, "skipped", message=str(result.get("reason") or status))
        transcript = "\n".join(f"{t['speaker']}: {t['text']}" for t in result["transcript"])
        if transcript:
            ET.SubElement(case, "system-out").text = transcript
    root = ET.Element("testsuites")
    root.append(suite)
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))


def run_eval(
    *,
    url: str,
    token: str,
    org: str | None,
    flow: str,
    suite: str,
    version: int | None,
    junit_path: Path | None,
    voice: bool = False,
    pace: str | None = None,
    json_path: Path | None,
    timeout: float,
    console: Console,
    out: Console,
) -> bool:
    """Run the suite; True when every scenario passed."""
    headers = {"Authorization": f"Bearer {token}"}
    if org:
        headers["X-Organization-Id"] = org
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=60.0) as client:
        try:
            body: dict[str, Any] = {"suite": _suite_id(client, suite), "flow_id": _flow_id(client, flow)}
            if version is not None:
                body["version"] = version
            if voice:
                body["mode"] = "voice"
                if pace is not None:
                    body["voice"] = {"pace": pace}
            run = _ok(client.post("/api/evaluations/runs", json=body), "Starting the run")
            run = _wait(client, run, console, timeout)
            results = _results(client, run["id"])
        except httpx.HTTPError as exc:
            raise EvalError(f"The platform at {url} cannot be reached ({type(exc).__name__}).") from exc
    out.print(table(run, results))
    counts = run["counts"]
    if run["mode"] == "voice":
        summary = run["summary"]
        out.print(
            f"voice: words heard as said {summary.get('recognition_accuracy_mean')}, "
            f"pace {summary.get('pace', 'fast')}, voice-to-voice p50 "
            f"{summary.get('voice_to_voice_ms_p50')} ms, p95 {summary.get('voice_to_voice_ms_p95')} ms; "
            f"interruptions {summary.get('interruptions', 0)} "
            f"(false {summary.get('false_interruptions', 0)})"
        )
    out.print(
        f"{run['status']}: {counts['passed']} passed, {counts['failed']} failed, {counts['error']} error(s), "
        f"{counts['skipped']} skipped of {run['total']}"
    )
    if junit_path is not None:
        junit_path.write_bytes(junit(run, results))
    if json_path is not None:
        json_path.write_text(json.dumps({"run": run, "results": results}, indent=2, ensure_ascii=False))
    return bool(run["passed"])
