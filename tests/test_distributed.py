"""Training on several processes with torchrun. A 2-process job of the tiny config
follows the 1-process trajectory (gradients, losses, early stop), writes one run folder from
rank 0 alone, resumes exactly after every process was killed, stops cleanly on Ctrl-C, and
fails within seconds, in one line, when a process fails or the config cannot be split.

Every job is `python -m torch.distributed.run --standalone --nproc-per-node 2` as a
subprocess, each process with one thread (the machine has two cores). Where a test must
reach inside a process (to read its gradients, or to make it crash or pause), torchrun runs
a small script that patches tinytf, then runs the CLI exactly as `-m tinytf` would.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from conftest import SUBPROCESS_ENV, CtrlCAt, invoke, read_metrics, tiny_config, tiny_data, write_config

from tinytf.run.checkpoint import load_checkpoint
from tinytf.run.folder import RunFolder
from tinytf.run.load import load_run
from tinytf.training.distributed import JobFailed, TorchrunJob, threads_per_process
from tinytf.training.trainer import train

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]

# A script for torchrun: `capture.py OUT.pt CLI-ARGS...` collects, per step, every parameter's
# gradient as clipping receives it (all-reduced under torchrun); rank 0 saves them to OUT.pt.
CAPTURE_GRADIENTS = """
import atexit, os, sys, torch
gradients, out = [], sys.argv.pop(1)
_clip = torch.nn.utils.clip_grad_norm_
def _capture(parameters, *args, **kwargs):
    parameters = list(parameters)
    gradients.append([p.grad.clone() for p in parameters])
    return _clip(parameters, *args, **kwargs)
torch.nn.utils.clip_grad_norm_ = _capture
if os.environ["RANK"] == "0":
    atexit.register(lambda: torch.save(gradients, out))
"""

# A script for torchrun: each process writes the names of its native threads to
# threads.RANK.before as it leaves the process group, and to threads.RANK.at-exit at exit
# (after the CLI has returned, before the interpreter shuts down).
LIST_THREADS = """
import atexit, os
from pathlib import Path
import tinytf.training.distributed
def _list_threads(when):
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            names.append(Path(f"/proc/self/task/{tid}/comm").read_text().strip())
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    Path(f"threads.{os.environ['RANK']}.{when}").write_text("\\n".join(names))
_destroy = tinytf.training.distributed.dist.destroy_process_group
def _listing_destroy(*args, **kwargs):
    _list_threads("before")
    return _destroy(*args, **kwargs)
