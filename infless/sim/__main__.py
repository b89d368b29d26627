"""`python -m infless.sim`: compare scaling policies on a simulated mix."""

from infless.sim.scenarios import main

raise SystemExit(main())
