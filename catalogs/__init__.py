"""Data package: the YAML catalogs (GPUs, models, precisions) shipped inside the wheel."""
