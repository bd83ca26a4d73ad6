"""`graphfix check` and `graphfix explain`: findings, the readiness matrix, the newest opset."""
