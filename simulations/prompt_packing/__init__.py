"""Dense prompt packing: window-greedy packing vs naive padding, and exact loss equivalence.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``); this face
re-exports what its users need.
"""

from .study import (NAME, CLAIM, Settings, SETTINGS, SCHEMA, sample_lengths, cells, cell, summary,
                    summary_table, report, plot, EXPERIMENT, CAPACITY, EQ_TOL)

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "sample_lengths", "cells", "cell",
           "summary", "summary_table", "report", "plot", "EXPERIMENT", "CAPACITY", "EQ_TOL"]
