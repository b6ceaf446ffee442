"""The public import path of what training reports to: `from tinytf.loggers import Logger`.

The code lives in tinytf/training/loggers.py; scripts and notebooks import from here, so it may move.
"""

from tinytf.training.loggers import Logger, NullLogger, RecordingLogger

__all__ = ["Logger", "NullLogger", "RecordingLogger"]
