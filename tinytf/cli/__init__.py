"""The command line (`tinytf ...`): Typer commands over the library. torch is imported only
once a command that needs it runs."""


def main() -> None:
    """The `tinytf` command (pyproject.toml's entry point; `python -m tinytf` too)."""
    from tinytf.cli.app import main as run

    run()
