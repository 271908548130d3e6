"""The tuned internals behind the layers: threads, tiles and both engines (numpy + stdlib only)."""