tinytf.training.distributed.dist.destroy_process_group = _listing_destroy
atexit.register(_list_threads, "at-exit")
"""

RUN_CLI = """
import sys
from tinytf.cli.app import main
sys.argv = ["tinytf", *sys.argv[1:]]
main()
"""

# The config of the trajectory test: no dropout (each process draws its own masks, so with
# dropout no two runs on different process counts can be equal), and a learning rate at
# which 10% of the held-out answers are exact at step 50 of 300.
EQUAL = {
    "model": {"dropout": 0.0},
    "train": {
        "steps": 300,
        "eval_every": 10,
        "lr": 0.01,
        "batch_size": 16,
        "stop_at_accuracy": 0.1,
        "snapshot_every": 20,
    },
    "log": {"every": 1, "attention_every": None},
}


def torchrun(*args, cwd, timeout=120, **popen):
    """Run a 2-process torchrun job to its end; its CompletedProcess (text output)."""
    return subprocess.run(
        [*TORCHRUN, *map(str, args)],
        cwd=cwd,
        env=SUBPROCESS_ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        **popen,
    )


def script(folder, name, *parts):
    path = Path(folder) / name
    path.write_text("\n".join(textwrap.dedent(part) for part in parts))
    return path


def gradient_differences(expected, actual):
    """Per step, the largest ||g_N - g_1|| / ||g_1|| over the parameter tensors."""
    return [
        max(float((b - a).norm() / a.norm()) for a, b in zip(one, other, strict=True))
        for one, other in zip(expected, actual, strict=True)
    ]


@pytest.fixture(scope="module")
def equal_runs(tmp_path_factory):
    """The trajectory config trained by one process (in this one) and by a torchrun job of two
    (through the CLI), each with every step's gradient as clipping received it; the job's
    processes also list their threads as they leave the process group and at exit."""
    folder = tmp_path_factory.mktemp("equal")
    one = []
    real_clip = torch.nn.utils.clip_grad_norm_

    def capture(parameters, *args, **kwargs):
        parameters = list(parameters)
        one.append([p.grad.clone() for p in parameters])
        return real_clip(parameters, *args, **kwargs)

    torch.nn.utils.clip_grad_norm_ = capture
    try:
        single = train(tiny_config(**EQUAL), runs_dir=folder / "one")
    finally:
        torch.nn.utils.clip_grad_norm_ = real_clip

    config = write_config(folder, tiny_data(**EQUAL))
    runner = script(folder, "capture.py", CAPTURE_GRADIENTS, LIST_THREADS, RUN_CLI)
    job = torchrun(runner, folder / "grads.pt", "train", config, "--runs-dir", folder / "two", cwd=folder)
    assert job.returncode == 0, job.stderr[-3000:]
    return {
        "folder": folder,
        "single": single,
        "one": one,
        "two": torch.load(folder / "grads.pt"),
        "job": job,
    }


def test_two_processes_sum_to_the_one_process_gradient(equal_runs):
    one, two = equal_runs["one"], equal_runs["two"]
    assert len(one) == len(two) == 50
    differences = gradient_differences(one, two)
    assert differences[0] < 1e-5  # the same weights, the same global batch: 3e-7 measured
    # Later, the weights themselves differ by rounding, and so do their gradients a little
    # more: at most 8e-6 over 50 steps.
    assert max(differences) < 1e-4, differences


def test_two_processes_follow_the_one_process_losses_and_stop_at_the_same_step(equal_runs):
    single = equal_runs["single"]
    (run_dir,) = (equal_runs["folder"] / "two").iterdir()
    one, two = read_metrics(single.run_dir), read_metrics(run_dir)
    assert [(r["step"], r["split"]) for r in one] == [(r["step"], r["split"]) for r in two]
    assert single.step == 50 and max(r["step"] for r in two) == 50  # stopped early, both processes
    for expected, actual in zip(one, two, strict=True):
        assert actual["loss"] == pytest.approx(expected["loss"], rel=1e-4), (expected, actual)  # 2.2e-7 measured
        if expected["split"] == "train":  # accuracies counted over both processes' rows
            assert actual["token_acc"] == pytest.approx(expected["token_acc"], abs=1e-6)
    assert load_checkpoint(RunFolder(run_dir).checkpoint("last"))["step"] == 50


def test_a_torchrun_job_keeps_the_snapshots_of_the_one_process_run(equal_runs):
    (run_dir,) = (equal_runs["folder"] / "two").iterdir()
    one, two = RunFolder(equal_runs["single"].run_dir).snapshots(), RunFolder(run_dir).snapshots()
    assert [step for step, _ in one] == [step for step, _ in two] == [0, 20, 40, 50]  # and the early stop's
    for (step, expected), (_, actual) in zip(one, two, strict=True):
        expected, actual = load_checkpoint(expected), load_checkpoint(actual)
        if step:
            assert actual["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-4)
        for name, weight in expected["model"].items():  # the same up to rounding (5e-7 measured), as the losses
            found = actual["model"][name]
            if name.endswith("qkv_proj.bias"):  # but the keys' bias: softmax ignores it, so its gradient is
                # rounding noise, which AdamW scales up to a step's size. The queries' and values' count.
                weight, found = (torch.cat(bias.chunk(3)[::2]) for bias in (weight, found))
            assert torch.allclose(found, weight, atol=1e-5), (step, name)


def test_rank_0_alone_writes_one_run_folder_and_reports(equal_runs):
    folder, job = equal_runs["folder"], equal_runs["job"]
    (run_dir,) = (folder / "two").iterdir()
    files = sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob("*") if path.is_file())
    events = [name for name in files if name.startswith("events.out.tfevents.")]
    assert len(events) == 1  # one TensorBoard writer: rank 0's
    assert [name for name in files if name not in events] == [
        "checkpoints/best.pt",
        "checkpoints/last.pt",
        *(f"checkpoints/step-{step}.pt" for step in (0, 20, 40, 50)),  # in the files' order
        "config.yaml",
        "metrics.jsonl",
        "train.lock",
        "vocab.json",
    ]
    assert sorted(path.name for path in folder.iterdir() if not path.name.startswith("threads.")) == [
        "capture.py",
        "grads.pt",
        "one",
        "tiny.yaml",
        "two",
    ]
    assert sum(line.startswith("run ") for line in job.stdout.splitlines()) == 1 and "best validation" in job.stdout
    # The checkpoint holds the bare model (no DDP "module." prefix): any command reads it.
    state = load_checkpoint(RunFolder(run_dir).checkpoint("best"))
    assert not any(name.startswith("module.") for name in state["model"])
    assert load_run(run_dir).step == state["step"]  # loads every weight by its name


def test_a_torchrun_run_resumes_in_one_process(equal_runs, tmp_path):
    (run_dir,) = (equal_runs["folder"] / "two").iterdir()
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(run_dir), str(copy)], check=True)
    # (the schedule of the 300 steps it was trained for: the rates of steps 51-54 unchanged)
    config = tiny_config(
        **{**EQUAL, "train": {**EQUAL["train"], "stop_at_accuracy": None, "steps": 54, "decay_steps": 300}}
    )
    result = train(config, resume=copy)
    assert result.step == 54 and read_metrics(copy)[-1]["step"] == 54
    # and goes on as one process trained from the start would: the same losses, up to rounding
    whole = train(config, runs_dir=tmp_path / "whole").run_dir
    resumed, expected = (
        [(r["step"], r["split"], r["loss"]) for r in read_metrics(run) if r["step"] > 50] for run in (copy, whole)
    )
    assert [row[:2] for row in resumed] == [row[:2] for row in expected] and len(resumed) >= 3
    assert [row[2] for row in resumed] == pytest.approx([row[2] for row in expected], rel=1e-4)


def kill_all(pids):
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def wait_for(ready, process, timeout=60):
    """Wait until `ready()`, failing if `process` ends or `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{ready} never came true"
        time.sleep(0.05)


def logged_steps(run_dir):
    """The last step of a run's metrics.jsonl as it is being written (a torn last line aside)."""
    text = (run_dir / "metrics.jsonl").read_text()
    return json.loads(text[: text.rindex("\n")].rsplit("\n", 1)[-1])["step"]


def test_resume_after_every_process_was_killed_replays_the_lost_steps_exactly_and_ctrl_c_saves(tmp_path):
    # With dropout: each process's own random stream must be saved and restored too. The
    # schedule ends at step 12 whatever train.steps is, so the job runs until Ctrl-C.
    data = tiny_data(
        train={"steps": 100_000, "decay_steps": 12, "checkpoint_every": 4, "eval_every": 2, "snapshot_every": 4},
        log={"every": 1},
    )
    assert data["model"]["dropout"] > 0
    config = write_config(tmp_path, data)

    # A job that, after step 11 (last.pt: step 8; metrics: up to 11), stops in rank 0: then
    # every process (the two trainers and torchrun itself) is killed with SIGKILL.
    pause = """
        import os, time
        from pathlib import Path
        from tinytf.training.trainer import Trainer
        Path(f"pid.{os.environ['RANK']}").write_text(str(os.getpid()))
        _step = Trainer._train_step
        def _pausing(self, *args):
            if self.step == 11 and self.job.is_main:
                Path("paused").write_text("11")
                time.sleep(600)
            return _step(self, *args)
        Trainer._train_step = _pausing
    """
    runner = script(tmp_path, "pause.py", pause, RUN_CLI)
    command = [*TORCHRUN, str(runner), "train", str(config), "--runs-dir", str(tmp_path / "killed")]
    job = subprocess.Popen(
        command, cwd=tmp_path, env=SUBPROCESS_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for((tmp_path / "paused").exists, job)
    finally:
        kill_all(
            [
                job.pid,
                *(
                    int((tmp_path / f"pid.{rank}").read_text())
                    for rank in (0, 1)
                    if (tmp_path / f"pid.{rank}").exists()
                ),
            ]
        )
        job.communicate(timeout=30)
    (killed,) = (tmp_path / "killed").iterdir()
    assert load_checkpoint(RunFolder(killed).checkpoint("last"))["step"] == 8
    snapshots = {step: path.stat() for step, path in RunFolder(killed).snapshots()}
    assert list(snapshots) == [0, 4, 8]
    before_kill = [(r["step"], r["split"], r["loss"]) for r in read_metrics(killed)]
    assert before_kill[-1][0] == 11

    # The resumed job goes past the lost steps until Ctrl-C, which torchrun forwards to every
    # process: rank 0 alone saves and says how to resume.
    resumed = subprocess.Popen(
        [*TORCHRUN, "-m", "tinytf", "train", "--resume", str(killed)],
        cwd=tmp_path,
        env=SUBPROCESS_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: logged_steps(killed) >= 13, resumed)
        resumed.send_signal(signal.SIGINT)
        _, stderr = resumed.communicate(timeout=25)  # a hang: torchrun's own grace is 30 s
    finally:
        if resumed.poll() is None:
            os.killpg(resumed.pid, signal.SIGKILL)
    # Steps 9-11 ran twice, before the kill and after the resume from step 8: every loss of
    # theirs, on the training batches and the held-out set, is the same to the last bit.
    after_resume = [(r["step"], r["split"], r["loss"]) for r in read_metrics(killed)]
    assert [row for row in after_resume if row[0] <= 11] == before_kill
    assert {row[0] for row in after_resume if 8 < row[0] <= 13} == {9, 10, 11, 12, 13}

    assert "forcefully exiting" not in stderr
    step = load_checkpoint(RunFolder(killed).checkpoint("last"))["step"]
    assert 13 <= step < 100_000
    after = RunFolder(killed).snapshots()  # those written before the kill kept, not written again; the rest written
    assert [snapshot for snapshot, _ in after] == list(range(0, step + 1, 4))
    assert all(
        (path.stat().st_ino, path.stat().st_mtime_ns) == (snapshots[s].st_ino, snapshots[s].st_mtime_ns)
        for s, path in after
        if s in snapshots
    )
    assert stderr.count(f"interrupted at step {step}; checkpoint saved in ") == 1  # rank 0 alone
    assert f"resume with: torchrun --nproc-per-node 2 -m tinytf train --resume {killed}\n" in stderr
    assert "[rank0]:" not in stderr and "[rank1]:" not in stderr  # no traceback from a trainer (torchrun shows its own)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads a process's threads from Linux's /proc")
def test_no_gloo_thread_outlives_the_job(equal_runs):
    # A gloo thread still running at interpreter shutdown may touch Python objects and abort
    # the process after the training had succeeded (see join_job): leaving the job must stop
    # them. It did not while torch._dynamo, imported by DDP, held the process group.
    tmp_path = equal_runs["folder"]
    for rank in (0, 1):
        before, at_exit = (
            (tmp_path / f"threads.{rank}.{when}").read_text().split("\n") for when in ("before", "at-exit")
        )
        assert [name for name in before if "gloo" in name], before  # the listing sees gloo's threads...
        assert not [name for name in at_exit if "gloo" in name], (rank, at_exit)  # ...and none is left


def test_a_process_that_fails_stops_the_job_within_seconds(tmp_path):
    crash = """
        from tinytf.training.trainer import Trainer
        _step = Trainer._train_step
        def _failing(self, *args):
            if self.step == 3 and self.job.rank == 1:
                raise RuntimeError("rank 1 fails on purpose")
            return _step(self, *args)
        Trainer._train_step = _failing
    """
    runner = script(tmp_path, "crash.py", crash, RUN_CLI)
    config = write_config(tmp_path, tiny_data(train={"steps": 1000}))
    # The timeout only catches a hang: a collective's own timeout is 10 minutes.
    job = torchrun(runner, "train", config, "--runs-dir", tmp_path / "runs", cwd=tmp_path, timeout=60)
    assert job.returncode != 0
    assert "rank 1 fails on purpose" in job.stderr
    assert "error: process 0 of 2 stops: another process of this torchrun job stopped" in job.stderr, job.stderr[-3000:]


def test_only_errors_that_rose_in_a_collective_count_as_another_process_gone():
    # gloo reports a closed connection or a timeout as a plain RuntimeError, like any tensor
    # error: a RuntimeError is the job's only once a collective of the job raised one.
    job = TorchrunJob.__new__(TorchrunJob)  # no process group: the rule alone
    job.rank, job.world_size, job.collective_failed = 0, 2, False
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(RuntimeError, match="this process's own"), job.noticing_failures():
            raise RuntimeError("this process's own")
        stopped = r"^process 0 of 2 stops: another process of this torchrun job stopped"
        with pytest.raises(JobFailed, match=stopped), job.noticing_failures():
            raise torch.distributed.DistBackendError("NCCL's")
        assert not job.collective_failed
        with pytest.raises(JobFailed), job.noticing_failures(), job._collective():
            raise RuntimeError("a collective's")
        assert job.collective_failed
        with pytest.raises(JobFailed), job.noticing_failures():  # e.g. DDP's gradient sum, from backward
            raise RuntimeError("after a collective failed")
        with pytest.raises(ValueError), job.noticing_failures():  # not torch.distributed's kind of error
            raise ValueError("a bug")
    finally:
        signal.signal(signal.SIGTERM, sigterm)  # JobFailed ignores SIGTERM from then on


@pytest.mark.parametrize("rank", [0, 1])
def test_a_batch_that_cannot_be_shared_is_one_error_line_from_rank_0(rank, tmp_path, monkeypatch):
    # Each process of a 2-process job, in this one: every process refuses the config before
    # joining the job (so none waits on another), rank 0 alone says why; both exit with 2.
    environment = {"RANK": rank, "WORLD_SIZE": 2, "LOCAL_RANK": rank, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 1}
    for name, value in environment.items():
        monkeypatch.setenv(name, str(value))

    def join(*args, **kwargs):
        raise AssertionError("joined the job before checking its config")

    monkeypatch.setattr(torch.distributed, "init_process_group", join)
    config = write_config(tmp_path, tiny_data(train={"batch_size": 9}))
    result = invoke("train", config, "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 2
    expected = (
        "error: train.batch_size=9: the global batch, shared equally by the 2 processes of this "
        "torchrun job; use a multiple of 2\n"
    )
    assert result.output == (expected if rank == 0 else "")
    assert not (tmp_path / "runs").exists()


def test_threads_are_omp_num_threads_when_set_else_the_cores_shared_out(monkeypatch):
    # torchrun sets OMP_NUM_THREADS=1 for several processes per machine unless the user set
    # it; whoever set it, a process takes it.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert threads_per_process(1) == cores and threads_per_process(2) == max(1, cores // 2)
    assert threads_per_process(cores * 4) == 1
    for value, expected in [("3", 3), ("1", 1), ("0", max(1, cores // 2)), ("many", max(1, cores // 2))]:
        monkeypatch.setenv("OMP_NUM_THREADS", value)  # 0 or a word: not a thread count, so the cores shared out
        assert threads_per_process(2) == expected, value


def test_sigterm_under_torchrun_stops_at_a_step_boundary_and_saves(tmp_path, monkeypatch):
    # A torchrun job of one process, in this one: SIGTERM (what torchrun forwards when it is
    # stopped, and what schedulers send) is Ctrl-C's twin there; without torchrun it is not caught.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environment = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    threads = torch.get_num_threads()
    try:
        result = train(tiny_config(), runs_dir=tmp_path, loggers=[CtrlCAt(5, signal.SIGTERM)])
    finally:
        torch.set_num_threads(threads)
    assert result.interrupted and result.step == 5
    assert load_checkpoint(RunFolder(result.run_dir).checkpoint("last"))["step"] == 5
    assert not torch.distributed.is_initialized()  # the job's process group is left behind it
