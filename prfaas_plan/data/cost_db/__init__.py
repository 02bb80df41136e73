"""The bundled cost data of sizing: inter-datacenter link tiers (``link_tiers.yaml``) and per-site
energy defaults (``sites.yaml``), every entry with its source URL and the date it was read."""
