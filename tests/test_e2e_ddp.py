"""torchrun DDP jobs (gloo, CPU): attach to the launcher, find every rank, name the slow one."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from launch import PHASES, free_port, rank_truth
from tests.conftest import honestly_unknown, steps_from, traceml
from traceml_attach.policy import DEFAULT_STEP_TIME_POLICY

pytestmark = pytest.mark.e2e
# the line of examples/ddp.py that calls init_process_group (where restarted workers can hang)
_DDP = (Path(__file__).parents[1] / "examples" / "ddp.py").read_text().splitlines()
INIT_LINE = next(i for i, line in enumerate(_DDP, 1) if "init_process_group(" in line)
HANG_S = DEFAULT_STEP_TIME_POLICY.hang_s   # no step for this long, the stacks unchanged: HANG


def snapshot(pid: int, tmp_path: Path, name: str, seconds: float = 10) -> tuple[dict, subprocess.CompletedProcess[str]]:
    out = traceml("snapshot", "--pid", str(pid), "--seconds", str(seconds), "--quiet",
                  "--logs-dir", str(tmp_path / "logs"), "--run-name", name)
    assert out.returncode in (0, 8), out.stderr
    return json.loads((tmp_path / "logs" / name / "final_summary.json").read_text()), out


def assert_ranks_match_truth(summary: dict, tmp_path: Path, nproc: int) -> None:
    window = summary["sampling"]["window"]
    ranks = summary["step_time"]["ranks"]
    assert sorted(ranks) == [str(r) for r in range(nproc)]
    for rank in range(nproc):
        truth = rank_truth(tmp_path, rank, steps_from(summary, rank), window["end"])
        shares = ranks[str(rank)]["shares"]
        for phase in PHASES:
            assert abs(shares[phase] - truth.shares[phase]) <= 0.05, (rank, phase, shares, truth.shares)


@pytest.mark.timing
@pytest.mark.parametrize(
    ("straggler", "kind"),
    # the input straggler: test_e2e_prometheus.py attaches to that job (scraped, then its summary)
    [("compute", "COMPUTE_STRAGGLER"), ("backward", "COMPUTE_STRAGGLER")],
)
def test_straggler_names_rank_and_cause(torchrun, tmp_path: Path, straggler: str, kind: str):
    # GIVEN a 2-rank DDP job whose rank 1 is slow in one way
    launcher = torchrun(2, "--straggler", straggler, "--slow-rank", "1")
    time.sleep(2)
    # WHEN traceml attaches to the launcher
    summary, out = snapshot(launcher.pid, tmp_path, straggler)
    # THEN it finds both ranks, blames rank 1 and says why
    diag = summary["step_time"]["diagnosis"]
    assert (diag["kind"], diag["worst_rank"]) == (kind, 1), out.stdout
    if straggler == "backward":
        # every rank's backward is equally long: only rank 0's waiting tells them apart
        assert "backward" in diag["summary"]
        rows = summary["step_time"]["ranks"]
        # the share of its step each rank spent blocked is known where a loaded machine leaves a
        # rank's step time unknown (one CI run: rank 1's); the 60 ms of rank 1's hook is over a
        # quarter of a step of under 250 ms
        share = {r: rows[r]["sync_wait_share"] for r in ("0", "1")}
        assert share["0"] > share["1"] + 0.1, share
        window = summary["sampling"]["window"]
        for r in ("0", "1"):
            assert rows[r]["step_ms"] is not None or honestly_unknown(
                summary, r, rank_truth(tmp_path, int(r), steps_from(summary, int(r)), window["end"])), rows[r]["clock"]
        if rows["0"]["step_ms"] is not None and rows["1"]["step_ms"] is not None:
            assert rows["0"]["sync_wait_ms"] > rows["1"]["sync_wait_ms"] + 20
    assert_ranks_match_truth(summary, tmp_path, 2)
    assert "Rank " in out.stdout
    # the median and worst rows hold milliseconds: only where the step times are known (a suite run
    # here: both unknown at 100 Hz, "nor their mean: 3 boundaries missed by chance would move it")
    if all(row["step_ms"] is not None for row in summary["step_time"]["ranks"].values()):
        assert "Worst (r" in out.stdout


@pytest.mark.timing
def test_balanced_ranks_have_no_straggler(torchrun, tmp_path: Path):
    launcher = torchrun(2, "--straggler", "none")
    time.sleep(2)
    # 15 s, not 10: the shares are held to the 5 pp target, and one loaded CI run read rank 1's
    # backward 5.4 pp low over 10 s (about 1000 samples per rank)
    summary, out = snapshot(launcher.pid, tmp_path, "none", seconds=15)
    kinds = {f["kind"] for f in summary["step_time"]["findings"]}
    assert not kinds & {"INPUT_STRAGGLER", "COMPUTE_STRAGGLER", "STRAGGLER", "HANG"}, out.stdout
    if summary["step_time"]["skew_pct"] is None:   # no step time to skew: honest only where the job's steps varied
        window = summary["sampling"]["window"]
        assert all(summary["step_time"]["ranks"][str(r)]["step_ms"] is not None
                   or honestly_unknown(summary, r, rank_truth(tmp_path, r, steps_from(summary, r), window["end"]))
                   for r in (0, 1)), summary["step_time"]["step_time_note"]
    else:
        assert abs(summary["step_time"]["skew_pct"]) < 10
    assert_ranks_match_truth(summary, tmp_path, 2)


def test_four_ranks(torchrun, tmp_path: Path):
    launcher = torchrun(4, "--straggler", "compute", "--slow-rank", "2", "--extra-ms", "150")
    time.sleep(3)
    summary, out = snapshot(launcher.pid, tmp_path, "four", seconds=15)
    diag = summary["step_time"]["diagnosis"]
    assert (diag["kind"], diag["worst_rank"]) == ("COMPUTE_STRAGGLER", 2), out.stdout
    assert_ranks_match_truth(summary, tmp_path, 4)


def test_hang_names_the_stuck_rank_and_line(torchrun, tmp_path: Path):
    launcher = torchrun(2, "--hang-at-step", "5")
    time.sleep(4)
    started = time.monotonic()
    summary, out = snapshot(launcher.pid, tmp_path, "hang", seconds=12)
    # it ends on time, though the job never steps again: not held by the hung ranks (a loaded run
    # of stop 61 took 15.7 s with its start-up and summary, so the bound is the hang's, not a pace's)
    assert time.monotonic() - started < 12 + 20
    diag = summary["step_time"]["diagnosis"]
    assert (diag["kind"], diag["worst_rank"]) == ("HANG", 1), out.stdout
    assert "fetch_from_slow_store (examples/ddp.py:" in diag["why"]
    assert "time.sleep(3600)" in diag["why"] and "rank 0 waits in backward" in diag["why"]
    # the one-shot view of the same hang
    stacks = traceml("stacks", "--pid", str(launcher.pid))
    assert stacks.returncode == 0, stacks.stderr
    assert "rank 1 [wait/sleep]" in stacks.stdout and "rank 0 [backward]" in stacks.stdout
    assert "fetch_from_slow_store" in stacks.stdout


def test_rank_exit_and_elastic_restart(torchrun, tmp_path: Path):
    # rank 1 exits with status 3 at step 40 of the first attempt; torchrun restarts both workers.
    # torchrun's side is not always well behaved here, whatever traceml does:
    # - after the restart its workers may die (they dial the old attempt's gloo address), or
    #   hang in init_process_group's gloo connect and never train, as their own ground truth
    #   shows (no step after the first 40);
    # - the exit status can only be read while the exited worker is a zombie, polled every
    #   20 ms, and torchrun may reap it sooner on a loaded machine (docs/limits.md).
    # A run whose workers died or whose status was missed is run again (up to 3 runs). Of the
    # others (two at most), one whose restarted workers train is preferred; if they hung in both,
    # what traceml must say about that run is checked instead.
    judged = None
    for attempt in range(3):
        for truth in tmp_path.glob("gt_*.jsonl"):
            truth.unlink()
        rendezvous = ("--rdzv-backend", "static", "--master-addr", "127.0.0.1", "--master-port", str(free_port()))
        launcher = torchrun(2, "--exit-at-step", "40", "--exit-code", "3",
                            launcher_args=(*rendezvous, "--max-restarts", "3"))
        summary, out = snapshot(launcher.pid, tmp_path, f"restart{attempt}", seconds=25)
        ranks = summary["ranks"]
        targets = {t["pid"]: t for t in summary["targets"]}
        if targets[ranks["1"]["pids"][-1]]["exited"] or targets[ranks["1"]["pids"][0]]["exit_status"] is None:
            continue
        # the steps of rank 1's last process, the one analysed (a CI run's restarted workers trained
        # 97 steps in the window, died and were restarted again, the last ones not yet training),
        # and those of them inside the snapshot's window: on a slow machine the restart can take
        # most of the window
        rows = [json.loads(line) for line in (tmp_path / "gt_1.jsonl").read_text().splitlines()]
        after = [row for row in rows if row["pid"] == ranks["1"]["pids"][-1]]
        window = summary["sampling"]["window"]
        trained = sum(1 for row in after if window["start"] <= row["start"] and row["end"] <= window["end"])
        if judged is None or trained > judged[3]:
            # retrained: any restarted worker trained (if none did, they hung in init_process_group)
            judged = (summary, out, targets, trained, len(rows) > 40)
        if trained >= 10 or attempt >= 1:   # a second run that counts is judged (each takes about 55 s)
            break
    if judged is None:
        pytest.fail("in 3 runs, torchrun's restarted workers died (see launcher.log) or the exit status was missed")
    summary, out, targets, trained, retrained = judged
    ranks = summary["ranks"]
    first, last = ranks["1"]["pids"][0], ranks["1"]["pids"][-1]
    assert ranks["1"]["status"] == "restarted" and ranks["1"]["restarts"] >= 1, out.stdout
    assert targets[first]["exited"] and targets[first]["exit_status"] == 3
    # the restarted workers are the ones sampled and analysed
    assert summary["step_time"]["ranks"]["1"]["pid"] == last
    if trained:   # its steps in the window are found (a late restart leaves few of them)
        rank1 = summary["step_time"]["ranks"]["1"]
        # a lower bound where the step time is unknown (the first steps after a restart are slow,
        # and a few of them vary too much for a typical step); none where the restart left it two
        # steps or fewer in the window (a suite run of stop 61, the machine loaded: 2, no boundary seen)
        floor = min(trained - 1, 10) if rank1["step_ms"] is not None else (1 if trained >= 3 else 0)
        assert rank1["steps"] >= floor, (rank1, trained)
    elif not retrained:   # they hung in init_process_group: that is what traceml must report...
        diag = summary["step_time"]["diagnosis"]
        if ranks["1"]["stall"]["idle_s"] >= HANG_S + 2:
            assert diag["kind"] == "HANG", diag
            assert f"main (examples/ddp.py:{INIT_LINE})" in diag["why"], diag   # the init_process_group line
        else:   # ...once they have been stuck long enough: a suite run's workers died twice, the third
            # started 4 s before the window's end (no step yet: NO_DATA)
            assert diag["kind"] in ("NO_DATA", "WARMUP", "HANG"), diag


def test_attaching_to_one_rank_says_which_and_how_to_get_all(torchrun, tmp_path: Path):
    launcher = torchrun(2)
    rank1 = next(p.pid for p in psutil.Process(launcher.pid).children(recursive=True)
                 if "RANK=1" in Path(f"/proc/{p.pid}/environ").read_bytes().decode(errors="replace").split("\0"))
    summary, out = snapshot(rank1, tmp_path, "one", seconds=4)
    assert f"is rank 1 of 2; to attach to every rank, give the launcher's PID: --pid {launcher.pid}" in out.stderr
    assert list(summary["step_time"]["ranks"]) == ["1"]
