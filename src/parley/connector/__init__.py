"""The order connector: a separate service that returns one repair-shop order for an order id.

Spec operation #6 (``GET {connector_url}/api/orders/{order_id}``, header ``X-API-Key``). Phone agents
call it as a tool while the caller waits, so the common request is served by a lean raw-ASGI fast path
(see :mod:`parley.connector.app`); everything unusual is answered by a regular FastAPI app.
"""

# The help of ``parley connector``, here so that ``parley --help`` shows it without importing the
# connector's commands (parley.cli registers them lazily; parley.connector.cli uses the same text).
CLI_HELP = (
    "The order connector: a separate service answering GET /api/orders/{order_id} (X-API-Key).\n\n"
    "Configured by PARLEY_CONNECTOR_* environment variables (PARLEY_CONNECTOR_DATABASE_URL, "
    "PARLEY_CONNECTOR_RATE_LIMIT, ...) and PARLEY_DATA_DIR."
)
