"""convcli.levels."""
