"""The command line (`tinytf ...`): Typer commands over the library. torch is imported only
once a command that needs it runs."""
