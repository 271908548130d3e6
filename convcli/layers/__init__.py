"""convcli.layers."""
