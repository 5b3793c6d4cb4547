"""kvpilot.errors: the registry classes and conversions."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from kvpilot import errors as E
from kvpilot.v1 import common_pb2

ERRORS_JSON = Path(__file__).resolve().parents[2] / "errcode" / "errors.json"


def test_registry_matches_the_data_file() -> None:
    # The Go test sdk/errcode TestPythonRegistry checks the whole file; this
    # one keeps the Python side honest when only Python tests run.
    rows = json.loads(ERRORS_JSON.read_text())["errors"]
    numbers = [row["number"] for row in rows]
    assert len(E.REGISTRY) == len(numbers) == 39
    assert [c.number for c in E.REGISTRY.values()] == numbers


@pytest.mark.parametrize("cls", list(E.REGISTRY.values()), ids=list(E.REGISTRY))
def test_each_code_has_a_class_in_its_family(cls) -> None:
    family = E.FAMILIES[cls.number // 1000]
    assert issubclass(cls, family) and issubclass(cls, E.KvpilotError)
    assert cls.message and cls.hint and cls.code.islower()
    assert getattr(E, cls.__name__) is cls
    e = E.error_for(cls.code, "detail")
    assert type(e) is cls and e.detail == "detail" and e.index == -1


def test_str_and_fields() -> None:
    e = E.UnknownBlock("hash 7", index=3)
    assert str(e).startswith("directive 3: unknown_block: unknown block: hash 7 (hint: ")
    assert e.to_dict() == {
        "code": "unknown_block",
        "number": 3001,
        "message": "unknown block",
        "hint": E.UnknownBlock.hint,
        "detail": "hash 7",
        "index": 3,
    }
    assert isinstance(E.InvalidLayout("x"), E.InvalidError)
    assert isinstance(E.HostRestarted("x"), E.UnknownRegistration)
    assert E.is_transient(E.HostRestarted()) and E.is_transient(E.Unavailable())
    assert not E.is_transient(E.UnknownRequest()) and not E.is_transient(E.DeadlineExceeded())


def test_unregistered_code_reads_as_internal() -> None:
    e = E.error_for("made_up", "d")
    assert isinstance(e, E.Internal) and e.code == "made_up" and e.number == 9001


STATUS_MESSAGES = ERRORS_JSON.parent / "testdata" / "status_messages.json"


def _status_cases() -> list[dict]:
    return json.loads(STATUS_MESSAGES.read_text())["cases"]


@pytest.mark.parametrize("case", _status_cases(), ids=lambda c: c["message"][:40])
def test_from_status_follows_the_shared_cases(case: dict) -> None:
    """The cases Go's errcode.FromStatus is held to, read the same here."""
    e = E.from_status(case["grpc"], case["message"])
    assert (e.code, e.detail, e.index) == (case["code"], case["detail"], case["index"])
    assert type(e) is E.REGISTRY[case["code"]]


def test_parse_status_message_without_code() -> None:
    assert E.parse_status_message("failed to connect to all addresses") is None
    assert E.parse_status_message("unknown_blocks: x") is None


def test_from_proto() -> None:
    assert E.from_proto(None) is None
    assert E.from_proto(common_pb2.Error()) is None
    e = E.from_proto(
        common_pb2.Error(code="pin_budget_exhausted", number=4001, detail="device", index=-1)
    )
    assert isinstance(e, E.PinBudgetExhausted) and e.detail == "device"
    # A code from a newer host keeps what the host said, in its family.
    e = E.from_proto(
        common_pb2.Error(code="brand_new", number=4099, message="new", hint="h", index=1)
    )
    assert type(e) is E.ExhaustedError
    assert (e.code, e.number, e.message, e.hint, e.index) == ("brand_new", 4099, "new", "h", 1)


def test_pickle_keeps_everything() -> None:
    for e in (E.UnknownBlock("d", index=4), E.error_for("made_up", "x"), E.HostRestarted("r")):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and back.to_dict() == e.to_dict()
