"""Where a process the judge starts sees its own folder.

The judge makes each process a fresh folder on its own machine (under its temporary folder, say
`/tmp/ferret-xxxx/candidate`); every such path says "judged". Where an allow-list sandbox confines the process
(`ferret.sandbox.allow`), that folder is shown at a fixed place a user's install could have, `NEUTRAL_WORK`, with
HOME at `NEUTRAL_HOME` (a private tmpfs, where Triton keeps its cache by default) and /tmp the sandbox's own: a
candidate reading its `__file__`, its working folder, HOME, the temp folder or Triton's cache folder sees what a
user `user` working in `/home/user/work` sees. Elsewhere (the deny-list namespace, no sandbox) the process sees
the host's paths. `FolderView` is the one mapping between the two, used wherever a path crosses: the job's
fields, the command line, the import path, the settings, and the paths a process reports back.
Standard library only: this package is copied into candidate folders.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

NEUTRAL_HOME = PurePosixPath("/home/user")
NEUTRAL_WORK = NEUTRAL_HOME / "work"
# The temp folder of a process shown at the neutral place: the sandbox's own tmpfs, with TMPDIR unset.
NEUTRAL_TMP = PurePosixPath("/tmp")


@dataclass(frozen=True)
class FolderView:
    """A process's own folder as the judge (`host`) and the process (`inside`) see it."""

    host: Path
    inside: PurePosixPath

    @property
    def neutral(self) -> bool:
        """Whether the process sees its folder at the neutral place (HOME and /tmp then are the sandbox's own)."""
        return self.inside == NEUTRAL_WORK

    @property
    def home(self) -> str:
        """The process's HOME: the neutral one, else its folder (discarded with it, like everything it writes)."""
        return str(NEUTRAL_HOME) if self.neutral else str(self.inside)

    def seen(self, path: Path) -> str:
        """`path`, on the host and inside the process's folder, as the process sees it. A path outside the folder
        is a caller's mistake (only the folder is moved): ValueError."""
        return str(self.inside / Path(path).relative_to(self.host))

    def on_host(self, reported: str) -> Path | None:
        """A path the process reported (untrusted), where the judge reads it; None when it leads outside the
        process's folder."""
        try:
            relative = PurePosixPath(os.path.normpath(reported)).relative_to(self.inside)
        except ValueError:
            return None
        return self.host / relative


def host_view(folder: Path) -> FolderView:
    """A process that sees its folder where it lies on the host (not confined, or the deny-list namespace)."""
    return FolderView(folder, PurePosixPath(folder))


def neutral_view(folder: Path) -> FolderView:
    """A process shown its folder at `NEUTRAL_WORK` (an allow-list sandbox)."""
    return FolderView(folder, NEUTRAL_WORK)
