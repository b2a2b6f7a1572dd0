"""dashboards: figures, the report and the live server; where they sit: docs/architecture.md."""
