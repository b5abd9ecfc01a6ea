"""A schemathesis run of the OpenAPI document against the real server (the session's `api`
fixture): every operation, a bounded number of generated requests each; no answer is a
5xx, and every answer matches the document (status, media type, schema).

Cost: ~20-40 s (15 operations x MAX_EXAMPLES requests, most answered in a few ms).
"""

from __future__ import annotations

import json
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi import checks as openapi_checks

from devcell.server import openapi
from tests.server.conftest import Api

MAX_EXAMPLES = 15

schema = schemathesis.openapi.from_dict(json.loads(openapi.document_text()))


def test_the_served_document_is_the_generated_one(api: Api) -> None:
    assert api.client.get("/api/v1/openapi.json").json() == json.loads(openapi.document_text())


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_api_matches_its_document(case: Any, api: Api) -> None:
    query = dict(case.query or {})
    query.pop("watch", None)  # a watch streams until its timeout: tested in test_app.py
    query.pop("wait", None)  # an action's wait, the same: tested in test_actions.py
    if case.operation.path == "/api/v1/apply":
        query["dryRun"] = "true"  # generated manifests are judged, never recorded
    case.query = query
    kwargs = case.as_transport_kwargs(base_url="http://devcell")
    response = api.client.request(
        kwargs["method"], kwargs["url"], params=kwargs.get("params"),
        headers={k: v for k, v in (kwargs.get("headers") or {}).items()
                 if k.lower() not in ("host", "content-length")},
        content=kwargs.get("data") if isinstance(kwargs.get("data"), (bytes, str)) else None,
        json=kwargs.get("json"))
    assert response.status_code < 500, response.text
    # Not checked: that every schema-valid request is accepted (a manifest can match its
    # JSON schema and still break a rule the schema cannot say: a snapshot of a cell that is
    # not recorded, a name taken by another kind; those are 4xx problems, as apply -f's), and
    # the auth checks (the unix socket's caller is the admin: nothing to enforce there).
    case.validate_response(response, excluded_checks=[
        openapi_checks.ignored_auth, openapi_checks.positive_data_acceptance])
