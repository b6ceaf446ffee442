"""The public import path of what training reports to: `from tinytf.loggers import RecordingLogger`.

The code lives in tinytf/training/loggers.py; scripts and notebooks import from here, so it may move.
"""

from tinytf.training.loggers import (
    Logger,
    MetricsFileLogger,
    NullLogger,
    ProgressBarLogger,
    RecordingLogger,
    TensorBoardLogger,
)

__all__ = ["Logger", "MetricsFileLogger", "NullLogger", "ProgressBarLogger", "RecordingLogger", "TensorBoardLogger"]
