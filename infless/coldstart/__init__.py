"""Cold starts: idle-time histograms, the fixed / HHP / LSTH policies, the prewarm manager's
lifecycle decision (its shell is `control.prewarm`), and the offline trace evaluation
(`infless coldstart-eval`).

Pure core (no I/O, no clock): `config`, `histogram`, `policies`, `lifecycle`, `replay`,
`evaluate`.
Shell: `trace` (file loading), `report` (tables, JSON, plot), `commands` (CLI).
"""
