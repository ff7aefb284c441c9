"""What a gate and a verdict record about the machine and the software they ran on."""

from __future__ import annotations

import platform
import sys
from importlib import metadata


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


def default_profile() -> str:
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"
