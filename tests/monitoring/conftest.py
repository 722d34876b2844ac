from tests.calls.conftest import record

__all__ = ["record"]
