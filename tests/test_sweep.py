"""`tinytf sweep`: the sweep file, its study, its worker processes, and `sweep show`."""

import html
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import ROOT, SUBPROCESS_ENV, assert_user_error, invoke, tiny_data, write_config
from needs import unavailable

from tinytf.errors import ConfigError, UserError
from tinytf.run.checkpoint import load_checkpoint
from tinytf.run.folder import RunFolder
from tinytf.sweep.study import STUDY_FILE


def write_sweep(folder, name="grid", base_config=None, **keys):
    """A sweep file in `folder` over the tiny config (written beside it as base.yaml):
    by default a grid of 2 learning rates x 2 seeds, ranked by held-out loss."""
    folder = Path(folder)
    write_config(folder, base_config or tiny_data(), "base.yaml")
    sweep = {
        "base": "base.yaml",
        "params": {"train.lr": {"choice": [0.001, 0.003]}},
        "seeds": [0, 1],
        "objective": {"metric": "val_loss"},
        "sampler": "grid",
    } | keys
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def sweep_process(path, *args):
    """`tinytf sweep PATH ARGS...` started in PATH's folder (one thread: see SUBPROCESS_ENV)."""
    command = [sys.executable, "-m", "tinytf", "sweep", path.name, *map(str, args)]
    return subprocess.Popen(command, cwd=path.parent, env=SUBPROCESS_ENV, stdout=subprocess.PIPE, text=True)


def run_sweep(path, *args):
    process = sweep_process(path, *args)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    return output


def shown(folder):
    result = invoke("sweep", "show", folder, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def trials(folder):
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(folder / STUDY_FILE)))
    return optuna.load_study(study_name=folder.name, storage=storage).get_trials()


def run_folders(folder):
    return sorted(path.name for path in folder.iterdir() if path.is_dir())


def test_a_grid_on_two_workers_trains_each_setting_on_each_seed_once_and_ranks_the_settings(tmp_path):
    path = write_sweep(tmp_path)
    output = run_sweep(path, "--workers", 2)
    folder = tmp_path / "sweeps" / "grid"
    assert len(run_folders(folder)) == 4 and "results: tinytf sweep show" in output
    results = shown(folder)
    assert sorted(run for row in results["settings"] for run in row["runs"]) == run_folders(folder)
    for row in results["settings"]:
        assert sorted(run.split("-seed-")[1][0] for run in row["runs"]) == ["0", "1"]
    assert [row["rank"] for row in results["settings"]] == [1, 2]
    assert {row["params"]["train.lr"] for row in results["settings"]} == {0.001, 0.003}
    assert results["settings"][0]["value"] <= results["settings"][1]["value"]
    for row in results["settings"]:
        assert row["worst"] == row["value"] == max(row["seeds"].values())
        # each seed's value is its run's best held-out loss
        assert sorted(row["seeds"].values()) == sorted(best_val_loss(folder / run) for run in row["runs"])

    before = len(trials(folder))  # again: it is finished, and trains nothing
    assert "sweep grid: finished, 2 settings" in run_sweep(path)
    assert len(trials(folder)) == before and len(run_folders(folder)) == 4


def best_val_loss(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return min(line["loss"] for line in lines if line["split"] == "val")


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """The folder of a 2-setting x 2-seed grid, swept in this process (`sweep show` reads it)."""
    from tinytf.sweep.spec import Job, load_sweep
    from tinytf.sweep.study import open_study, storage_for

    path = write_sweep(tmp_path_factory.mktemp("sweep"))
    sweep, base, _ = load_sweep(path)
    folder = path.parent / "sweeps" / "grid"
    study = open_study(sweep, "grid", storage_for(folder, None))
    job = Job(sweep, base, "grid", folder, None, 1)
    sweep_here(study, job)
    return folder


def sweep_here(study, job):
    """What a worker process does, in this process: take runs until none is left."""
    from tinytf.sweep.study import has_work
    from tinytf.sweep.worker import objective

    while has_work(study, job.sweep.budget):
        study.optimize(lambda trial: objective(trial, job, study), n_trials=1)


@pytest.mark.parametrize("format_", ["table", "csv"])
def test_show_prints_each_setting_with_its_seeds(grid, format_):
    folder = grid
    result = invoke("sweep", "show", folder, "--format", format_)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "seed 0" in line)
    assert all(word in header for word in ("train.lr", "seed 1", "mean", "worst"))
    assert sum("done" in line for line in lines) == 2


