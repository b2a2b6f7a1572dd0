"""search_spaces: typed family configs, exact accounting, YAML spaces and the iso-budget solver."""
