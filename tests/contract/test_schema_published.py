"""The JSON schemas committed in contracts/schema/ are the ones the models produce today."""

import json
from pathlib import Path

import pytest

from ferret.audit.models import AuditRecord
from ferret.contract.model import Contract
from ferret.dispatch.runlog import RunLog
from ferret.gate.models import GateManifest, Report, Verdict

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "contracts" / "schema"


@pytest.mark.parametrize(
    "name,model",
    [
        ("contract", Contract),
        ("gate_manifest", GateManifest),
        ("verdict", Verdict),
        ("report", Report),
        ("run_log", RunLog),
        ("audit", AuditRecord),
    ],
)
def test_published_schema_is_current(name, model):
    published = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    assert published == json.loads(json.dumps(model.model_json_schema())), (
        f"contracts/schema/{name}.schema.json is stale: run `ferret schema --out contracts/schema`"
    )
