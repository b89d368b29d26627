"""Combined operator profiling (INFless §3.3): operator graphs, the profile DB, the predictor."""
