"""What a gate and a verdict record about the machine and the software they ran on."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferret.contract.model import ProfileName


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    import torch

    found = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("triton", "transformers", "numpy", "safetensors"):
        found[name] = package_version(name)
    found["cuda"] = str(torch.version.cuda)
    return found


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu ({platform.processor() or platform.machine()})"


def platform_info() -> dict[str, str]:
    return {"system": platform.system(), "machine": platform.machine(), "device": device_name(), "byteorder": sys.byteorder}


def default_profile() -> ProfileName:
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


PROFILES: tuple[ProfileName, ...] = ("cpu", "gpu")


def resolve_profile(profile: str | None, option: str = "profile", needs_gpu: bool = True) -> ProfileName:
    """`profile`, checked: one of PROFILES, and (with `needs_gpu`) `gpu` only where a CUDA GPU is present;
    None means the default for this machine. A mistake is a UsageError naming `option` (`--profile` on the
    command line)."""
    from ferret.errors import UsageError

    if profile is None:
        return default_profile()
    profile = getattr(profile, "value", profile)  # an Enum member of the command line's choice
    if profile not in PROFILES:
        raise UsageError(f"{option} {profile!r} is not one of {', '.join(PROFILES)}")
    if profile == "gpu" and needs_gpu:
        import torch

        if not torch.cuda.is_available():
            raise UsageError(
                f"{option} gpu needs a CUDA GPU, and this machine has none (torch.cuda.is_available() is False); use {option} cpu"
            )
    return profile
