"""A local OpenAI-compatible server speaking the real chat-completions protocol, for tests.

Behaviour is chosen by the requested model name, so a test steers it without patching anything:
- any model: echoes the last user message ("You said: ...");
- tools offered and the last user message mentions "order": a tool call to the first tool, with the
  digits of the message as ``order_id``;
- ``error-500`` / ``error-429``: an OpenAI-style error body with that status;
- ``stall``: waits ``slow_seconds`` before the first byte of the answer;
- ``slow``: streams its words ``slow_seconds / 10`` apart;
- ``garbage``: a 200 whose body is not a chat completion;
- a sentiment classification (the system message asks for a ``"sentiment"`` JSON object): a JSON
  verdict on the user message (the caller's turns): ``negative`` with confidence 0.9 when it
  contains "furious", "fed up" or "nase voll"; the same inside a ```json code fence with words around
  it for "unverschämt"; ``negative`` with confidence 0.5 for "a bit impatient"; prose instead of JSON
  for "gibberish" (before any other marker); otherwise ``neutral`` with confidence 0.8.
- an evaluation's simulated caller (the system message says "You play the caller"): answers the
  agent's last line (the last user message): a question for the order number gets the digits of the
  persona ("My order number is 12."), the cost and callback questions get "no thanks"/"nein danke", anything
  else (a goodbye) gets ``[HANGUP]``;
- a post-call analysis (the system message says "You analyse a finished phone call"): a JSON object
  with a ``summary`` ("The caller said: <first caller line>") and ``fields`` read off the user
  message's field list and conversation: bool fields are true when the caller asked to be called
  back ("call me back", "callback", "rückruf", "zurückrufen"), str fields get the caller's last line,
  int/number fields the first number the caller said, enum fields the first allowed value said;
  with "no-summary" in a caller line the summary is missing (an answer that is not the object asked for);
- an evaluation's judge (the system message says "You judge a phone conversation"): one verdict per
  numbered criterion; a criterion with a word in single quotes passes when that word occurs in the
  conversation (case-insensitive), one without passes.
Streams send ``chat.completion.chunk`` events, a usage chunk (``stream_options.include_usage``) and
``[DONE]``. The server records each request and whether a stream was abandoned by the client.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class StubState:
    api_key: str = "sk-test-stub-key"
    slow_seconds: float = 3.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    abandoned_streams: int = 0
    completed_streams: int = 0


def _verdict(sentiment: str, confidence: float, reason: str) -> str:
    return json.dumps({"sentiment": sentiment, "confidence": confidence, "reason": reason})


def _classify(user: str) -> str:
    text = user.casefold()
    if "gibberish" in text:
        return "The caller seems somewhat unhappy, I think."
    if any(marker in text for marker in ("furious", "fed up", "nase voll")):
        return _verdict("negative", 0.9, "The caller is clearly upset.")
    if "unverschämt" in text:
        verdict = _verdict("negative", 0.85, "Der Anrufer ist verärgert.")
        return f"Hier ist die Bewertung:\n```json\n{verdict}\n```"
    if "a bit impatient" in text:
        return _verdict("negative", 0.5, "Slightly impatient.")
    return _verdict("neutral", 0.8, "A calm request.")


def _play_caller(system: str, agent: str) -> str:
    line = agent.casefold()
    if any(word in line for word in ("call back", "rückruf", "cost", "kosten")):
        return "nein danke" if "rückruf" in line or "kosten" in line else "no thanks"
    if "number" in line or "nummer" in line:
        digits = "".join(re.findall(r"\d", system.split("Goal:", 1)[0])) or "0"
        return f"Meine Nummer ist {digits}." if "nummer" in line else f"My order number is {digits}."
    return "[HANGUP]"


def _judge(user: str) -> str:
    conversation, _, criteria = user.partition("Criteria:")
    verdicts = []
    for line in criteria.strip().splitlines():
        criterion = line.split(".", 1)[-1].strip()
        quoted = re.findall(r"'([^']+)'", criterion)
        missing = [word for word in quoted if word.casefold() not in conversation.casefold()]
        reason = f"{missing[0]!r} was not said." if missing else "Everything asked for was said."
        verdicts.append({"criterion": criterion, "passed": not missing, "reason": reason})
    return json.dumps({"criteria": verdicts})


_CALLBACK = ("call me back", "callback", "rückruf", "zurückrufen")


def _analyse(user: str) -> str:
    fields_part, _, conversation = user.partition("Conversation:")
    caller = [
        line.removeprefix("Caller: ") for line in conversation.splitlines() if line.startswith("Caller: ")
    ]
    said = " ".join(caller).casefold()
    fields: dict[str, Any] = {}
    for line in fields_part.splitlines():
        match = re.match(r"^- (\w+): (.*)$", line)
        if not match:
            continue
        name, kind = match.groups()
        if kind.startswith("true or false"):
            fields[name] = any(marker in said for marker in _CALLBACK)
        elif kind.startswith("a short text"):
            fields[name] = caller[-1] if caller else None
        elif kind.startswith(("a whole number", "a number")):
            numbers = re.findall(r"\d+", said)
            fields[name] = int(numbers[0]) if numbers else None
        elif kind.startswith("one of"):
            values = json.loads("[" + kind.removeprefix("one of ").split(" — ")[0] + "]")
            fields[name] = next((v for v in values if v.casefold() in said), None)
    if "no-summary" in said:
        return json.dumps({"fields": fields})
    summary = f"The caller said: {caller[0]}" if caller else "The caller said nothing."
    return json.dumps({"summary": summary, "fields": fields})


def _answer(body: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    messages = body.get("messages", [])
    user = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    if '"sentiment"' in system:
        return _classify(user), []
    if "You play the caller" in system:
        return _play_caller(system, user), []
    if "You judge a phone conversation" in system:
        return _judge(user), []
    if "You analyse a finished phone call" in system:
        return _analyse(user), []
    tools = body.get("tools") or []
    if tools and "order" in user.lower():
        digits = "".join(re.findall(r"\d", user)) or "0"
        call = {
            "id": "call_stub_1",
            "type": "function",
            "function": {
                "name": tools[0]["function"]["name"],
                "arguments": json.dumps({"order_id": int(digits)}),
            },
        }
        return None, [call]
    return f"You said: {user}", []


def _usage(body: dict[str, Any], text: str | None) -> dict[str, int]:
    prompt = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
    completion = len((text or "").split()) or 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def make_openai_stub(state: StubState) -> Starlette:
    async def models(request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {state.api_key}":
            return JSONResponse({"error": {"message": "Incorrect API key provided."}}, status_code=401)
        return JSONResponse({"object": "list", "data": [{"id": "stub-model", "object": "model"}]})

    async def completions(request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {state.api_key}":
            return JSONResponse(
                {"error": {"message": "Incorrect API key provided.", "type": "auth"}}, status_code=401
            )
        body = await request.json()
        state.requests.append(body)
        model = body.get("model", "")
        if model.startswith("error-"):
            status = int(model.split("-", 1)[1])
            return JSONResponse(
                {"error": {"message": f"stub failure {status}", "type": "server_error"}}, status_code=status
            )
        if model == "garbage":
            return PlainTextResponse("this is not json")
        text, calls = _answer(body)
        if body.get("stream"):
            return StreamingResponse(_stream(state, body, text, calls), media_type="text/event-stream")
        if model == "stall":
            await asyncio.sleep(state.slow_seconds)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        return JSONResponse(
            {
                "id": "chatcmpl-stub",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
                ],
                "usage": _usage(body, text),
            }
        )

    return Starlette(
        routes=[Route("/v1/models", models), Route("/v1/chat/completions", completions, methods=["POST"])]
    )


async def _stream(
    state: StubState, body: dict[str, Any], text: str | None, calls: list[dict[str, Any]]
) -> AsyncIterator[bytes]:
    model = body.get("model", "")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {
            "id": "chatcmpl-stub",
            "object": "chat.completion.chunk",
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(data)}\n\n".encode()

    try:
        if model == "stall":
            await asyncio.sleep(state.slow_seconds)
        yield chunk({"role": "assistant"})
        for word in (text or "").split(" ") if text else []:
            if model == "slow":
                await asyncio.sleep(state.slow_seconds / 10)
            yield chunk({"content": word + " "})
        for index, call in enumerate(calls):
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": arguments[:half]},
                        }
                    ]
                }
            )
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]})
        yield chunk({}, "tool_calls" if calls else "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            yield f"data: {json.dumps({'id': 'chatcmpl-stub', 'choices': [], 'usage': _usage(body, text)})}\n\n".encode()
        yield b"data: [DONE]\n\n"
        state.completed_streams += 1
    except (asyncio.CancelledError, GeneratorExit):
        state.abandoned_streams += 1
        raise
