"""The public import path of examples framed into batches for an architecture: `from tinytf.framing import Framing`.

The code lives in tinytf/data/framing.py; scripts and notebooks import from here, so it may move.
"""

from tinytf.data.framing import Framing, get_framing

__all__ = ["Framing", "get_framing"]
