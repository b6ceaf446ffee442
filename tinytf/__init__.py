"""tinytf: build, train and look inside tiny Transformers.

The two entry points for scripts and notebooks:

    import tinytf
    config = tinytf.load_config("configs/quickstart.yaml", overrides=["model.d_model=64"])
    model = tinytf.build_model(config, vocab_size=32)
"""

from tinytf.config import Config, load_config
from tinytf.errors import ConfigError, UserError
from tinytf.model import build_model

__all__ = ["Config", "ConfigError", "UserError", "build_model", "load_config"]
