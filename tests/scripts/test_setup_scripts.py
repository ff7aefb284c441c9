"""The set-up scripts a newcomer runs: scripts/setup.sh needs no root and runs no package manager; the
browser of the report's browser test comes from the opt-in scripts/install_browser.sh, which says what it
does and fails clearly, and CI calls it best effort before the README's test command; without a browser
that test skips, naming the script."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BASH = "/bin/bash"


def _commands(script: Path) -> list[str]:
    """The script's lines less comments and blank lines."""
    lines = (line.split("#", 1)[0].strip() for line in script.read_text().splitlines())
    return [line for line in lines if line]


@pytest.mark.quick
def test_setup_needs_no_root_and_installs_nothing_outside_the_venv():
    commands = " ".join(_commands(REPO / "scripts" / "setup.sh"))
    for word in ("apt-get", "apt ", "dpkg", "sudo", "id -u", "chromium", "playwright install"):
        assert word not in commands, f"scripts/setup.sh runs {word!r}"


def test_ci_installs_the_browser_best_effort_then_runs_the_readmes_test_command():
    commands = _commands(REPO / ".ci" / "run")
    install = [line for line in commands if "scripts/install_browser.sh" in line]
    assert install and all("||" in line for line in install), "a failed browser install must not fail CI"
    assert commands[-1] == "exec bash scripts/test.sh"
    assert commands.index(install[0]) < len(commands) - 1


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _install_browser(tmp_path: Path, uid: int, apt_exit: int = 0, installs: bool = True):
    """scripts/install_browser.sh with only stubs on the PATH: `id` says `uid`; `apt-get` logs its
    arguments, exits `apt_exit` and, when `installs`, puts a `chromium` on the PATH."""
    bin_dir, log = tmp_path / "bin", tmp_path / "apt.log"
    bin_dir.mkdir(exist_ok=True)
    _stub(bin_dir, "id", f"echo {uid}\n")
    made = f'printf "#!/bin/sh\\n" > {bin_dir}/chromium; /bin/chmod +x {bin_dir}/chromium\n' if installs else ""
    _stub(
        bin_dir,
        "apt-get",
        f'echo "DEBIAN_FRONTEND=$DEBIAN_FRONTEND $*" >> {log}\ncase "$*" in *install*) {made};; esac\nexit {apt_exit}\n',
    )
    done = subprocess.run(
        [BASH, str(REPO / "scripts" / "install_browser.sh")],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir)},
        timeout=30,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return done, calls


def test_install_browser_as_root_runs_apt_get_and_says_so(tmp_path):
    done, calls = _install_browser(tmp_path, uid=0)
    assert done.returncode == 0, done.stderr
    assert "apt-get update; apt-get install chromium" in done.stderr
    assert "chromium installed" in done.stderr
    assert calls[0].endswith("update -qq")
    assert calls[1] == "DEBIAN_FRONTEND=noninteractive -o DPkg::Lock::Timeout=120 install -y -qq chromium"
    # A second run finds the browser and installs nothing.
    again, calls_again = _install_browser(tmp_path, uid=0)
    assert again.returncode == 0 and "already installed" in again.stderr and calls_again == calls


def test_install_browser_refuses_without_root_and_runs_nothing(tmp_path):
    done, calls = _install_browser(tmp_path, uid=1000)
    assert done.returncode == 1 and calls == []
    assert "needs root: sudo bash scripts/install_browser.sh" in done.stderr


def test_install_browser_fails_clearly_when_apt_get_does(tmp_path):
    done, calls = _install_browser(tmp_path, uid=0, apt_exit=100, installs=False)
    assert done.returncode == 1 and len(calls) == 1
    assert "apt-get update failed" in done.stderr and "chromium not installed" in done.stderr


def test_install_browser_without_apt_get_names_what_to_do(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir, "id", "echo 0\n")
    done = subprocess.run(
        [BASH, str(REPO / "scripts" / "install_browser.sh")],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir)},
        timeout=30,
    )
    assert done.returncode == 1 and "no apt-get on this system" in done.stderr


def test_the_browser_test_skips_with_its_reason_where_no_browser_is_found(tmp_path):
    # Only the interpreter's folder on the PATH: no chromium there.
    env = {**os.environ, "PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            "-k",
            "page_shows",
            str(REPO / "tests" / "reporting" / "test_browser.py"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 skipped" in done.stdout and "passed" not in done.stdout and "failed" not in done.stdout
    reason = "no Chromium on this machine (`chromium` on the PATH): `sudo bash scripts/install_browser.sh` installs it"
    assert reason in done.stdout
