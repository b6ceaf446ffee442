"""The public import path of attention maps for one input: `from tinytf.attend import attention_report`.

The code lives in tinytf/inspect/attend.py; scripts and notebooks import from here, so it may move.
"""

from tinytf.inspect.attend import AttentionReport, attention_report

__all__ = ["AttentionReport", "attention_report"]
