"""Run options: their checks and the syntax of shape and range options."""
