"""The order connector: a separate service that returns one repair-shop order for an order id.

Spec operation #6 (``GET {connector_url}/api/orders/{order_id}``, header ``X-API-Key``). Phone agents
call it as a tool while the caller waits, so the common request is served by a lean raw-ASGI fast path
(see :mod:`parley.connector.app`); everything unusual is answered by a regular FastAPI app.
"""
