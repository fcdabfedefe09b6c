"""bert_common/progress.py: the ETA format, the line, throttling (fake clock, every_n), the
final line, log mode."""

import io
import math
from unittest import mock

import pytest

from bert_common.progress import Progress, format_eta


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _progress(clock, total=100, **kwargs):
    stream = io.StringIO()
    return Progress("job", total, unit="items", stream=stream, clock=clock, **kwargs), stream


def _lines(stream):
    return stream.getvalue().splitlines()


@pytest.mark.parametrize("seconds,text", [
    (0, "0m00s"), (0.9, "0m00s"), (59.99, "0m59s"), (62, "1m02s"), (3599, "59m59s"),
    (3600, "1h00m00s"), (3723, "1h02m03s"), (100 * 3600 + 5, "100h00m05s"),
    (math.inf, "?"), (math.nan, "?"), (-math.inf, "?"),
])
def test_format_eta(seconds, text):
    assert format_eta(seconds) == text


def test_format_eta_is_the_trainers():
    # modeling/training/job.py's step lines use the same format (it will import this one).
    for seconds in (0, 61, 3723, 86399):
        hours, rest = divmod(int(seconds), 3600)
        expected = ("%dh%02dm%02ds" % (hours, rest // 60, rest % 60) if hours
                    else "%dm%02ds" % (rest // 60, rest % 60))
        assert format_eta(seconds) == expected


def test_line_contents():
    clock = FakeClock()
    progress, stream = _progress(clock, every_s=5.0)
    clock.now += 10.0
    assert progress.update(25, extra="pass 1/2")
    # 25 items in 10 s: 2.5/s; 75 left: 30 s.
    assert _lines(stream) == ["job: 25/100 items, 2.5 items/s, ETA 0m30s, pass 1/2"]


def test_large_rates_lose_their_decimal_and_floats_show_one():
    clock = FakeClock()
    progress = Progress("reading", 2.5, unit="MB", clock=clock)
    clock.now += 0.5
    assert progress.line(1.5) == "reading: 1.5/2.5 MB, 3.0 MB/s, ETA 0m00s"
    progress = Progress("n", 10 ** 6, clock=clock)
    clock.now += 2.0
    assert progress.line(1234) == "n: 1234/1000000, 617/s, ETA 26m58s"  # 998766 / 617 s


def test_unknown_total_has_no_eta():
    clock = FakeClock()
    progress, _ = _progress(clock, total=None)
    clock.now += 4.0
    assert progress.line(10) == "job: 10 items, 2.5 items/s"


def test_eta_is_unknown_while_nothing_is_done():
    clock = FakeClock()
    progress, stream = _progress(clock, every_s=1.0)
    clock.now += 3.0
    assert progress.update(0)
    assert _lines(stream) == ["job: 0/100 items, 0.0 items/s, ETA ?"]


def test_throttled_by_time():
    clock = FakeClock()
    progress, stream = _progress(clock, every_s=2.0)
    printed = []
    for done in range(1, 11):  # one item every 0.5 s
        clock.now += 0.5
        printed.append(progress.update(done))
    # a line once 2 s have passed since the start or since the last line
    assert printed == [False, False, False, True, False, False, False, True, False, False]
    assert [line.split(",")[0] for line in _lines(stream)] == ["job: 4/100 items",
                                                               "job: 8/100 items"]


def test_force_prints_at_once():
    clock = FakeClock()
    progress, stream = _progress(clock, every_s=60.0)
    assert not progress.update(1)
    assert progress.update(2, force=True)
    assert progress.update(2, force=True)  # even the same count again
    assert len(_lines(stream)) == 2


def test_every_n_ignores_the_clock_and_keeps_the_rhythm_of_batches():
    clock = FakeClock()
    progress, stream = _progress(clock, total=100, every_n=10)
    clock.now += 1000.0  # time alone never prints in every_n mode
    assert not progress.update(9)
    for done in (10, 14, 19, 23, 30, 31):
        progress.update(done)
    assert [line.split(",")[0] for line in _lines(stream)] == [
        "job: 10/100 items", "job: 23/100 items", "job: 30/100 items"]


def test_final_line_once_at_total_then_finish_adds_nothing():
    clock = FakeClock()
    progress, stream = _progress(clock, total=4, every_s=60.0)
    for done in range(1, 5):
        clock.now += 1.0
        progress.update(done, extra="x=%d" % done)
    assert _lines(stream) == ["job: 4/4 items, 1.0 items/s, ETA 0m00s, x=4"]
    assert not progress.update(4)  # the final line is printed once
    assert not progress.finish()
    assert len(_lines(stream)) == 1


def test_finish_prints_the_last_state_when_not_printed():
    clock = FakeClock()
    progress, stream = _progress(clock, total=None, every_s=60.0)
    clock.now += 1.0
    assert not progress.update(7, extra="a")
    assert progress.finish()
    assert _lines(stream) == ["job: 7 items, 7.0 items/s, a"]
    assert progress.finish(extra="b")  # a new extra is worth a line
    assert _lines(stream)[-1] == "job: 7 items, 7.0 items/s, b"


def test_finish_on_an_empty_loop():
    clock = FakeClock()
    progress, stream = _progress(clock, total=0)
    assert progress.finish()
    assert _lines(stream) == ["job: 0/0 items, 0.0 items/s, ETA 0m00s"]


def test_extra_function_is_called_only_for_printed_lines():
    clock = FakeClock()
    progress, stream = _progress(clock, total=10, every_s=5.0)
    calls = []

    def extra():
        calls.append(1)
        return "made"

    for done in range(1, 11):
        clock.now += 1.0
        progress.update(done, extra=extra)
    assert len(calls) == 2  # at 5 s, and the final line
    assert all(line.endswith(", made") for line in _lines(stream))


def test_disabled_prints_nothing():
    clock = FakeClock()
    progress, stream = _progress(clock, total=2, enabled=False)
    clock.now += 10.0
    assert not progress.update(2, force=True)
    assert not progress.finish()
    assert stream.getvalue() == ""


def test_stderr_at_print_time(capsys):
    clock = FakeClock()
    progress = Progress("job", 1, clock=clock)  # no stream: sys.stderr when the line is due
    progress.update(1)
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("job: 1/1, ")


def test_log_mode_uses_absl_logging(capsys):
    clock = FakeClock()
    progress = Progress("writing x", 20, unit="examples", every_n=10, log=True, clock=clock)
    with mock.patch("bert_common.progress.logging.info") as info:
        clock.now += 5.0
        for done in range(1, 21):
            progress.update(done)
    assert [call.args[1] for call in info.call_args_list] == [
        "writing x: 10/20 examples, 2.0 examples/s, ETA 0m05s",
        "writing x: 20/20 examples, 4.0 examples/s, ETA 0m00s"]
    assert capsys.readouterr().err == ""


def test_elapsed_follows_the_clock():
    clock = FakeClock()
    progress = Progress("job", 1, clock=clock)
    clock.now += 2.5
    assert progress.elapsed == 2.5


def test_negative_every_n_is_refused():
    with pytest.raises(ValueError):
        Progress("job", 1, every_n=-1)
