"""`python -m loadgen ...`: the same command line as `infless loadgen ...`."""

from loadgen.cli import main

raise SystemExit(main())
