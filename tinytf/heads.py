"""The public import path of a score per head and pattern: `from tinytf.heads import head_scores`.

The code lives in tinytf/inspect/heads.py; scripts and notebooks import from here, so it may move.
"""

from tinytf.inspect.heads import HeadReport, head_scores

__all__ = ["HeadReport", "head_scores"]
