"""The companion papers: credit assignment, length weighting, DPPO pruning, dense packing."""
