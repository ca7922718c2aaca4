"""`python -m specguard_graph.cli`: the same as the `specguard` command."""

from . import main

main()