def test_show_png_draws_the_objective_against_each_parameter(grid, tmp_path):
    folder = grid
    result = invoke("sweep", "show", folder, "--format", "png", "--out", tmp_path / "sweep.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_user_error(invoke("sweep", "show", folder, "--out", tmp_path / "t.csv"), "--out is for --format png")
    assert_user_error(
        invoke("sweep", "show", folder, "--format", "png", "--out", tmp_path / "no" / "s.png"), "no folder"
    )


def test_a_sweep_shows_its_table_in_a_notebook(grid):
    from tinytf.sweep.results import load_results, results_text

    results = load_results(str(grid))
    shown = results._repr_html_()
    assert shown.startswith("<pre") and html.unescape(re.sub(r"^<pre[^>]*>|</pre>$", "", shown)) == results_text(
        results, "table"
    )


def test_show_loads_no_torch_in_any_format(grid, tmp_path):
    """`sweep show` reads a study and run folders' names: every format, in one fresh process."""
    program = (
        "import sys\n"
        "from tinytf.cli.app import app\n"
        "for args in sys.argv[1:]:\n"
        "    try:\n"
        "        app(['sweep', 'show', *args.split('|')], prog_name='tinytf')\n"
        "    except SystemExit as exit:\n"
        "        print(args.split('|')[2], exit.code, 'torch' in sys.modules, file=sys.stderr)\n"
    )
    formats = [f"{grid}|--format|{name}" for name in ("table", "json", "csv")]
    formats.append(f"{grid}|--format|png|--out|{tmp_path / 'sweep.png'}")
    result = subprocess.run([sys.executable, "-c", program, *formats], capture_output=True, text=True, timeout=120)
    assert result.stderr.splitlines() == [f"{name} 0 False" for name in ("table", "json", "csv", "png")], result.stderr


def wait_for_a_run(folder, seconds=60):
    """Wait until a trial's run has written a checkpoint (it is training)."""
    deadline = time.monotonic() + seconds
    while not any(folder.glob("trial-*/checkpoints/*.pt")):
        assert time.monotonic() < deadline, "no trial started"
        time.sleep(0.05)


def wait_for_the_end_of(worker):
    """Wait until the worker process `worker` has followed its killed sweep."""
    deadline = time.monotonic() + 10
    while subprocess.run(["kill", "-0", str(worker)], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "the worker outlived its sweep"
        time.sleep(0.1)


def long_base():
    """Runs long enough to be cut after their first checkpoint (step 20), short enough to
    train again: the base config cannot change between the runs of a sweep."""
    return tiny_data(train={"steps": 800, "eval_every": 20, "checkpoint_every": 20, "snapshot_every": 200})


def test_a_killed_sweep_fails_its_cut_trial_and_retries_it_once(tmp_path):
    path = write_sweep(tmp_path, base_config=long_base(), seeds=[0])
    process = sweep_process(path)
    wait_for_a_run(tmp_path / "sweeps" / "grid")
    process.kill()
    process.communicate()
    folder = tmp_path / "sweeps" / "grid"
    (cut,) = [trial for trial in trials(folder) if trial.state == optuna.trial.TrialState.RUNNING]
    wait_for_the_end_of(cut.user_attrs["worker"]["pid"])

    output = run_sweep(path)
    assert f"trying again the trials cut short: {cut.number}" in output
    states = {trial.number: trial.state.name for trial in trials(folder)}
    (retry,) = [trial for trial in trials(folder) if trial.user_attrs.get("retry_of") == cut.number]
    assert states[cut.number] == "FAIL" and states[retry.number] == "COMPLETE" and retry.params == cut.params
    settings = shown(folder)["settings"]
    assert sorted(row["params"]["train.lr"] for row in settings) == [0.001, 0.003]
    assert all(row["state"] == "done" for row in settings)
    ends = []
    for run in {lock.parent for lock in folder.rglob("train.lock")}:  # every run's snapshots whole, the cut one's too
        steps = [load_checkpoint(path)["step"] for _, path in RunFolder(run).snapshots()]
        assert steps == list(range(0, 200 * len(steps), 200)), run
        ends.append(steps[-1])
    assert sorted(ends)[-2:] == [800, 800]  # the two settings' runs that finished


def test_a_killed_worker_is_named_with_its_process_signal_and_trial(tmp_path):
    path = write_sweep(tmp_path, base_config=long_base(), seeds=[0], params={})  # one setting: one run
    process = subprocess.Popen(
        [sys.executable, "-m", "tinytf", "sweep", path.name],
        cwd=tmp_path,
        env=SUBPROCESS_ENV,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    folder = tmp_path / "sweeps" / "grid"
    wait_for_a_run(folder)
    (running,) = trials(folder)
    worker = running.user_attrs["worker"]["pid"]
    os.kill(worker, signal.SIGKILL)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert stderr.splitlines()[-1] == (
        f"error: worker 1 (process {worker}) was killed by SIGKILL while training trial {running.number}; "
        "run the same command to try its runs again"
    )


def test_ctrl_c_saves_the_running_trials_and_the_next_sweep_retries_them(tmp_path):
    path = write_sweep(tmp_path, base_config=long_base(), seeds=[0])
    process = sweep_process(path, "--workers", 2)
    folder = tmp_path / "sweeps" / "grid"
    wait_for_a_run(folder)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, output
    assert output.count("stopped; its run is saved") == 2
    cut = [row for row in shown(folder)["settings"] if row["state"] == "cut short"]
    assert cut and all(row["state"] in ("cut short", "done") for row in shown(folder)["settings"])
    for run in folder.glob("trial-*"):  # every run saved where it stopped
        assert (run / "checkpoints" / "last.pt").is_file()
    stopped = {t.number: t.params for t in trials(folder) if "interrupted" in t.user_attrs}
    assert len(stopped) == 2  # the two workers' runs
    output = run_sweep(path)
    assert f"trying again the trials cut short: {', '.join(map(str, sorted(stopped)))}" in output
    assert all(row["state"] == "done" for row in shown(folder)["settings"])
    retries = [t for t in trials(folder) if t.user_attrs.get("retry_of") in stopped]
    assert sorted(t.user_attrs["retry_of"] for t in retries) == sorted(stopped)  # each retried once
    assert all(t.state.name == "COMPLETE" and t.params == stopped[t.user_attrs["retry_of"]] for t in retries)
    done = [
        (tuple(sorted(t.params.items())), t.user_attrs.get("seed"))
        for t in trials(folder)
        if t.state.name == "COMPLETE"
    ]
    assert len(done) == len(set(done)) == 2  # no setting trained twice


def test_two_sweeps_sharing_one_study_split_its_settings(tmp_path):
    lrs = [0.001, 0.002, 0.003, 0.005]
    path = write_sweep(tmp_path, params={"train.lr": {"choice": lrs}}, seeds=[0])
    first, second = sweep_process(path), sweep_process(path)
    for process in (first, second):
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
    folder = tmp_path / "sweeps" / "grid"
    trained = [t for t in trials(folder) if "surplus" not in t.user_attrs]
    assert sorted(t.params["train.lr"] for t in trained) == lrs
    assert len(run_folders(folder)) == 4


def test_the_median_pruner_stops_a_trial_worse_than_the_others_and_says_so(tmp_path, capsys):
    from tinytf.sweep.spec import load_sweep
    from tinytf.sweep.worker import Job, objective

    base = tiny_data(train={"steps": 60, "eval_every": 10})
    path = write_sweep(tmp_path, base_config=base, params={"train.lr": {"choice": [1e-6]}}, seeds=[0, 1])
    sweep, base_path, _ = load_sweep(path)
    sweep = sweep.model_copy(update={"pruner": "median", "sampler": "random", "trials": 10})
    job = Job(sweep, base_path, "pruned", tmp_path / "sweeps" / "pruned", None, 1)
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner())
    for _ in range(5):  # five settings whose held-out loss was 0.1 at every evaluation
        study.add_trial(
            optuna.trial.create_trial(value=0.1, intermediate_values={step: 0.1 for step in range(10, 61, 10)})
        )
    study.optimize(lambda trial: objective(trial, job, study), n_trials=1)
    (pruned,) = study.get_trials(states=(optuna.trial.TrialState.PRUNED,))
    assert list(pruned.intermediate_values) == [10]  # stopped at its first evaluation
    assert "pruned at step 10: val loss" in capsys.readouterr().out
    study.optimize(lambda trial: objective(trial, job, study), n_trials=1)  # its other seed: not trained
    assert len(study.get_trials(states=(optuna.trial.TrialState.PRUNED,))) == 2
    assert "another seed of its setting was pruned" in capsys.readouterr().out
    assert len(list(job.folder.iterdir())) == 1


BAD_SWEEPS = [
    ({"colour": "red"}, "line 2: colour: unknown key (allowed: base, params"),
    ({"params": {"train.lr": {"float": [0.1, 0.01]}}}, "params.train.lr: [0.1, 0.01]: low must not exceed high"),
    ({"params": {"train.lr": {"choice": [1, 2], "int": [1, 2]}}}, "give one of float"),
    ({"params": {"model.d_modle": {"choice": [16]}}}, "params: --set model.d_modle=16"),
    ({"params": {"model.d_model": {"choice": [16, 17]}}}, "params: --set model.d_model=17"),
    ({"params": {"train.lr": {"float": [0.001, 0.01]}}}, "params.train.lr: sampler grid needs choice"),
    ({"sampler": "tpe"}, "sampler tpe: give trials"),
    ({"objective": {"metric": "time_to_target"}}, "needs train.stop_at_accuracy"),
    ({"objective": {"metric": "speed"}}, "objective.metric: Input should be"),
    ({"seeds": [1, 1]}, "seeds: each seed once"),
    ({"seeds": [0, 2**63]}, "seeds: each seed once, from 0 to 9223372036854775807"),
    ({"params": {"train.lr": {"choice": [float("nan"), 0.001]}}}, "params.train.lr.choice: a choice is a finite"),
    ({"params": {"seed": {"choice": [5, 6]}}}, "params.seed: every setting trains on each seed of seeds"),
    ({"params": {"model.n_layers": {"int": [1, 4], "log": True, "step": 2}}}, "step is for int ranges without log"),
    ({"params": {}, "base": "nowhere.yaml"}, "nowhere.yaml"),
    ({"base": "missing.yaml"}, "missing.yaml"),
]


@pytest.mark.parametrize(("keys", "message"), BAD_SWEEPS)
def test_a_bad_sweep_file_is_one_line_naming_the_file(tmp_path, keys, message):
    path = write_sweep(tmp_path, **keys)
    result = invoke("sweep", path, "--runs-dir", tmp_path / "sweeps")
    assert_user_error(result, message)
    assert str(path) in result.stderr and not (tmp_path / "sweeps").exists()


def test_a_misspelt_key_is_named_before_the_key_it_leaves_missing(tmp_path):
    write_config(tmp_path, tiny_data(), "base.yaml")
    path = tmp_path / "grid.yaml"
    path.write_text("base: base.yaml\nparams: {}\nseedz: [0, 1]\n")  # no objective either
    result = invoke("sweep", path, "--runs-dir", tmp_path / "sweeps")
    assert_user_error(result, "line 3: seedz: unknown key (did you mean 'seeds'? allowed: base, params, seeds")


def test_yaml_the_sweep_file_may_not_hold_is_one_line(tmp_path):
    path = tmp_path / "alias.yaml"
    path.write_text("base: &b base.yaml\nother: *b\n")
    assert_user_error(invoke("sweep", path), "anchors and aliases are not supported")
    path.write_text("- a list\n")
    assert_user_error(invoke("sweep", path), "expected a mapping")


def test_a_sweep_continued_with_other_params_is_refused(grid, tmp_path):
    folder = grid
    path = write_sweep(tmp_path, seeds=[0, 1, 2])
    result = invoke("sweep", path, "--runs-dir", folder.parent)
    assert_user_error(result, "the sweep 'grid' was started with other seeds")
    assert_user_error(invoke("sweep", path, "--trials", 3), "--trials: this sweep trains every setting of its grid")


def test_show_names_what_is_not_a_sweep_and_what_was_likely_meant(grid, tmp_path):
    # a folder without the journal: the runs of a sweep whose study is in a database
    (tmp_path / "lr" / "trial-000-seed-0-x").mkdir(parents=True)
    database = "; a sweep stored in a database: add --storage URL"
    missing = f"no sweep 'lr' in {tmp_path}/ (no {tmp_path / 'lr' / 'study.journal'})"
    assert_user_error(invoke("sweep", "show", tmp_path / "lr"), missing + database)
    assert_user_error(invoke("sweep", "show", "lr", "--runs-dir", tmp_path), database)
    shown = invoke("sweep", "show", "nothing", "--runs-dir", tmp_path)
    assert_user_error(shown, f"no sweep 'nothing' in {tmp_path}/ (no {tmp_path / 'nothing' / 'study.journal'}); start")
    assert "--storage URL" in shown.stderr
    assert_user_error(invoke("sweep", "show", "gird", "--runs-dir", grid.parent), "; did you mean 'grid'?")


def test_the_commands_sweep_prints_paste_as_they_are_with_the_storage(tmp_path):
    from tinytf.sweep.launch import show_command
    from tinytf.sweep.spec import Job, load_sweep
    from tinytf.sweep.study import open_study

    assert show_command(Path("my sweeps/lr"), None) == "tinytf sweep show 'my sweeps/lr'"
    hidden = show_command(Path("lr"), "postgresql://me:s3cret@db.example/sweeps")
    assert hidden == "tinytf sweep show lr --storage 'postgresql://me:***@db.example/sweeps'"
    path = write_sweep(tmp_path, seeds=[0])
    sweep, base, _ = load_sweep(path)
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    runs_dir = tmp_path / "my sweeps"
    study = open_study(sweep, "lr", url)
    sweep_here(study, Job(sweep, base, "lr", runs_dir / "lr", url, 1))
    again = invoke("sweep", path, "--name", "lr", "--storage", url, "--runs-dir", runs_dir)
    assert again.exit_code == 0, again.output
    command = again.stdout.rpartition("see them with: ")[2].strip()
    assert command == show_command(runs_dir / "lr", url) and "--storage" in command
    tinytf, *args = shlex.split(command)  # pasted: the sweep, its runs in the folder printed
    shown = invoke(*args)
    assert tinytf == "tinytf" and shown.exit_code == 0, shown.output
    assert f"run folders: {runs_dir / 'lr'}/trial-NNN-seed-S-*" in shown.stdout


def test_the_workers_share_omp_num_threads_cores_else_the_machines(monkeypatch):
    from tinytf.sweep.launch import available_cores

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert available_cores() == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert available_cores() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("sampler", ["tpe", "grid"])
def test_a_sweep_without_params_trains_the_base_config_on_each_seed(tmp_path, sampler):
    from tinytf.sweep.spec import Job, load_sweep
    from tinytf.sweep.study import open_study, storage_for

    path = write_sweep(tmp_path, params={}, seeds=[3, 4], sampler=sampler)
    sweep, base, _ = load_sweep(path)
    assert sweep.budget == 1 and sweep.is_grid
    folder = tmp_path / "sweeps" / "grid"
    study = open_study(sweep, "grid", storage_for(folder, None))
    sweep_here(study, Job(sweep, base, "grid", folder, None, 1))
    (row,) = shown(folder)["settings"]
    assert row["params"] == {} and set(row["seeds"]) == {"3", "4"} and row["rank"] == 1
    assert invoke("sweep", "show", folder, "--format", "png").exit_code == 0  # each seed against its seed
    assert (folder / "sweep.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("example", sorted((ROOT / "sweeps").glob("*.yaml")), ids=lambda path: path.name)
def test_the_example_sweeps_are_valid_from_any_folder(example, monkeypatch, tmp_path):
    from tinytf.sweep.spec import load_sweep

    monkeypatch.chdir(tmp_path)
    sweep, base, config = load_sweep(example)
    assert base.is_file() and config.train.stop_at_accuracy is not None and sweep.budget >= 1


def test_a_study_in_a_database_is_read_back_by_name(tmp_path, monkeypatch):
    from tinytf.sweep.spec import Job, load_sweep
    from tinytf.sweep.study import open_study

    path = write_sweep(tmp_path, seeds=[0])
    sweep, base, _ = load_sweep(path)
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    study = open_study(sweep, "lr", url)
    sweep_here(study, Job(sweep, base, "lr", tmp_path / "lr", url, 1))
    result = invoke("sweep", "show", "lr", "--storage", url, "--format", "csv")
    assert result.exit_code == 0, result.output
    assert [line.split(",")[2] for line in result.stdout.splitlines()[1:]] == ["done", "done"]
    assert_user_error(invoke("sweep", "show", "other", "--storage", url), "no sweep named 'other'")
    elsewhere = tmp_path / "elsewhere"  # a machine that reads the database without the runs
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    drawn = invoke("sweep", "show", "lr", "--storage", url, "--format", "png")
    assert drawn.exit_code == 0 and drawn.stdout == "wrote sweep.png\n" and (elsewhere / "sweep.png").is_file()


def test_a_study_another_program_made_is_one_line(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="grid", storage=url)
    study.tell(study.ask(), 1.0)
    fragment = "the study 'grid' was not made by tinytf sweep (it records no sweep file)"
    shown = invoke("sweep", "show", "grid", "--storage", url)
    assert_user_error(shown, fragment)
    assert "--name" not in shown.stderr  # show has none
    path = write_sweep(tmp_path)
    sweep_here = ["--storage", url, "--runs-dir", tmp_path / "sweeps"]
    assert_user_error(invoke("sweep", path, *sweep_here), f"{fragment}; give this sweep another --name")
    assert len(optuna.load_study(study_name="grid", storage=url).trials) == 1  # left as it was
    optuna.create_study(study_name="empty", storage=url, direction="maximize")  # no trial, the other direction
    assert_user_error(invoke("sweep", path, "--name", "empty", *sweep_here), "the study 'empty' was not made by")
    assert optuna.load_study(study_name="empty", storage=url).user_attrs == {}


@pytest.mark.parametrize(
    ("url", "message"),
    [("foo://bar", "--storage foo://bar: "), ("sqlite:////no/such/folder/x.db", "unable to open database")],
)
def test_a_storage_that_cannot_be_opened_is_one_line(tmp_path, url, message):
    path = write_sweep(tmp_path)
    assert_user_error(invoke("sweep", path, "--storage", url, "--runs-dir", tmp_path / "sweeps"), message)
    assert_user_error(invoke("sweep", "show", "grid", "--storage", url), message)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "sqlite:///:memory:"])
def test_an_in_memory_storage_is_refused_before_any_worker_starts(tmp_path, url):
    path = write_sweep(tmp_path)
    result = invoke("sweep", path, "--storage", url, "--runs-dir", tmp_path / "sweeps")
    assert_user_error(result, "an in-memory database lives and dies with one process")
    assert not (tmp_path / "sweeps").exists()


def test_a_storage_error_never_prints_the_password(tmp_path):
    path = write_sweep(tmp_path)
    url = "mysql+nosuchdriver://sweeper:s3cret@localhost/db"
    for args in (["sweep", path, "--runs-dir", tmp_path / "sweeps"], ["sweep", "show", "grid"]):
        result = invoke(*args, "--storage", url)
        assert_user_error(result, "--storage mysql+nosuchdriver://sweeper:***@localhost/db: ")
        assert "s3cret" not in result.output


def test_a_postgresql_url_takes_the_installed_driver_or_names_the_one_to_install(monkeypatch):
    from tinytf.sweep import study

    url = "postgresql://sweeper:s3cret@db.example:5432/sweeps"
    installed = {"psycopg2"}
    monkeypatch.setattr(study.importlib.util, "find_spec", lambda name: object() if name in installed else None)
    assert study.database_url(url) == "postgresql+psycopg2://sweeper:s3cret@db.example:5432/sweeps"
    installed.add("psycopg")  # both: the one SQLAlchemy 2.1 prefers
    assert study.database_url(url) == "postgresql+psycopg://sweeper:s3cret@db.example:5432/sweeps"
    explicit = "postgresql+psycopg2://sweeper:s3cret@db.example/sweeps"  # a driver given: kept
    assert study.database_url(explicit) == explicit
    installed.clear()
    with pytest.raises(
        UserError,
        match=r"sweeper:\*\*\*@db.example:5432/sweeps: no PostgreSQL driver is installed; "
        r'pip install "psycopg\[binary\]"',
    ) as raised:
        study.database_url(url)
    assert "s3cret" not in str(raised.value)


def test_the_job_reaches_the_workers_on_stdin_not_in_argv(tmp_path, monkeypatch):
    """argv is visible to every user (`ps`) and limited in size; the job holds the storage URL."""
    from tinytf.sweep import launch
    from tinytf.sweep.spec import Job, load_sweep

    started = []

    class Recorded:
        def __init__(self, command, **options):
            started.append((command, options, self))
            self.pid, self.returncode, self.stdin = 4242, 0, io.StringIO()
            self.stdin.close = lambda: None

        def wait(self):
            return 0

    monkeypatch.setattr(launch.subprocess, "Popen", Recorded)
    sweep, base, _ = load_sweep(write_sweep(tmp_path))
    url = "postgresql://sweeper:s3cret@db.example/sweeps"
    job = Job(sweep, base, "grid", tmp_path, url, 1)
    launch._run_workers(job, 2)
    assert len(started) == 2
    for command, options, worker in started:
        assert "s3cret" not in " ".join(command) and options["stdin"] == subprocess.PIPE
        assert json.loads(worker.stdin.getvalue())["storage"] == url


def test_a_base_config_changed_since_the_sweep_started_is_refused(tmp_path):
    from tinytf.sweep.spec import load_sweep
    from tinytf.sweep.study import open_study, storage_for

    path = write_sweep(tmp_path)
    sweep, _, base = load_sweep(path)
    open_study(sweep, "grid", storage_for(tmp_path / "sweeps" / "grid", None), base)  # started on 12 steps
    write_config(tmp_path, tiny_data(train={"steps": 400}), "base.yaml")
    result = invoke("sweep", path, "--runs-dir", tmp_path / "sweeps")
    assert_user_error(
        result, "the base config of the sweep 'grid' has changed since it started (train.steps: 12 -> 400)"
    )
    assert not list((tmp_path / "sweeps" / "grid").glob("trial-*"))
    write_config(tmp_path, tiny_data(), "base.yaml")  # restored: the same study goes on
    sweep, _, base = load_sweep(path)
    assert open_study(sweep, "grid", storage_for(tmp_path / "sweeps" / "grid", None), base).user_attrs["base"]


def test_a_sweep_name_that_names_no_folder_says_where_it_came_from(tmp_path):
    path = write_sweep(tmp_path)
    assert_user_error(invoke("sweep", path, "--name", "", "--runs-dir", tmp_path), "--name '': a run name is one")
    hidden = write_sweep(tmp_path, name=".hidden")
    message = f"{hidden}: a sweep is named after its file, and '.hidden' names no folder; give --name"
    assert_user_error(invoke("sweep", hidden, "--runs-dir", tmp_path / "sweeps"), message)


def failed_run(study):
    """Add a run of seed 0 that failed as a killed or stopped one does (no error)."""
    params, distributions = {"train.lr": 0.001}, {"train.lr": optuna.distributions.FloatDistribution(1e-4, 1e-2)}
    state = optuna.trial.TrialState.FAIL
    study.add_trial(
        optuna.trial.create_trial(state=state, params=params, distributions=distributions, user_attrs={"seed": 0})
    )


@pytest.mark.parametrize(("interrupted", "retried_again"), [(False, False), (True, True)])
def test_a_killed_run_is_trained_again_once_and_a_stopped_one_every_time(interrupted, retried_again):
    from tinytf.sweep.study import retry_cut_short, settings_of

    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    failed_run(study)  # its process was killed
    assert retry_cut_short(study, storage, (0,)) == [0]
    retry = study.ask()  # the queued retry: it fails the same way
    assert retry.user_attrs == {"setting": 0, "seed": 0, "retry_of": 0, "kills": 1}
    if interrupted:
        retry.set_user_attr("interrupted", True)
    study.tell(retry, state=optuna.trial.TrialState.FAIL)
    assert bool(retry_cut_short(study, storage, (0,))) == retried_again
    (setting,) = settings_of(study)
    assert setting.state(1) == ("waiting" if retried_again else "failed")


@pytest.mark.parametrize("database", [None, "sqlite"])
def test_a_run_killed_in_the_last_setting_of_a_grid_is_failed_and_queued_again(tmp_path, database):
    """Failing the killed run's trial completes the grid: the grid sampler must not stop the
    study outside a worker's optimize (Optuna raises a RuntimeError there). In the sweep's
    journal, or a database."""
    from tinytf.sweep.spec import load_sweep
    from tinytf.sweep.study import HOST, open_study, retry_cut_short, storage_for

    path = write_sweep(tmp_path, name="seeds", params={}, seeds=[0])  # one setting, the base config
    folder = tmp_path / "sweeps" / "seeds"
    storage = storage_for(folder, f"sqlite:///{tmp_path / 'sweeps.db'}" if database else None)
    study = open_study(load_sweep(path)[0], "seeds", storage)
    trial = study.ask()  # the last (and only) setting of the grid, taken by a worker...
    gone = subprocess.Popen(["true"])
    gone.wait()  # ...whose process is gone (killed): a pid no process holds now
    trial.set_user_attr("seed", 0)
    trial.set_user_attr("worker", {"host": HOST, "pid": gone.pid})
    assert retry_cut_short(study, storage, (0,)) == [trial.number]
    states = [t.state for t in optuna.load_study(study_name="seeds", storage=storage).trials]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING]


