"""The public import path of loss, accuracies and predictions: `from tinytf.evaluate import evaluate`.

The code lives in tinytf/inspect/evaluate.py; scripts and notebooks import from here, so it may move.
"""

from tinytf.inspect.evaluate import evaluate, predict

__all__ = ["evaluate", "predict"]
