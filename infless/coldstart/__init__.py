"""Cold starts at run time: idle-time histograms, the fixed, HHP and LSTH policies, and the
prewarm manager's lifecycle decision.

All pure: no I/O, no clock. Modules: `config`, `histogram`, `policies`, `lifecycle`.
The shell that acts on the decisions is `control.prewarm`.
The offline trace evaluation (`infless coldstart-eval`) lives in `infless.offline.coldstart`;
nothing here imports it.
"""
