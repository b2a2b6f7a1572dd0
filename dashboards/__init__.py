"""dashboards: see DESIGN in README."""