def test_a_choice_of_numbers_and_all_is_drawn_as_categories(tmp_path):
    from tinytf.sweep.results import Results, Row, sweep_figure
    from tinytf.sweep.spec import load_sweep

    sweep_file = tmp_path / "batch.yaml"
    base = ROOT / "configs" / "grokking.yaml"
    sweep_file.write_text(
        f"base: {base}\nparams:\n  train.batch_size: {{choice: [32, 64, all]}}\nseeds: [0]\n"
        "objective: {metric: val_loss, over_seeds: worst}\nsampler: grid\n"
    )
    sweep = load_sweep(sweep_file)[0]
    ranked = [("all", 0.2), (64, 0.5), (32, 0.9)]  # best first, as `sweep show` reads them
    rows = [
        Row(rank, rank, "complete", {"train.batch_size": size}, value, {0: value}, value, value, 1.0, [], "")
        for rank, (size, value) in enumerate(ranked, start=1)
    ]
    axis = sweep_figure(Results("batch", None, sweep, rows)).axes[0]
    assert [label.get_text() for label in axis.get_xticklabels()] == ["32", "64", "all"]  # the file's order
    rings = axis.collections[1::2]  # each row draws its dots, then its ring
    assert [tuple(ring.get_offsets()[0]) for ring in rings] == [(2, 0.2), (1, 0.5), (0, 0.9)]
    assert axis.get_ylabel() == "held-out loss (nats per token), best checkpoint"  # the metric and its unit
    title = axis.figure.get_suptitle()
    assert "on seed 0" in title and "seeds" not in title  # one seed: no "worst over its seeds"


