"""The job wiring: which modules hold job handlers, for ``parley worker`` and the in-process runner.

Every background job is a handler registered in :data:`parley.kit.jobs.registry` by a domain's task
module. Both places that run jobs (the server's in-process runner and ``parley worker`` on the Redis
queue) load exactly the modules listed here, so a new job is one line in :data:`TASK_MODULES`.
"""

from __future__ import annotations

import importlib

from parley.config import Settings
from parley.kit.jobs import JobRegistry, registry
from parley.kit.outbound import outbound_policy

TASK_MODULES: tuple[str, ...] = (
    "parley.channels.tasks",  # WhatsApp: answer an inbound message, send pending replies
    "parley.evaluations.tasks",  # run a chunk of an evaluation run
    "parley.integrations.tasks",  # refresh OAuth2 tokens about to expire
    "parley.knowledge.tasks",  # ingest (extract, chunk, index) a knowledge document
    "parley.notifications.tasks",  # deliver a notification (webhook, Slack, email), with retries
    "parley.calls.tasks",  # the brain classifies a call's sentiment with the model; post-call analysis
    "parley.webhooks.tasks",  # deliver a call event to a subscriber's webhook, with retries
    "parley.privacy.tasks",  # delete calls, recordings and transcripts past their retention
    "parley.sessions.privacy",  # the sessions' personal data, for the privacy jobs (no job of its own)
    "parley.channels.privacy",  # WhatsApp messages as personal data, for the privacy jobs (no job of its own)
    "parley.campaigns.tasks",  # campaigns: dialing rounds, answering-machine handling
    "parley.campaigns.privacy",  # campaign contacts as personal data, for the privacy jobs (no job of its own)
)


def load_tasks() -> JobRegistry:
    """Import every task module (each registers its handlers at import); answers the registry."""
    for name in TASK_MODULES:
        importlib.import_module(name)
    return registry


async def run(settings: Settings, *, concurrency: int, grace: int) -> None:
    """``parley worker``: load the handlers, then work the Redis queue until SIGTERM/SIGINT."""
    from parley.kit.queue import run_worker

    load_tasks()
    outbound_policy(settings)  # the one outbound (SSRF) policy, built at start-up as in the app factory
    await run_worker(settings, concurrency=concurrency, grace=grace)
