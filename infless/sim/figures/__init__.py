"""The papers' figures and tables, reproduced on the simulator (`python -m infless.sim.figures`).

Each figure module computes rows (`figures.table.Rows`) from simulations or plans; the
command writes them as a Markdown table, a PNG and one JSON line. docs/reproduction.md holds
the results beside the papers' numbers. Torch-free; matplotlib only inside `table.write_png`.
"""
