"""A run's setup is worked out once: `tinytf train` checks its config once and builds its
task at most twice (once more on resume, for the run's saved vocabulary), however many
layers -- memory check, data, model, run folder, loggers -- use them."""

from pathlib import Path

import pytest
from conftest import invoke, tiny_data, write_config

from tinytf.run.setup import Setup
from tinytf.tasks import TASKS
from tinytf.tasks.base import Task
from tinytf.training import trainer

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.fixture
def counts(monkeypatch):
    """How many times `Setup.of` checks a config, and how many tasks are made: Task.__init__
    (no task overrides it: checked below), and copies."""
    seen = {"checks": 0, "tasks": 0}
    checked = Setup.of.__func__

    def counting_of(cls, config, **options):
        seen["checks"] += 1
        return checked(cls, config, **options)

    made = Task.__init__

    def counting_init(self, config):
        seen["tasks"] += 1
        made(self, config)

    def counting_copy(self):  # copy.copy(task) asks for this
        seen["tasks"] += 1
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin

    monkeypatch.setattr(Setup, "of", classmethod(counting_of))
    monkeypatch.setattr(Task, "__init__", counting_init)
    monkeypatch.setattr(Task, "__copy__", counting_copy, raising=False)
    return seen


def test_every_task_is_made_through_task_init_so_the_count_sees_it():
    below_task = {
        name: [k for k in cls.__mro__ if issubclass(k, Task) and k is not Task] for name, cls in TASKS.items()
    }
    overriding = [
        name for name, classes in below_task.items() if any({"__init__", "__new__"} & set(vars(k)) for k in classes)
    ]
    assert overriding == []


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.stem)
def test_training_a_shipped_config_checks_it_once_and_builds_its_task_once(path, counts, tmp_path, monkeypatch):
    # Everything up to the first step: the loop itself is the tiny run's below.
    monkeypatch.setattr(
        trainer.Trainer,
        "run",
        lambda self, stop_requested=None: trainer.TrainResult(self.run_dir, self.step, False, {}, {}),
    )
    monkeypatch.chdir(ROOT)  # text-decoder's task.path is relative to the repository
    result = invoke("train", path, "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    assert counts == {"checks": 1, "tasks": 1}


def test_a_tiny_run_trained_then_resumed_checks_once_each_time(counts, tmp_path):
    config = write_config(tmp_path, tiny_data(train={"steps": 4, "eval_every": 2}, log={"attention_every": 2}))
    result = invoke("train", config, "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    assert counts == {"checks": 1, "tasks": 1}
    (run,) = (tmp_path / "runs").iterdir()
    counts.update(checks=0, tasks=0)
    result = invoke("train", "--resume", run, "--set", "train.steps=6")
    assert result.exit_code == 0, result.output
    assert counts == {"checks": 1, "tasks": 2}  # the second: the task with the run's saved vocabulary
