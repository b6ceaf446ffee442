"""`python -m tinytf` runs the same CLI as the `tinytf` command."""

from tinytf.cli import main

main()
