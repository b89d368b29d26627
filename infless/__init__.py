"""infless: a native serverless inference platform (INFless, Tetris, TrIMS on one machine)."""

__version__ = "0.1.0"