def test_a_sweep_to_a_target_names_the_target_on_its_value_axis(tmp_path):
    from tinytf.sweep.results import load_results, sweep_figure
    from tinytf.sweep.spec import Job, load_sweep
    from tinytf.sweep.study import open_study, storage_for

    base = tiny_data(train={"stop_at_accuracy": 0.5})
    path = write_sweep(tmp_path, base_config=base, params={}, seeds=[0], objective={"metric": "steps_to_target"})
    sweep, base_path, _ = load_sweep(path)
    folder = tmp_path / "sweeps" / "grid"
    sweep_here(open_study(sweep, "grid", storage_for(folder, None)), Job(sweep, base_path, "grid", folder, None, 1))
    results = load_results(str(folder))
    assert results.target == 0.5
    figure = sweep_figure(results)
    assert figure.axes[0].get_ylabel() == "steps to 50% held-out exact match"
    assert figure.get_suptitle() == "sweep grid: steps_to_target\n(a dot per seed's run)"


def test_every_setting_of_a_large_grid_is_checked_before_training(tmp_path):
    from tinytf.sweep.spec import load_sweep

    rates = [round(0.001 + i * 1e-6, 6) for i in range(1100)]
    params = {"model.n_heads": {"choice": [1, 3]}, "train.lr": {"choice": rates}}  # n_heads 3 from setting 1,100 on
    with pytest.raises(ConfigError, match=r"line \d+: params: --set model.n_heads=3"):
        load_sweep(write_sweep(tmp_path, params=params))


