"""One run: its setup (a config checked against its task), its folder, its checkpoints."""
