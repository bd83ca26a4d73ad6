"""The ``graphfix`` command line: argument parsing, one module per subcommand, exits."""
