"""tune-lowmem."""
