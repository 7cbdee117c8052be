"""`python -m api.cli`: the `gpuplan` command without the console script (e.g. in Ray jobs)."""

from api.cli import main

main()
