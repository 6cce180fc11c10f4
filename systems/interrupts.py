"""Stopping a long run at a safe point when asked: Ctrl-C (SIGINT) or a scheduler's SIGTERM.

The bottom layer: it imports nothing of ours. A loop that can stop cleanly between two of its steps (after the
optimizer step, with a checkpoint) asks :attr:`StopRequests.signal` at each boundary instead of being torn down
half-way by a ``KeyboardInterrupt`` wherever it happens to be. A second Ctrl-C stops at once, as the user then
plainly wants. Only the main thread can hold signal handlers: elsewhere, and for a run that has nowhere to save,
the signals keep their usual meaning.

    with StopRequests() as stop:
        for step in ...:
            ...
            if stop.signal is not None:  # signal.SIGINT or signal.SIGTERM
                save(); break
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequests:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.signal: signal.Signals | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        self.signal = signal.Signals(signum)
        print(f"\n{self.signal.name}: stopping after this step (Ctrl-C again stops at once, losing the step)",
              file=sys.stderr, flush=True)

    def __enter__(self) -> "StopRequests":
        if self.enabled:
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()


class Interrupted(Exception):
    """A run that stopped at a step boundary on a signal; ``saved`` is the checkpoint it wrote then, if any."""

    def __init__(self, signal_: signal.Signals, step: int, saved: Path | None):
        self.signal, self.step, self.saved = signal_, step, saved
        where = (f"saved {saved}; continue with --resume {saved}" if saved
                 else "nothing saved (no --checkpoint-dir)")
        super().__init__(f"stopped by {signal_.name} after step {step}: {where}")
