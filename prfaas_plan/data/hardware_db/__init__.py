"""The bundled hardware database: one validated YAML file per accelerator, each citing its sources."""
