"""Where training runs and in what precision (tinytf/device.py): train.device in one process
and under torchrun, what train.precision means on each device, the step's autocast, a
torchrun job agreeing on one precision, and the device a model lives on."""

import pytest
import torch
from conftest import tiny_config
from torch import nn

from tinytf.device import model_device, select_device, step_autocast, step_precision
from tinytf.errors import UserError
from tinytf.run.setup import Setup
from tinytf.training.distributed import OneProcess
from tinytf.training.trainer import _assemble


def test_unavailable_device_is_a_user_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without a GPU, even on one with
    with pytest.raises(UserError, match="no cuda device"):
        select_device("cuda")
    assert select_device("cpu").type == "cpu"


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine with two CUDA GPUs, as far as device choice can tell."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_a_torchrun_process_trains_on_its_own_gpu_or_the_cpu(two_gpus):
    assert select_device("auto", 1) == torch.device("cuda", 1)
    assert select_device("cuda", 0) == torch.device("cuda", 0)
    assert select_device("auto", 2) == torch.device("cpu")  # a third process has no GPU of its own
    assert select_device("cpu", 0) == torch.device("cpu")
    with pytest.raises(UserError, match=r"process 2 of this machine has no GPU of its own \(2 here\)"):
        select_device("cuda", 2)
    with pytest.raises(UserError, match="training with torchrun runs on cpu or cuda"):
        select_device("mps", 0)


@pytest.mark.parametrize("capability, on_cuda", [((8, 0), "bf16"), ((9, 0), "bf16"), ((7, 5), "fp32")])
def test_precision_auto_is_bf16_on_cuda_gpus_with_bf16_tensor_cores_alone(monkeypatch, capability, on_cuda):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    cpu, cuda, mps = torch.device("cpu"), torch.device("cuda"), torch.device("mps")
    assert [step_precision(device, "auto") for device in (cpu, cuda, mps)] == ["fp32", on_cuda, "fp32"]
    assert step_precision(cpu, "bf16") == "bf16" and step_precision(cuda, "bf16") == "bf16"  # bf16 when asked
    assert step_precision(cuda, "fp32") == "fp32"
    with pytest.raises(UserError, match="precision=bf16 runs on cpu or cuda"):
        step_precision(mps, "bf16")


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_the_step_autocasts_in_bf16_alone(precision, dtype):
    a, b = torch.ones(4, 4), torch.ones(4, 4)
    with step_autocast(torch.device("cpu"), precision):
        assert (a @ b).dtype == dtype
    assert (a @ b).dtype == torch.float32  # only inside


class AnotherProcessSaysYes(OneProcess):
    """A job in which some other process answers True to every `any` question."""

    def any(self, flag: bool) -> bool:
        return True


def test_a_job_takes_bf16_only_if_every_process_chose_it():
    """bf16 in one process; float32 when another process of the job chose float32, so
    that every process computes the same step."""
    config = tiny_config(train={"precision": "bf16"})
    assert _assemble(Setup.of(config), (), OneProcess()).precision == "bf16"
    assert _assemble(Setup.of(config), (), AnotherProcessSaysYes()).precision == "fp32"


def test_a_model_lives_on_its_parameters_device():
    assert model_device(nn.Linear(2, 2)) == torch.device("cpu")
    assert model_device(nn.Sequential(nn.ReLU(), nn.Linear(2, 2, device="meta"))) == torch.device("meta")
    with pytest.raises(ValueError, match="`model` has no parameters"):
        model_device(nn.ReLU())
