"""Warm-instance model transformation (Optimus): structures, planning, meta-operators."""
