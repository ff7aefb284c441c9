"""The failure kinds are written once, in the wire (`ferret.wire.FailureKind`): the verdict's records take
their kinds from it, and keep each kind as its plain name."""

import pytest
from pydantic import ValidationError

from ferret import wire
from ferret.gate.models import RunFailure, RunFault, Verdict

FAULTS = {"exception", "crash", "timeout", "out_of_memory"}


@pytest.mark.parametrize("kind", [k.value for k in wire.FailureKind])
def test_a_run_failure_takes_every_kind_of_the_wire_as_its_plain_name(kind):
    failure = RunFailure(kind=kind, message="m")
    assert failure.kind == kind and type(failure.kind) is str
    assert f"{failure.kind}" == kind
    assert RunFailure.model_validate_json(failure.model_dump_json()).kind == kind


def test_a_run_failure_refuses_a_kind_the_wire_does_not_name():
    with pytest.raises(ValidationError):
        RunFailure(kind="gremlins", message="m")  # pyright: ignore[reportArgumentType]  (the wrong kind is the test)


def test_the_verdict_schema_lists_the_wires_kinds():
    schema = Verdict.model_json_schema()
    assert schema["$defs"]["FailureKind"]["enum"] == [k.value for k in wire.FailureKind]


@pytest.mark.parametrize("kind", [k.value for k in wire.FailureKind])
def test_a_fault_is_one_of_the_kinds_that_end_a_process(kind):
    if kind in FAULTS:
        # the kind's value is checked at run time, by pydantic: that is what this tests
        fault = RunFault(kind=wire.FailureKind(kind), message="m", variant="v")  # pyright: ignore[reportArgumentType]
        assert fault.kind == kind and type(fault.kind) is str
    else:
        with pytest.raises(ValidationError):
            RunFault(kind=kind, message="m", variant="v")
