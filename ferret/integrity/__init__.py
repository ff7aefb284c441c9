"""Integrity checks of a candidate that need no gate: the static scan of its source."""

from ferret.integrity.scan import CHEATS, Finding, ScanResult, scan_file, scan_source

__all__ = ["CHEATS", "Finding", "ScanResult", "scan_file", "scan_source"]
