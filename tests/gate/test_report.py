"""A gate's record of verdicts (ferret/gate/report.py): report.json a bounded index of short summaries,
every verdict whole in its own file beside it, both outside the lock; a report of the old schema (every
verdict inline) still read, and rewritten by the next append without losing a verdict."""

from __future__ import annotations

import json

import pytest

from ferret.gate import report as report_module
from ferret.gate.lock import REPORT_FILE, locked_files
from ferret.gate.models import Detection, PartResult, Report, TimingResult, Verdict
from ferret.gate.report import append_verdict, read_report, read_verdict, read_verdicts


def _verdict(number: int, passed: bool = True) -> Verdict:
    return Verdict(
        passed=passed,
        first_failing_stage=None if passed else "y",
        gate_hash="g",
        op="rmsnorm",
        profile="cpu",
        candidate_path=f"candidate_{number}.py",
        candidate_sha256=f"{number:064x}",
        parts={"correctness": PartResult(status="pass" if passed else "fail", detail="x" * 5000)},
        detections=[] if passed else [Detection(cheat="math_mismatch", catalogue=[], evidence="y off", source="outputs")],
        variants=[],
        timing=TimingResult(measured=False, reason="no GPU"),
        device="cpu",
        versions={},
        seeds={"a": number},
        started_at=f"2026-11-30T00:00:{number:02d}+00:00",
        seconds=1.5,
    )


def test_each_verdict_is_whole_in_its_own_file_and_the_index_holds_short_summaries(tmp_path):
    for number in range(3):
        append_verdict(tmp_path, _verdict(number, passed=number != 1))
    index = read_report(tmp_path)
    assert index.schema_version == 2 and index.verdict_count == 3
    assert [(s.index, s.passed, s.detections) for s in index.verdicts] == [
        (0, True, []),
        (1, False, ["math_mismatch"]),
        (2, True, []),
    ]
    assert index.verdicts[1].parts == {"correctness": "fail"} and index.verdicts[1].file == "verdicts/000001.json"
    assert [v.seeds for v in read_verdicts(tmp_path)] == [{"a": 0}, {"a": 1}, {"a": 2}]
    assert read_verdict(tmp_path, index.verdicts[2]).parts["correctness"].detail == "x" * 5000
    # The index does not carry the verdicts' detail: it stays small however large a verdict is.
    assert len((tmp_path / REPORT_FILE).read_text()) < 3 * 1500


def test_the_index_is_bounded_and_the_files_stay(tmp_path, monkeypatch):
    monkeypatch.setattr(Report, "INDEX_LIMIT", 2)
    for number in range(5):
        append_verdict(tmp_path, _verdict(number))
    index = read_report(tmp_path)
    assert index.verdict_count == 5 and [s.index for s in index.verdicts] == [3, 4]
    assert sorted(p.name for p in (tmp_path / "verdicts").iterdir()) == [f"{n:06d}.json" for n in range(5)]


def test_a_report_of_the_old_schema_is_read_and_rewritten_without_losing_a_verdict(tmp_path):
    old = [_verdict(0), _verdict(1, passed=False)]
    (tmp_path / REPORT_FILE).write_text(
        json.dumps({"schema_version": 1, "gate_hash": "g", "verdicts": [json.loads(v.model_dump_json()) for v in old]})
    )
    index = read_report(tmp_path)
    assert [(s.index, s.file, s.passed) for s in index.verdicts] == [(0, None, True), (1, None, False)]
    assert read_verdict(tmp_path, index.verdicts[1]).seeds == {"a": 1}
    append_verdict(tmp_path, _verdict(2))
    index = read_report(tmp_path)
    assert [(s.index, s.file) for s in index.verdicts] == [
        (0, "verdicts/000000.json"),
        (1, "verdicts/000001.json"),
        (2, "verdicts/000002.json"),
    ]
    assert [v.seeds for v in read_verdicts(tmp_path)] == [{"a": 0}, {"a": 1}, {"a": 2}]
    assert json.loads((tmp_path / REPORT_FILE).read_text())["schema_version"] == 2


def test_the_record_is_outside_the_lock(tmp_path):
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "x.safetensors").write_bytes(b"x")
    append_verdict(tmp_path, _verdict(0))
    assert locked_files(tmp_path) == ["cases/x.safetensors"]


def test_an_unreadable_verdict_file_is_an_error_naming_it(tmp_path):
    append_verdict(tmp_path, _verdict(0))
    (tmp_path / "verdicts" / "000000.json").write_text("{")
    with pytest.raises(ValueError, match="Verdict"):
        read_verdicts(tmp_path)
    assert report_module.read_report(tmp_path).verdict_count == 1


class _FsPath:
    """An os.PathLike that is not a pathlib.Path."""

    def __init__(self, path):
        self._path = str(path)

    def __fspath__(self) -> str:
        return self._path


@pytest.mark.parametrize("kind", [str, _FsPath], ids=["str", "PathLike"])
def test_the_public_readers_take_a_str_or_any_path_like(tmp_path, kind):
    import ferret

    append_verdict(tmp_path, _verdict(0))
    append_verdict(tmp_path, _verdict(1, passed=False))
    index = ferret.read_report(kind(tmp_path))
    assert index.verdict_count == 2 and [s.passed for s in index.verdicts] == [True, False]
    assert [v.seeds for v in ferret.read_verdicts(kind(tmp_path))] == [{"a": 0}, {"a": 1}]
    assert read_verdict(kind(tmp_path), index.verdicts[1]).first_failing_stage == "y"
    # A folder without a report yet: the empty index of the gate it names.
    empty = tmp_path / "gates" / ("a" * 64)
    empty.mkdir(parents=True)
    assert ferret.read_report(kind(empty)).gate_hash == "a" * 64
