"""One module per CLI subcommand, each with ``add_arguments(parser)`` and ``run(args) -> int``.

``graphfix IN OUT ...`` is short for ``graphfix fix IN OUT ...``.
"""

#: subcommand -> one-line help; the module graphfix.cli.commands.<name> implements it.
COMMANDS = {
    "fix": "rewrite a model with the pass pipeline, verified pass by pass (the default command)",
    "passes": "list every pass with its summary, the TensorRT errors it fixes and the versions that need it",
    "check": "list the nodes a TensorRT release's ONNX parser will reject, without TensorRT or a GPU",
    "explain": "explain a TensorRT / trtexec / polygraphy build log: failing node, cause, fixing pass",
}
