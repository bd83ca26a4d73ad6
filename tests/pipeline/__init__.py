"""The pipeline: the pass manager and the whole-model steps (--simplify, --fix-shapes)."""
