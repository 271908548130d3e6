"""convcli.engines."""
