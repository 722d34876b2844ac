"""Every domain's tables, imported in one place for Alembic and the tests."""

from parley.api_keys.models import ApiKey
from parley.audit.models import AuditEvent
from parley.auth.models import User
from parley.kit.db import Base
from parley.organizations.models import Membership, Organization

import parley.flows.models  # noqa: F401
import parley.tools.models  # noqa: F401
import parley.datasets.models  # noqa: F401
import parley.knowledge.models  # noqa: F401
import parley.providers.models  # noqa: F401
import parley.assets.models  # noqa: F401
import parley.llm.models  # noqa: F401

__all__ = ["ApiKey", "AuditEvent", "Base", "Membership", "Organization", "User"]