def test_a_full_disk_stops_the_sweep_in_one_line_and_the_rerun_trains_what_it_cut(tmp_path):
    from test_training import small_disk

    data = tiny_data(train={"steps": 40, "checkpoint_every": 4}, log={"every": 1, "attention_every": 4})
    path = write_sweep(tmp_path, base_config=data, seeds=[0])
    with small_disk(tmp_path / "disk", "150k") as disk:
        runs = ["--runs-dir", disk / "sweeps"]
        process = subprocess.run(
            [sys.executable, "-m", "tinytf", "sweep", path.name, *map(str, runs)],
            cwd=tmp_path,
            env=SUBPROCESS_ENV,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert process.returncode == 1 and "Traceback" not in process.stdout + process.stderr, process.stderr
        (error,) = [line for line in process.stderr.splitlines() if line.startswith("error: ")]
        assert "could not write a file" in error and "run the same command" in error
        assert "No space left on device" in process.stdout  # what the worker could not write, with its trial
        subprocess.run(["mount", "-o", "remount,size=20m", str(disk)], check=True)  # space freed
        output = run_sweep(path, *runs)
        settings = shown(disk / "sweeps" / "grid")["settings"]
        assert all(row["state"] == "done" for row in settings), output
        assert sorted(row["params"]["train.lr"] for row in settings) == [0.001, 0.003]


def test_two_sweeps_starting_at_once_on_a_new_sqlite_study_both_open_it(tmp_path):
    """They race to make the database's tables; the one that loses tries again (a real race:
    two processes released at the same instant, three times over)."""
    path = write_sweep(tmp_path)
    program = (
        "import sys, time\n"
        "from tinytf.sweep.spec import load_sweep\n"
        "from tinytf.sweep.study import open_study\n"
        "sweep, _, base = load_sweep(sys.argv[1])\n"
        "while time.time() < float(sys.argv[3]):\n"
        "    pass\n"
        "open_study(sweep, 'grid', sys.argv[2], base)\n"
    )
    for round_ in range(3):
        url, start = f"sqlite:///{tmp_path / f'race-{round_}.db'}", str(time.time() + 2.5)
        both = [
            subprocess.Popen([sys.executable, "-c", program, path, url, start], stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        for process in both:
            _, stderr = process.communicate(timeout=60)
            assert process.returncode == 0, stderr


# --------------------------------------------------------------------------- a real PostgreSQL server


@pytest.fixture
def postgres():
    """The URL of a PostgreSQL database the tests may add studies to (each test names its own)."""
    url = os.environ.get("TINYTF_TEST_POSTGRES")
    if not url:
        unavailable(
            "no PostgreSQL server for the sweep storage tests (TINYTF_TEST_POSTGRES is unset)",
            "export TINYTF_TEST_POSTGRES=$(.ci/postgres)",
        )
    return url


def postgres_trials(url, name):
    from tinytf.sweep.study import database_url  # the installed driver, as a sweep takes it

    return optuna.load_study(study_name=name, storage=database_url(url)).get_trials()


def test_two_sweeps_started_at_once_on_one_new_postgresql_study_split_its_settings(tmp_path, postgres):
    name = f"pair-{uuid.uuid4().hex[:8]}"
    lrs = [0.001, 0.002, 0.003, 0.005]
    path = write_sweep(tmp_path, params={"train.lr": {"choice": lrs}}, seeds=[0])
    first, second = (sweep_process(path, "--name", name, "--storage", postgres) for _ in range(2))
    for process in (first, second):
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
    trained = [t for t in postgres_trials(postgres, name) if "surplus" not in t.user_attrs]
    assert sorted(t.params["train.lr"] for t in trained) == lrs
    assert len(run_folders(tmp_path / "sweeps" / name)) == 4


def test_a_sweep_killed_in_its_last_setting_is_finished_by_the_rerun_on_postgresql(tmp_path, postgres):
    name = f"killed-{uuid.uuid4().hex[:8]}"
    path = write_sweep(tmp_path, base_config=long_base(), seeds=[0], params={})  # one setting: the last
    process = sweep_process(path, "--name", name, "--storage", postgres)
    wait_for_a_run(tmp_path / "sweeps" / name)
    process.kill()
    process.communicate()
    (cut,) = postgres_trials(postgres, name)
    assert cut.state == optuna.trial.TrialState.RUNNING
    wait_for_the_end_of(cut.user_attrs["worker"]["pid"])

    output = run_sweep(path, "--name", name, "--storage", postgres)
    assert f"trying again the trials cut short: {cut.number}" in output
    (retry,) = [t for t in postgres_trials(postgres, name) if t.user_attrs.get("retry_of") == cut.number]
    assert retry.state == optuna.trial.TrialState.COMPLETE
    shown = invoke("sweep", "show", name, "--storage", postgres, "--format", "json")
    assert [row["state"] for row in json.loads(shown.stdout)["settings"]] == ["done"]


def test_a_worker_with_nothing_to_take_waits_for_the_seeds_another_is_queueing(tmp_path):
    """Worker A has taken the last setting's first run and not yet queued its other seeds: a
    worker B that looks now finds no work, and must wait for them, not exit (leaving A to
    train every seed one after another)."""
    from tinytf.sweep.spec import Job, load_sweep
    from tinytf.sweep.study import HOST, has_work, open_study, queue_seeds, seeds_pending, storage_for

    path = write_sweep(tmp_path, params={}, seeds=[0, 1])  # one setting, two seeds
    sweep, base, _ = load_sweep(path)
    folder = tmp_path / "sweeps" / "grid"
    study = open_study(sweep, "grid", storage_for(folder, None))
    first = study.ask()  # A's first run, its other seed not queued yet
    first.set_user_attr("seed", 0)
    gone = subprocess.Popen(["true"])
    gone.wait()
    first.set_user_attr("worker", {"host": HOST, "pid": gone.pid})  # A's process gone: nothing to wait for
    assert not has_work(study, sweep.budget) and not seeds_pending(study, sweep.seeds)
    first.set_user_attr("worker", {"host": HOST, "pid": os.getpid()})  # A alive (this process)
    assert not has_work(study, sweep.budget) and seeds_pending(study, sweep.seeds)

    job = tmp_path / "job.json"
    job.write_text(Job(sweep, base, "grid", folder, None, 1).to_json())
    with job.open() as job_on_stdin:
        command = [sys.executable, "-m", "tinytf.sweep.worker", str(os.getpid())]
        worker = subprocess.Popen(command, env=SUBPROCESS_ENV, stdin=job_on_stdin, stdout=subprocess.PIPE, text=True)
    # B says it waits, and does (a B that gives up would end its output here)...
    assert worker.stdout.readline() == "waiting for the runs another worker is queueing\n"
    with pytest.raises(subprocess.TimeoutExpired):
        worker.wait(timeout=1)
    queue_seeds(study, first.number, first.params, [1])  # ...until A queues the other seed
    first.set_user_attr("seeds_queued", True)
    output, _ = worker.communicate(timeout=120)
    assert worker.returncode == 0, output
    assert "trial 1 (seed=1): val_loss" in output
    (second,) = [t for t in trials(folder) if t.user_attrs.get("seed") == 1]
    assert second.state == optuna.trial.TrialState.COMPLETE and second.user_attrs["worker"]["pid"] == worker.pid
