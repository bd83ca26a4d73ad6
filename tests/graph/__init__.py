"""The graph layer: the linear importer."""
