"""Whole-graph analyses the passes ask: constant folding, origins of values, discrete values."""
