"""The public import path of examples framed into batches for an architecture: `from tinytf.framing import get_framing`.

The code lives in tinytf/data/framing.py; scripts and notebooks import from here, so it may move.
"""

from tinytf.data.framing import FRAMINGS, Framing, get_framing

__all__ = ["FRAMINGS", "Framing", "get_framing"]
