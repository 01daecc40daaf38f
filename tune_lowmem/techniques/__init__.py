"""The memory techniques, each a small unit applied to a model; none imports Ray."""
