"""A run: settings, the pass manager, whole-model steps, feeds, verification of regions."""
