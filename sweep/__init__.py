"""sweep: the CLI and the Ray Tune driver; where it sits in the data flow: docs/architecture.md."""
