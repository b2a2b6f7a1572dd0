"""sweep.search: how a sweep chooses, schedules, prices and judges its trials."""
