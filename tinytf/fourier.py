"""The public import path of the Fourier spectrum of an embedding of Z_p: `from tinytf.fourier import frequency_norms`.

The code lives in tinytf/inspect/fourier.py; scripts and notebooks import from here, so it may move.
"""

from tinytf.inspect.fourier import frequency_norms

__all__ = ["frequency_norms"]
