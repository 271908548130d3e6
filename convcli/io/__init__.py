"""convcli.io."""
