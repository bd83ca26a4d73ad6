"""One test module per pass (graphfix/passes/<name>.py), the pass registry and the fixtures."""
