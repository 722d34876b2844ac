"""Every domain's tables, imported in one place for Alembic and the tests."""

from parley.assets.models import Asset
from parley.audit.models import AuditEvent
from parley.auth.models import ApiKey, Membership, Organization, User
from parley.brain.models import BrainSignal
from parley.calls.models import Call
from parley.campaigns.models import Campaign, CampaignContact, DoNotCall
from parley.channels.models import ChannelRoute, WhatsAppAccount, WhatsAppMessage
from parley.datasets.models import Dataset, DatasetItem, DatasetTag
from parley.evaluations.models import EvaluationResult, EvaluationRun, EvaluationSuite
from parley.flows.models import Flow, FlowVersion
from parley.integrations.models import IntegrationClient, IntegrationConnection, OAuthState
from parley.kit.db import Base
from parley.knowledge.models import KnowledgeChunk, KnowledgeDocument
from parley.llm.models import LLMUsage
from parley.notifications.models import (
    NotificationAttempt,
    NotificationChannel,
    NotificationDelivery,
    NotificationRule,
)
from parley.privacy.models import PrivacySettings
from parley.providers.models import ProviderConfig
from parley.sessions.models import ConversationSession
from parley.telephony.models import DispatchRule, PhoneNumber, SipTrunk, SyncLease, TwilioCall
from parley.tools.models import Tool
from parley.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEvent, WebhookSubscription

__all__ = [
    "ApiKey",
    "Asset",
    "AuditEvent",
    "Base",
    "BrainSignal",
    "Call",
    "Campaign",
    "CampaignContact",
    "ChannelRoute",
    "ConversationSession",
    "Dataset",
    "DatasetItem",
    "DatasetTag",
    "DispatchRule",
    "DoNotCall",
    "EvaluationResult",
    "EvaluationRun",
    "EvaluationSuite",
    "Flow",
    "FlowVersion",
    "IntegrationClient",
    "IntegrationConnection",
    "KnowledgeChunk",
    "KnowledgeDocument",
    "LLMUsage",
    "Membership",
    "NotificationAttempt",
    "NotificationChannel",
    "NotificationDelivery",
    "NotificationRule",
    "OAuthState",
    "Organization",
    "PhoneNumber",
    "PrivacySettings",
    "ProviderConfig",
    "SipTrunk",
    "SyncLease",
    "Tool",
    "TwilioCall",
    "User",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEvent",
    "WebhookSubscription",
    "WhatsAppAccount",
    "WhatsAppMessage",
]
