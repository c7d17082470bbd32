"""Progress bars for long phases that keep showing life between their own updates.

A CPU run of a 135 M-parameter policy spends minutes in single calls: one padded forward
of a hindsight-scoring chunk, one micro-batch's backward, the prefill of eight long
prompts. A plain tqdm bar redraws only when its count moves, so it looks frozen
meanwhile. A `LiveBar` is a tqdm bar (stderr) whose elapsed time a background thread
redraws every `PROGRESS_INTERVAL_S` until it is closed; with `delay` it appears only once
its phase has lasted that long, so the many short calls a library user or a test makes
print nothing.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tqdm import tqdm

# Seconds between redraws of a live bar (a redraw is one short write to stderr).
PROGRESS_INTERVAL_S = 1.0
# For phases that are often short (one scoring call): seconds before a bar appears.
SHOW_AFTER_S = 2.0


class LiveBar(tqdm):
    """tqdm bar redrawn every `PROGRESS_INTERVAL_S` (elapsed time, rate, postfix) from its
    `delay`-th second until `close()`, also while its count stands still."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._closed = threading.Event()
        self._ticker: threading.Thread | None = None
        super().__init__(*args, **kwargs)
        if not self.disable:
            self._ticker = threading.Thread(target=self._tick, name="LiveBar", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._closed.wait(PROGRESS_INTERVAL_S):
            now = time.time()  # tqdm's clock
            if now - self.start_t >= self.delay:
                self.refresh()
                # close() clears only a bar it thinks was drawn, judged by this time.
                self.last_print_t = max(self.last_print_t, now)

    def close(self) -> None:
        # tqdm calls close() again from __del__; the ticker is stopped on the first call.
        if self._ticker is not None:
            self._closed.set()
            self._ticker.join()
            self._ticker = None
        super().close()
