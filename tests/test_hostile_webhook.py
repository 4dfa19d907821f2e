"""The admission webhook's review and mutate functions fed the seeded hostile objects of
tests/hostile_objects.py (issue #18, point 6): every AdmissionReview gets an answer, allowed
or denied with a message, and only what is no AdmissionReview at all raises ReviewError."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgpu.kube.admission.pod_env import mutate
from kgpu.kube.admission.review import ReviewError, review
from tests.hostile_objects import (
    HOSTILE_SETTINGS,
    Obj,
    any_object,
    json_values,
    names,
    queues,
    tally,
    texts,
)

# A failing example is shown whole, however long (with -W error this warning would hide it).
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
SCHEDULER = "kgpu-scheduler"
UID = "705ab4f5-6393-11e8-b7cc-42010a800002"
OPERATIONS = st.sampled_from(("CREATE", "UPDATE", "DELETE", "CONNECT"))
# A denial shows the values it names cut short (kgpu.model.limits.show_json); one far longer
# than this would mean a hostile value was copied whole into the answer.
LONGEST_MESSAGE = 4096


class Queues:
    """The Queues the webhook is given to fence pods and PodGroups: hostile ones too."""

    def __init__(self, items: list[Obj]) -> None:
        self._items = items

    def items(self) -> list[dict[str, Any]]:
        return self._items


def envelope(obj: Any, operation: str, old: Any = None, user: Any = None) -> Obj:
    """An AdmissionReview as kube-apiserver sends it, about ``obj`` of any shape."""
    kind = obj.get("kind") if isinstance(obj, dict) else None
    version = obj.get("apiVersion") if isinstance(obj, dict) else None
    group, _, version = version.rpartition("/") if isinstance(version, str) else ("", "", "v1")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    which = {"group": group, "version": version, "kind": kind}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": which,
            "requestKind": which,
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "operation": operation,
            "userInfo": user if user is not None else {"username": "tenant", "groups": []},
            "object": obj,
            "oldObject": old,
        },
    }


def _checked(answer: Obj) -> bool:
    """Whether ``answer`` denies; asserts it is a whole AdmissionReview answer first."""
    json.dumps(answer)  # what the server sends back must be JSON
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == UID
    assert response["allowed"] in (True, False)
    if response["allowed"]:
        return False
    message = response["status"]["message"]
    assert isinstance(message, str) and message, response
    assert len(message) <= LONGEST_MESSAGE, message[:300]
    return True


@settings(HOSTILE_SETTINGS, max_examples=1500)
@given(
    obj=any_object(),
    operation=OPERATIONS,
    old=st.none() | any_object(),
    fenced=st.none() | st.lists(queues(), max_size=3),
)
def test_the_review_answers_every_hostile_object(
    obj: Obj, operation: str, old: Obj | None, fenced: list[Obj] | None
) -> None:
    source = Queues(fenced) if fenced is not None else None
    denied = _checked(review(envelope(obj, operation, old), SCHEDULER, queues=source))
    tally("webhook review", 1, int(denied))


@settings(HOSTILE_SETTINGS, max_examples=600)
@given(obj=any_object(), operation=OPERATIONS)
def test_mutate_answers_every_hostile_object_with_a_patch_or_a_denial(
    obj: Obj, operation: str
) -> None:
    answer = mutate(envelope(obj, operation), SCHEDULER, token=lambda n: "0" * (2 * n))
    denied = _checked(answer)
    patch = answer["response"].get("patch")
    if patch is not None:
        assert isinstance(json.loads(base64.b64decode(patch)), list)
    tally("webhook mutate", 1, int(denied))


def _request_edits() -> st.SearchStrategy[dict[str, Any]]:
    """Replacements for an AdmissionReview request's fields other than its uid."""
    fields = st.sampled_from(("kind", "name", "namespace", "operation", "userInfo", "object"))
    return st.dictionaries(fields, st.one_of(json_values(), texts(), names("h")), max_size=3)


@settings(HOSTILE_SETTINGS, max_examples=400)
@given(obj=any_object(), edits=_request_edits(), body=st.none() | json_values())
def test_a_hostile_review_envelope_is_answered_or_refused_as_no_review(
    obj: Obj, edits: dict[str, Any], body: Any
) -> None:
    """A request's own fields of any shape are answered; a body that is no AdmissionReview
    (``body`` when drawn) raises ReviewError, which the server answers with HTTP 400."""
    sent: Any = body if body is not None else envelope(obj, "CREATE")
    if body is None:
        sent["request"].update(edits)
    for judge in (review, mutate):
        try:
            answer = judge(sent, SCHEDULER)
        except ReviewError as exc:
            assert body is not None and str(exc), exc
            tally("webhook envelope", 1, 1)
            continue
        assert body is None
        tally("webhook envelope", 1, int(_checked(answer)))
