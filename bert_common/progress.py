"""The one progress reporter of the project: ``<label>: done/total unit, rate unit/s, ETA``.

Every long loop (reading a corpus, converting examples, writing records, extracting features)
reports through ``Progress``, so all progress lines look alike and are throttled alike::

    progress = Progress("extract_features", len(examples), unit="lines")
    for ...:
        progress.update(done, extra="batch %d" % b)
    progress.finish()

prints, at most every ``every_s`` seconds (or every ``every_n`` items), lines such as
``extract_features: 512/2048 lines, 41.3 lines/s, ETA 0m37s, batch 16`` to stderr (or to the
absl log with ``log=True``), and always one line once ``done`` reaches ``total``.

Times come from a monotonic clock: the wall clock can jump (NTP, suspend), which would make
rates and ETAs nonsense. ``format_eta`` is the ETA format of every progress line of the
project, the trainer's step lines included.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Callable, Optional, TextIO, Union

from absl import logging

Number = Union[int, float]
#: Other counts for the end of a line: a string, or a function that makes it, called only when
#: a line is printed (so that a loop that updates per item does not format text per item).
Extra = Union[str, Callable[[], str]]


def format_eta(seconds: float) -> str:
    """``"?"`` for an unknown (inf/nan) time, else ``"1m02s"``, or ``"1h02m03s"`` from an hour.

    Args:
      seconds: the time left.

    Returns:
      The text.
    """
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "%dh%02dm%02ds" % (hours, minutes, secs) if hours else "%dm%02ds" % (minutes, secs)


def _format_count(value: Number) -> str:
    # Counts are ints; a float is a scaled amount (MB), shown to one decimal.
    return "%d" % value if isinstance(value, int) else "%.1f" % value


def _format_rate(rate: float) -> str:
    # One decimal while it matters, none once the rate is large enough not to need it.
    return "%.1f" % rate if rate < 100 else "%.0f" % rate


class Progress:
    """Throttled progress lines for a loop over ``total`` items (see the module docstring).

    Args:
      label: the line's prefix (what is being done).
      total: the number (or amount) of items; None when unknown: no ETA then.
      unit: the items' name ("examples", "lines", "MB"), after the counts and the rate.
      every_s: the least number of seconds between two lines.
      every_n: when > 0, a line every ``every_n`` items instead (``every_s`` is then unused):
        for logs, whose lines should not depend on the machine's speed.
      enabled: False makes every call a no-op (a ``--show_progress=false`` switch).
      log: write the lines with absl ``logging.info`` instead of to ``stream``.
      stream: where lines go; None means ``sys.stderr`` at the time of each line.
      clock: seconds from a monotonic clock (tests pass a fake one).

    Raises:
      ValueError: ``every_n`` is negative.
    """

    def __init__(self, label: str, total: Optional[Number], unit: str = "",
                 every_s: float = 2.0, every_n: int = 0, enabled: bool = True,
                 log: bool = False, stream: Optional[TextIO] = None,
                 clock: Callable[[], float] = time.monotonic):
        if every_n < 0:
            raise ValueError("every_n must be >= 0, got %d" % every_n)
        self.label = label
        self.total = total
        self.unit = unit
        self.every_s = every_s
        self.every_n = every_n
        self.enabled = enabled
        self.log = log
        self.stream = stream
        self._clock = clock
        self._start = self._last_line = clock()
        self._next_n = every_n
        self._done: Number = 0
        self._extra: Extra = ""
        self._printed_done: Optional[Number] = None  # ``done`` of the last line, None if none

    @property
    def elapsed(self) -> float:
        """Seconds since the reporter was made (for rates of other counts, in ``extra``)."""
        return self._clock() - self._start

    def update(self, done: Number, extra: Extra = "", force: bool = False) -> bool:
        """Records that ``done`` items are done; prints a line if one is due.

        A line is due every ``every_s`` seconds (or ``every_n`` items), on ``force``, and once
        when ``done`` reaches ``total``. ``extra`` (other counts) ends the line. Returns
        whether a line was printed.

        Args:
          done: items done so far.
          extra: more counts for the line's end: a str, or a callable returning one (called
            only when a line is printed).
          force: print a line now.

        Returns:
          Whether a line was printed.
        """
        self._done, self._extra = done, extra
        if not self.enabled:
            return False
        now = self._clock()
        finished = self.total is not None and done >= self.total
        if self.every_n > 0:
            due = done >= self._next_n
        else:
            due = now - self._last_line >= self.every_s
        if force or due or (finished and self._printed_done != done):
            self._emit(done, extra, now)
            return True
        return False

    def finish(self, extra: Optional[Extra] = None) -> bool:
        """Prints the line of the last ``update`` (with ``extra`` if given) unless it was
        printed already, so that a loop ends on a line with its final counts (also when it
        ran zero times). Returns whether a line was printed.

        Args:
          extra: the final counts for the line's end, or None for the last ``update``'s.

        Returns:
          Whether a line was printed.
        """
        if extra is not None:
            self._extra = extra
        if not self.enabled or (self._printed_done == self._done and extra is None):
            return False
        self._emit(self._done, self._extra, self._clock())
        return True

    def line(self, done: Number, extra: str = "", now: Optional[float] = None) -> str:
        """The text of the line for ``done`` items at time ``now`` (default: the clock's).

        Args:
          done: items done.
          extra: the line's end.
          now: the time, or None for the clock's.

        Returns:
          The line's text.
        """
        elapsed = max((self._clock() if now is None else now) - self._start, 1e-9)
        rate = done / elapsed
        unit = " " + self.unit if self.unit else ""
        if self.total is None:
            counts = _format_count(done)
            eta = ""
        else:
            counts = "%s/%s" % (_format_count(done), _format_count(self.total))
            remaining = max(self.total - done, 0)
            if remaining == 0:
                seconds = 0.0
            else:
                seconds = remaining / rate if rate > 0 else math.inf
            eta = ", ETA " + format_eta(seconds)
        text = "%s: %s%s, %s%s/s%s" % (self.label, counts, unit, _format_rate(rate), unit, eta)
        return text + ", " + extra if extra else text

    def _emit(self, done: Number, extra: Extra, now: float) -> None:
        text = self.line(done, extra() if callable(extra) else extra, now)
        if self.log:
            logging.info("%s", text)
        else:
            print(text, file=self.stream if self.stream is not None else sys.stderr,
                  flush=True)
        self._last_line = now
        self._printed_done = done
        if self.every_n > 0:
            # The next multiple of every_n: callers that advance in batches keep the rhythm.
            self._next_n = (int(done) // self.every_n + 1) * self.every_n
