"""Fixed sizes of training's work that no config key sets, torch-free: the trainer uses
them and the memory estimate (memory.py) counts them, both from here."""

# Held-out examples (the first ones: the same at every log) every head is scored on, with
# log.head_scores. Enough for scores steady to about +-0.02; cheap next to the steps between
# two logs.
N_HEAD_SCORE_INPUTS = 64

# Held-out (or training-set) examples scored at once at an evaluation.
EVAL_BATCH = 500
