"""Reports a person reads (`ferret report`): a gate's or a run's folder as one self-contained HTML page
and a Markdown summary, rendered from the typed records of the gate and the dispatcher."""

from ferret.reporting.render import ReportFiles, folder_kind, write_report

__all__ = ["ReportFiles", "folder_kind", "write_report"]
