"""The public import path of activation patching and attribution: `from tinytf.patching import attribute`.

The code lives in tinytf/inspect/patching.py; scripts and notebooks import from here, so it may move.
"""

from tinytf.inspect.patching import Attribution, PatchReport, Prompts, attribute, patch, prompts_of

__all__ = ["Attribution", "PatchReport", "Prompts", "attribute", "patch", "prompts_of"]
