"""pytest configuration shared by the tests and the notebooks that nbval checks."""
import os

# nbval compares every cell's outputs with the committed ones, which the notebook kernel's own
# (inline) matplotlib backend wrote: a figure is one of a cell's outputs. A backend forced through
# MPLBACKEND (Agg is common on headless machines) would drop those outputs and fail every cell that
# draws, so the kernels nbval starts must not inherit it.
os.environ.pop("MPLBACKEND", None)
