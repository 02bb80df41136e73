"""The bundled serving-engine profiles: one validated YAML file per engine configuration, with sources."""
