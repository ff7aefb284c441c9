"""The dispatcher: `Dispatcher(contract).run()` runs the whole flow and returns the typed run log."""

from ferret.dispatch.dispatcher import Dispatcher
from ferret.dispatch.runlog import RunLog

__all__ = ["Dispatcher", "RunLog"]
