"""The registry of candidate languages: a source's language from its imports, a language by name, and a language
added with one `register` line reaching every place that asks what differs per language (the contract, the judge's
refusals and the optimizer's languages, the scan preset, the runner's loader, the launch recorder, the environment
of a candidate's process)."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest

from ferret.backends import backend, backend_for, backends, language_of, registry
from ferret.backends.base import LaunchPoint, imports_module
from ferret.errors import UsageError


def test_the_languages_are_triton_then_cuda_and_triton_is_the_default():
    assert [b.name for b in backends()] == ["triton", "cuda"] == list(registry.names())
    assert registry.DEFAULT == "triton"
    assert backend("cuda").module == "ferret.backends.cuda" and backend("triton").module is None


def test_an_unknown_language_is_a_value_error_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown language 'fortran'; the languages are triton, cuda"):
        backend("fortran")


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="registered already"):
        registry.register(backend("cuda"))


@pytest.mark.parametrize(
    ("source", "language"),
    [
        ("from ferret.backends import cuda\n", "cuda"),
        ("import triton\n", "triton"),
        ("def run(:\n", "triton"),  # does not parse: the default's to fail
    ],
)
def test_a_source_belongs_to_the_backend_that_claims_it_else_to_the_default(source, language):
    assert backend_for(source).name == language == language_of(source)


def test_the_evidence_names_the_module_imported_or_not():
    assert registry.evidence(backend("cuda")) == "it imports ferret.backends.cuda"
    assert registry.evidence(backend("triton")) == "it does not import ferret.backends.cuda"


@pytest.mark.parametrize(
    ("source", "imported"),
    [
        ("import toy.lang\n", True),
        ("from toy.lang import Kernel\n", True),
        ("from toy import lang\n", True),
        ("import toy\n", False),
        ("from toy import other\n", False),
        ("import toy.language\n", False),
    ],
)
def test_imports_module_reads_every_form_of_import(source, imported):
    assert imports_module(ast.parse(source), "toy.lang") is imported


class _Launcher:
    def go(self, kernel, *args):
        self.went = kernel


class ToyBackend:
    """A language that no part of ferret names: registered, it is judged like the others."""

    name, title, scan_preset, imports = "toy", "Toy", "minimal", ("toy.lang",)
    module: str | None = "toy.lang"

    def __init__(self, why_not: str | None = None):
        self.why_not, self.loaded = why_not, []
        self.configured: dict[str, str] = {}

    def claims(self, tree):
        return imports_module(tree, "toy.lang")

    def unavailable(self, device, profile):
        return self.why_not

    def load_before_sandbox(self, on_gpu):
        self.loaded.append(on_gpu)

    def launch_points(self):
        return [LaunchPoint(_Launcher, "go", "toy.Launcher.go", lambda self, args, kwargs: str(args[0]))]

    def settings(self, workdir, compile_flags):
        return {"TOY_FLAGS": ",".join(sorted(compile_flags)), "TOY_CACHE": str(workdir / ".toy")}

    def configure(self, settings):
        self.configured = dict(settings)


@pytest.fixture
def toy(monkeypatch):
    """ToyBackend registered for the test, and gone after it."""
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))
    return registry.register(ToyBackend())


def test_a_registered_language_is_detected_and_named_in_contracts(toy):
    from ferret.contract.model import Backend

    assert backend_for("import toy.lang\n") is toy
    assert backend_for("import triton\n").name == "triton"
    assert Backend(language="toy").allows("toy")
    with pytest.raises(ValueError, match="unknown language 'fortran'"):
        Backend(allowed_languages=["fortran"])


def test_the_judge_asks_a_registered_languages_backend_whether_it_can_judge_it(toy, tmp_path):
    from ferret.contract.model import Backend
    from ferret.gate import judge

    task = types.SimpleNamespace(
        contract=types.SimpleNamespace(backend=Backend(allowed_languages=["toy"])), path=tmp_path / "op.yaml"
    )
    assert judge.judged_languages(task, "cpu") == ["triton", "toy"]  # type: ignore[arg-type]
    candidate = tmp_path / "toy_candidate.py"
    candidate.write_text("import toy.lang\n")
    judge.require_language(task, "cpu", "cpu", candidate)  # type: ignore[arg-type]
    toy.why_not = "it needs a toy machine"
    assert judge.judged_languages(task, "cpu") == ["triton"]  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"toy_candidate.py is a Toy candidate: it needs a toy machine"):
        judge.require_language(task, "cpu", "cpu", candidate)  # type: ignore[arg-type]


def test_a_registered_languages_scan_preset_loader_launches_and_environment_are_used(toy, tmp_path, monkeypatch):
    from ferret.gate.scan import scan_preset
    from ferret.sandbox import audit
    from ferret.sandbox.launch import candidate_environment, candidate_settings, folder_view
    from ferret.sandbox.runner import take_settings
    from ferret.sandbox.watch import LaunchRecorder

    candidate = tmp_path / "toy_candidate.py"
    candidate.write_text("import toy.lang\n")
    assert scan_preset(candidate) == "minimal"
    audit.load_language_runtime(candidate, on_gpu=True)
    assert toy.loaded == [True]
    # The language's settings travel in the job (not the environment) and reach it in the candidate's process, its
    # folder named as the process sees it (`folder_view`).
    settings = candidate_settings(tmp_path, compile_flags={"fast": True})
    assert settings["TOY_FLAGS"] == "fast" and settings["TOY_CACHE"] == folder_view(tmp_path).seen(tmp_path / ".toy")
    assert "TOY_FLAGS" not in candidate_environment(tmp_path, interpret=True, compile_flags={"fast": True})
    take_settings(settings)
    assert toy.configured == settings

    monkeypatch.setattr(_Launcher, "go", _Launcher.go)  # put back at teardown
    for point in (p for b in backends() if b is not toy for p in b.launch_points()):
        monkeypatch.setattr(point.owner, point.attribute, getattr(point.owner, point.attribute))
    recorder = LaunchRecorder()
    launcher = _Launcher()
    launcher.go("toy_kernel")
    recorder.noop = True
    launcher.go("toy_kernel")
    assert recorder.counts["toy_kernel"] == 2 and "toy.Launcher.go" in recorder.patched
    assert recorder.intact() == []


def test_the_scan_allows_every_registered_languages_imports():
    from ferret.integrity.tables import ALLOWED_IMPORTS

    for language in backends():
        assert language.imports and set(language.imports) <= ALLOWED_IMPORTS, language.name
    assert {"triton.language", "ferret.backends.cuda"} <= ALLOWED_IMPORTS


def test_the_backends_package_says_how_a_language_is_added():
    import ferret.backends

    doc = " ".join((ferret.backends.__doc__ or "").split())
    assert "one backend file" in doc and "one test file" in doc and "register(" in doc
    assert Path(registry.__file__).read_text().count("\nregister(") == len(backends())
