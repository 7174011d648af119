"""TEST_EVENT_LOOP=uvloop runs every async test on uvloop, the production loop
(servicekit/runtime/event_loop.py); by default pytest-asyncio's stock loop."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

if os.environ.get("TEST_EVENT_LOOP") == "uvloop":
    import asyncio

    import pytest
    import uvloop

    def pytest_asyncio_loop_factories(
        config: pytest.Config, item: pytest.Item
    ) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
        return {"uvloop": uvloop.new_event_loop}
