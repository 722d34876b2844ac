"""Jobs about call records: the brain's sentiment classifier, handed what it may read and mark of a call."""

from __future__ import annotations

from parley.brain.sentiment import SENTIMENT_JOB
from parley.brain.tasks import sentiment_job
from parley.calls.service import CallsForTheBrain
from parley.kit.jobs import registry

registry.register(SENTIMENT_JOB, sentiment_job(CallsForTheBrain()))
