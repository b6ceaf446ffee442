"""tinytf models outside tinytf: files any safetensors reader opens, and TransformerLens.

    from tinytf.interop import export, load_exported, to_transformer_lens
    export(tinytf.load_run(), "transformer-lens", "model.safetensors")   # or "safetensors"
    run = load_exported("model.safetensors")                              # back, with identical logits
    model = to_transformer_lens(run)      # a live TransformerLens 4 model (the `tl` extra)

`tinytf export --to ... --out FILE [--run RUN_DIR]` writes the file from the shell.
docs/interop.md shows how TransformerLens loads it.
"""

from tinytf.interop.files import FORMATS, export, load_exported
from tinytf.interop.transformer_lens import to_transformer_lens

__all__ = ["FORMATS", "export", "load_exported", "to_transformer_lens"]
