"""A real Temporal dev server for the durable-session tests, started by the tests
(:func:`managedloop.contrib.temporal.testing.dev_server`: offline, 127.0.0.1, free port)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from managedloop.contrib.temporal.testing import dev_server


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dev_server(log_path=tmp_path_factory.mktemp("temporal") / "server.log") as address:
        yield address
