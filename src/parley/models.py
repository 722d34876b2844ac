"""Every domain's tables, imported in one place for Alembic and the tests."""

from parley.api_keys.models import ApiKey
from parley.assets.models import Asset
from parley.audit.models import AuditEvent
from parley.auth.models import User
from parley.brain.models import BrainSignal
from parley.calls.models import Call
from parley.datasets.models import Dataset, DatasetItem, DatasetTag
from parley.flows.models import Flow, FlowVersion
from parley.kit.db import Base
from parley.knowledge.models import KnowledgeChunk, KnowledgeDocument
from parley.llm.models import LLMUsage
from parley.notifications.models import (
    NotificationAttempt,
    NotificationChannel,
    NotificationDelivery,
    NotificationRule,
)
from parley.organizations.models import Membership, Organization
from parley.providers.models import ProviderConfig
from parley.sessions.models import ConversationSession
from parley.tools.models import Tool

__all__ = [
    "ApiKey",
    "Asset",
    "AuditEvent",
    "Base",
    "BrainSignal",
    "Call",
    "ConversationSession",
    "Dataset",
    "DatasetItem",
    "DatasetTag",
    "Flow",
    "FlowVersion",
    "KnowledgeChunk",
    "KnowledgeDocument",
    "LLMUsage",
    "Membership",
    "NotificationAttempt",
    "NotificationChannel",
    "NotificationDelivery",
    "NotificationRule",
    "Organization",
    "ProviderConfig",
    "Tool",
    "User",
]
