"""python3 -m rebound_bench (from benches/): the same as scripts/bench."""

from .cli import main

main()
