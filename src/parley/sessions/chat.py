"""``parley chat``: talk to an agent in the terminal, through the platform's HTTP API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape


class ChatError(Exception):
    """A problem worth one clear line on the terminal (exit code 1)."""


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = None
    if isinstance(detail, list):
        detail = "; ".join(str(d.get("msg", d)) for d in detail if isinstance(d, dict))
    return f"{response.status_code}: {detail or response.reason_phrase}"


def _find_flow(client: httpx.Client, flow: str | None) -> dict[str, Any]:
    if flow and flow.startswith("flow_"):
        response = client.get(f"/api/flows/{flow}")
        if response.status_code != 200:
            raise ChatError(f"Flow {flow!r} cannot be opened ({_detail(response)}).")
        return dict(response.json())
    params: dict[str, Any] = {"limit": 200}
    if flow:
        params["q"] = flow
    response = client.get("/api/flows", params=params)
    if response.status_code != 200:
        raise ChatError(f"The flows cannot be listed ({_detail(response)}).")
    items = [f for f in response.json()["items"] if not flow or f["name"].lower() == flow.lower()]
    if not items:
        raise ChatError(f"No flow named {flow!r}." if flow else "This organization has no flows yet.")
    published = [f for f in items if f.get("status") == "published"]
    return dict((published or items)[0])


def _choose_organization(client: httpx.Client, flow: str | None) -> str | None:
    """The organization to talk in when none was named: the only one, or the only one that has the
    flow asked for. Several candidates is a clear error naming ``--org`` and ``PARLEY_ORG``."""
    response = client.get("/api/organizations")
    if response.status_code != 200:
        return None  # an API key is bound to its organization; let the API answer for itself
    organizations = [dict(o) for o in response.json()]
    if len(organizations) <= 1:
        return str(organizations[0]["id"]) if organizations else None
    candidates = organizations
    if flow:
        candidates = [o for o in organizations if _has_flow(client, str(o["id"]), flow)]
        if len(candidates) == 1:
            return str(candidates[0]["id"])
    names = ", ".join(f"{o['name']} ({o['id']})" for o in (candidates or organizations))
    what = f"the flow {flow!r} is in several of them" if flow and candidates else "which one?"
    raise ChatError(
        f"You belong to {len(organizations)} organizations and {what} — {names}. "
        "Choose one with --org ORG_ID or PARLEY_ORG=ORG_ID."
    )


def _has_flow(client: httpx.Client, organization_id: str, flow: str) -> bool:
    headers = {"X-Organization-Id": organization_id}
    if flow.startswith("flow_"):
        return client.get(f"/api/flows/{flow}", headers=headers).status_code == 200
    response = client.get("/api/flows", params={"limit": 200, "q": flow}, headers=headers)
    return response.status_code == 200 and any(
        f["name"].lower() == flow.lower() for f in response.json()["items"]
    )


def _show(console: Console, turn: dict[str, Any]) -> None:
    for event in turn.get("events", []):
        kind = event.get("type")
        if kind == "say" and event.get("text"):
            console.print(f"[bold cyan]agent ›[/] {escape(event['text'])}")
        elif kind == "tool_call":
            data = event.get("data") or {}
            console.print(f"[dim]  ⚙ {escape(str(data.get('tool')))} → {escape(str(data.get('status')))}[/]")
        elif kind == "transfer":
            data = event.get("data") or {}
            status = f" ({data['status']})" if data.get("status") else ""
            console.print(f"[yellow]  ↪ transfer to {escape(str(data.get('to')))}{escape(status)}[/]")


def _events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    name = ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            yield name, json.loads(line[6:])


def _show_stream(console: Console, response: httpx.Response) -> dict[str, Any]:
    """Print a streamed turn: the model's text as it comes, then the turn's other events; answers
    the ``done`` event's fields (``status``...)."""
    streamed: dict[str | None, str] = {}  # text printed live per node, not yet matched by a say
    open_line = False
    for name, data in _events(response):
        if name == "delta":
            if not open_line:
                console.print("[bold cyan]agent ›[/] ", end="")
                open_line = True
            console.print(escape(data.get("text") or ""), end="")
            streamed[data.get("node_id")] = streamed.get(data.get("node_id"), "") + (data.get("text") or "")
            continue
        if open_line:
            console.print()
            open_line = False
        if name == "say":
            pending = streamed.get(data.get("node_id"), "").lstrip()
            said = data.get("text") or ""
            if said and pending.startswith(said):
                streamed[data.get("node_id")] = pending[len(said) :]  # already on the screen
                continue
            _show(console, {"events": [data]})
        elif name in ("tool_call", "transfer"):
            _show(console, {"events": [data]})
        elif name == "error":
            console.print(f"[red]{escape(str(data.get('detail')))}[/]")
        elif name == "done":
            return {"status": data.get("status"), "outcome": data.get("outcome")}
    if open_line:
        console.print()
    return {}


def run_chat(
    *,
    url: str,
    token: str,
    flow: str | None,
    org: str | None,
    language: str | None,
    channel: str,
    console: Console,
    read_line: Any = input,
) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=120.0) as client:
        try:
            org = org or _choose_organization(client, flow)
            if org:
                client.headers["X-Organization-Id"] = org
            chosen = _find_flow(client, flow)
        except httpx.HTTPError as exc:
            raise ChatError(f"The platform at {url} cannot be reached ({type(exc).__name__}).") from exc
        body: dict[str, Any] = {"flow_id": chosen["id"], "channel": channel}
        if language:
            body["variables"] = {"language": language}
        if chosen.get("status") != "published":
            body["channel"] = "test"
        created = client.post("/api/sessions", json=body)
        if created.status_code != 200:
            raise ChatError(f"The session cannot be started ({_detail(created)}).")
        turn = created.json()
        session_id = turn["id"]
        console.print(f"[dim]Talking to {escape(chosen['name'])} ({session_id}); Ctrl-D ends.[/]")
        _show(console, turn)
        while turn["status"] == "active":
            try:
                text = read_line("you › ").strip()
            except (EOFError, KeyboardInterrupt):
                ended = client.post(f"/api/sessions/{session_id}/end")
                console.print()
                if ended.status_code == 200:
                    turn = ended.json()
                break
            if not text:
                continue
            with client.stream(
                "POST",
                f"/api/sessions/{session_id}/messages",
                json={"text": text[:4000]},
                headers={"Accept": "text/event-stream"},
            ) as response:
                if response.status_code != 200:
                    response.read()
                    console.print(f"[red]{escape(_detail(response))}[/]")
                    if response.status_code in (404, 409):
                        break
                    continue
                turn = {**turn, **_show_stream(console, response)}
        outcome = turn.get("outcome") or turn.get("status")
        why = f" ({turn.get('end_reason')})" if outcome == "failed" and turn.get("end_reason") else ""
        console.print(f"[dim]Session ended: {escape(str(outcome))}{escape(why)}.[/]")
    return 0
