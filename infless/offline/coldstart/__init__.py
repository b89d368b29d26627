"""The cold-start evaluation: replay an Azure Functions trace through the cold-start policies.

Pure core (no I/O, no clock): `replay`, `evaluate`, `splits`.
Shell: `trace` (file loading), `report` and `split_report` (tables, JSON, plot), `commands`
(the `infless coldstart-eval` subcommand).
The policies themselves are the runtime's, in `infless.coldstart`.
"""
