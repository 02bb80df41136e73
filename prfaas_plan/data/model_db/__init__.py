"""The bundled model database: one validated YAML file per model, each citing its public config."""
