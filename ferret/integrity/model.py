"""What the scan reports: the catalogue of cheats it names, and its findings."""

from __future__ import annotations

from pydantic import BaseModel, Field

# slug -> entries of docs/cheats.md. `syntax_error` is the one slug outside the catalogue.
CHEATS: dict[str, list[int]] = {
    "allocator_reuse": [1],
    "constant_output": [2],
    "input_mutation": [3],
    "lower_precision": [4],
    "hardcoded_cases": [5],
    "unwritten_output": [6],
    "nan_wildcard": [7],
    "decoy_kernel": [8],
    "library_call": [9],
    "reference_import": [10],
    "reading_expected": [11],
    "shadowing": [12],
    "side_stream_or_thread": [13],
    "lazy_result": [14],
    "harness_patching": [15],
    "cross_call_caching": [16],
    "warmup_detection": [17],
    "persisting_l2": [18],
    "impossible_speed": [19],
    "gate_tampering": [20],
    "result_forging": [21],
    "write_outside_outputs": [23],
    "output_relabelled": [28],
    "dynamic_access": [29],
    "host_numerics": [31],
    "wrong_rows": [30],
    "graph_frozen": [32],
    "syntax_error": [],
}
# Slugs no static rule can see: named from the run (its speed, its buffers, its rows), listed here so that findings,
# prompts and the catalogue speak of them in the same words.
RUNTIME_ONLY: frozenset[str] = frozenset(
    {"impossible_speed", "write_outside_outputs", "output_relabelled", "wrong_rows", "graph_frozen"}
)

# Each slug in words: a finding's message starts with them, and the prompts quote them.
WORDS = {
    "allocator_reuse": "allocator reuse",
    "constant_output": "constant output",
    "input_mutation": "input mutation",
    "lower_precision": "lower precision",
    "hardcoded_cases": "hard-coded test cases",
    "unwritten_output": "unwritten output",
    "nan_wildcard": "NaN as a wildcard",
    "decoy_kernel": "decoy kernel",
    "library_call": "library call",
    "reference_import": "reference import",
    "reading_expected": "reading the expected answer",
    "shadowing": "shadowing",
    "side_stream_or_thread": "side stream or thread",
    "lazy_result": "lazy result",
    "harness_patching": "harness patching",
    "cross_call_caching": "cross-call caching",
    "warmup_detection": "warm-up detection",
    "persisting_l2": "persisting L2",
    "impossible_speed": "impossible speed",
    "gate_tampering": "gate tampering",
    "result_forging": "result forging",
    "write_outside_outputs": "writes outside the outputs",
    "output_relabelled": "re-pointing or re-labelling an output",
    "dynamic_access": "access by a computed name",
    "host_numerics": "numeric work on the host",
    "wrong_rows": "wrong rows among right ones",
    "graph_frozen": "a host-side branch frozen in a CUDA graph",
    "syntax_error": "syntax error",
}


class Finding(BaseModel):
    cheat: str = Field(description="Slug from CHEATS.")
    catalogue: list[int] = Field(description="Entries of docs/cheats.md this pattern belongs to.")
    line: int = Field(description="1-based line of the offending code.")
    col: int = Field(description="1-based column of the offending code.")
    code: str = Field(description="The offending source line, stripped.")
    message: str = Field(description="What was found and why it is banned, naming the cheat in words.")


class ScanResult(BaseModel):
    path: str
    sha256: str = Field(description="sha256 of the scanned source.")
    findings: list[Finding]

    @property
    def passed(self) -> bool:
        return not self.findings


def source_line(lines: list[str], line: int) -> str:
    """The stripped source line `line` (1-based), or "" where there is none (a finding on the module)."""
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def finding(lines: list[str], cheat: str, line: int, col: int, detail: str) -> Finding:
    """A finding whose message names the cheat in words and its catalogue entries before `detail`."""
    numbers = CHEATS[cheat]
    where = f" (docs/cheats.md {', '.join(map(str, numbers))})" if numbers else ""
    return Finding(
        cheat=cheat,
        catalogue=list(numbers),
        line=line,
        col=col,
        code=source_line(lines, line),
        message=f"{WORDS[cheat]}{where}: {detail}",
    )
