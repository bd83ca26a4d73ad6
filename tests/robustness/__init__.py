"""Hostile and broken input, paths, signals and crashes: one line, exit code, nothing left behind."""
