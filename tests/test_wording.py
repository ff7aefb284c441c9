"""The repository speaks of the product, not of the work that made it.

A comment says why, not when or by whom: no numbered working sessions, device calls or issue sections, no
folder names of run archives, no reading material kept outside the repository. A measured figure cites a
results file that is in the tree. Both are read from every tracked file (`git ls-files`) but the results
folder itself, whose index names the commits that held the deleted run archives.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = "benchmarks/results/"

# Each pattern names one kind of process word. They are precise on purpose: "a new session" of a library,
# `scope="session"`, "call 2 against call 1" (the gate's evidence) and "its call 50" (a kernel's calls, counted
# by the timing guards) are the product's own words and must not match.
PROCESS_WORDS: dict[str, re.Pattern[str]] = {
    "numbered session": re.compile(r"\bsessions? \d+", re.IGNORECASE),
    "session folder": re.compile(r"\bsession\d+\b", re.IGNORECASE),
    "numbered issue": re.compile(r"\bissues? \d+", re.IGNORECASE),
    "section sign": re.compile(r"\u00a7 ?\d"),
    "run archive folder": re.compile(r"-run\d+\b|\brun\d+/", re.IGNORECASE),
    "device call of a run archive": re.compile(r"\bcall\d+-|, calls? \d+\b", re.IGNORECASE),
    "device-tool": re.compile(r"\bdevice\stool\b", re.IGNORECASE),
    "reading material outside the repository": re.compile(r"\bshared/reference/"),
}
CITED_RESULT = re.compile(r"benchmarks/results/([A-Za-z0-9][\w.-]*\w)")


def tracked_texts() -> dict[str, str]:
    """Every tracked text file outside benchmarks/results/, path -> text (binary files left out)."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    texts = {}
    for name in names.decode().split("\0"):
        path = REPO / name
        if not name or name.startswith(RESULTS) or not path.is_file():
            continue
        try:
            texts[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return texts


def process_words(text: str) -> list[tuple[int, str, str]]:
    """(line number, kind, matched text) for every process word in `text`."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for kind, pattern in PROCESS_WORDS.items():
            found.extend((number, kind, m.group(0)) for m in pattern.finditer(line))
    return found


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to read")
    return tracked_texts()


def test_no_process_words_in_tracked_files(texts: dict[str, str]) -> None:
    hits = [
        f"{name}:{line}: {kind}: {match!r}" for name, text in sorted(texts.items()) for line, kind, match in process_words(text)
    ]
    assert not hits, f"{len(hits)} process words:\n" + "\n".join(hits[:60])


def test_cited_results_files_exist(texts: dict[str, str]) -> None:
    tracked = set(subprocess.run(["git", "ls-files"], cwd=REPO, check=True, capture_output=True, text=True).stdout.splitlines())
    folders = {str(Path(name).parent) for name in tracked}
    missing = sorted(
        {
            f"{name}: {RESULTS}{cited}"
            for name, text in texts.items()
            for cited in CITED_RESULT.findall(text)
            if RESULTS + cited not in tracked and RESULTS + cited.rstrip("/") not in folders
        }
    )
    assert not missing, "results cited but not in the tree:\n" + "\n".join(missing)


# The patterns on their own: each kind is found in a phrase of the process and none in the product's words.
# The phrases are assembled here so that this file does not match itself.
PROCESS_PHRASES = {
    "numbered session": "as sess" + "ion 12 saw",
    "session folder": "2026-12-02-h200-sess" + "ion12",
    "numbered issue": "Iss" + "ue 12, section 3",
    "section sign": "section \u00a7" + "4",
    "run archive folder": "2026-11-29-h200-r" + "un6/",
    "device call of a run archive": "h200-results" + ", c" + "all 2",
    "device-tool": "the device " + "tool",
    "reading material outside the repository": "shared/" + "reference/cheats.md",
}
PRODUCT_PHRASES = [
    "subprocess.Popen(args, start_new_session=True)",
    '@pytest.fixture(scope="session")',
    "y: call 3 against call 1: 2 of 8 entries differ",
    "a copy's call 50 comes inside the process's first round",
    "a round times at most 300 calls, so a switch at call 2000 never fires",
    "the session_id the CLI returns",
    "the runner runs 3 rounds",
]


@pytest.mark.parametrize("kind", sorted(PROCESS_PHRASES))
def test_each_kind_of_process_word_is_found(kind: str) -> None:
    assert kind in {found_kind for _, found_kind, _ in process_words(PROCESS_PHRASES[kind])}


@pytest.mark.parametrize("phrase", PRODUCT_PHRASES)
def test_product_words_are_not_process_words(phrase: str) -> None:
    assert process_words(phrase) == []
