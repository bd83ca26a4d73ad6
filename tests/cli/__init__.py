"""The command line: commands, progress, bounded numbers and exit codes."""
