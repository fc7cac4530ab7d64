"""schemathesis over the console's OpenAPI schema: every operation fuzzed against a real
node through the console under uvicorn; no 5xx, and every response matches the schema
(status code, content type, body)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("fastapi", reason="pip install -e '.[web]'")
schemathesis = pytest.importorskip("schemathesis", reason="pip install -e '.[web]'")
import httpx  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

from conveyor.web.app import create_fastapi  # noqa: E402
from conveyor.web.config import WebConfig  # noqa: E402
from tests.web.conftest import WebProcess  # noqa: E402

EXAMPLES = 25  # per operation: 22 operations in about 20 s on 2 cores

# schemathesis' lazy fixture loader does not work with pytest 9, so the schema comes from
# the app's code here, and test_served_schema_is_the_fuzzed_one checks the server serves
# that very schema.
_APP = create_fastapi(WebConfig())
SCHEMA_DOC = _APP.openapi()
_APP.state.console.close()
schema = schemathesis.openapi.from_dict(SCHEMA_DOC)


def test_served_schema_is_the_fuzzed_one(web: WebProcess) -> None:
    served = httpx.get(f"{web.url}/api/v1/openapi.json", timeout=15).json()
    assert served == SCHEMA_DOC


# One pytest item per operation, each with a node ID of its own: schema.parametrize() gives
# its items one shared node ID, and pytest-xdist (`make test`) schedules by node ID, so it
# ran one operation of the 32.
OPERATIONS = {result.ok().label: result.ok() for result in schema.get_all_operations()}


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_every_operation(label: str, web: WebProcess) -> None:
    @given(case=OPERATIONS[label].as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def call(case: Any) -> None:
        case.call_and_validate(base_url=web.url, timeout=30)

    call()
